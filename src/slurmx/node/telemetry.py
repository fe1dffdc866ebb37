"""GPU telemetry for a whole point: one supervised sampler process writing CSV into the point's directory.

`python -m slurmx.node.telemetry --out DIR` samples every GPU of the allocation (CUDA_VISIBLE_DEVICES,
by index or UUID) at a set interval until SIGTERM: power, the driver's total-energy counter, memory
used, SM and memory clocks, utilisation and temperature. NVML (nvidia-ml-py) first, `nvidia-smi
--query-gpu` when NVML cannot load. Timestamps are epoch seconds (no time zone to guess), and the
columns follow InferenceX's `gpu_metrics.csv` (`timestamp`, `index`, `power.draw [W]`), so its
`aggregate_power.py` reads the same file. The energy counter is also written as InferenceX's
accumulator snapshots (`gpu_metrics_energy_start.csv` / `_end.csv`, `gpu,total_energy_consumption`
in joules) for its cross-check. On a node without GPUs the sampler writes `telemetry.json` saying why
and exits 0: nothing fails for want of telemetry.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from slurmx.node import gpus as node_gpus
from slurmx.results.energy import INFO_JSON, METRICS_CSV
from slurmx.store import atomic

__all__ = ["INFO_JSON", "METRICS_CSV", "run", "telemetry_argv"]
ENERGY_START_CSV = "gpu_metrics_energy_start.csv"
ENERGY_END_CSV = "gpu_metrics_energy_end.csv"
DEFAULT_INTERVAL_S = 0.5
COLUMNS = (
    "timestamp",
    "index",
    "power.draw [W]",
    "energy.total [J]",
    "memory.used [MiB]",
    "clocks.current.sm [MHz]",
    "clocks.current.memory [MHz]",
    "utilization.gpu [%]",
    "utilization.memory [%]",
    "temperature.gpu",
)
SMI_QUERY = (
    "index,uuid,power.draw,memory.used,clocks.current.sm,clocks.current.memory,"
    "utilization.gpu,utilization.memory,temperature.gpu"
)


@dataclass(frozen=True)
class Sample:
    """One reading of one GPU; None where the driver gave no value."""

    timestamp: float
    index: str
    power_w: float | None
    energy_j: float | None
    memory_used_mib: float | None
    sm_clock_mhz: float | None
    mem_clock_mhz: float | None
    gpu_util_pct: float | None
    mem_util_pct: float | None
    temperature_c: float | None

    def row(self) -> list[str]:
        values = (
            self.power_w,
            self.energy_j,
            self.memory_used_mib,
            self.sm_clock_mhz,
            self.mem_clock_mhz,
            self.gpu_util_pct,
            self.mem_util_pct,
            self.temperature_c,
        )
        return [f"{self.timestamp:.6f}", self.index, *("" if v is None else f"{v:g}" for v in values)]


class NvmlSource:
    """NVML through nvidia-ml-py: power in mW, the total-energy counter in mJ since driver load."""

    name = "nvml"

    def __init__(self, wanted: list[str] | None) -> None:
        self._nvml = node_gpus.open_nvml()
        devices = node_gpus.nvml_devices(self._nvml)
        handles = {index: handle for index, _, handle in devices}
        self.gpus = node_gpus.select([(index, uuid) for index, uuid, _ in devices], wanted)
        self._handles = [handles[index] for index, _ in self.gpus]
        self.devices = [
            self._describe(index, uuid, h) for (index, uuid), h in zip(self.gpus, self._handles, strict=True)
        ]

    def _describe(self, index: str, uuid: str, handle: Any) -> dict[str, Any]:
        nv = self._nvml
        return {
            "index": index,
            "uuid": uuid,
            "name": _text(_try(lambda: nv.nvmlDeviceGetName(handle))),
            "pci_bus_id": _text(_try(lambda: nv.nvmlDeviceGetPciInfo(handle).busId)),
            "power_limit_w": _scaled(_try(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle)), 1e-3),
            "memory_total_mib": _scaled(_try(lambda: nv.nvmlDeviceGetMemoryInfo(handle).total), 1 / 2**20),
        }

    def energy_j(self) -> dict[str, float | None]:
        nv = self._nvml
        return {
            index: _scaled(_call(nv.nvmlDeviceGetTotalEnergyConsumption, h), 1e-3)
            for (index, _), h in zip(self.gpus, self._handles, strict=True)
        }

    def read(self) -> list[Sample]:
        nv = self._nvml
        out = []
        for (index, _), h in zip(self.gpus, self._handles, strict=True):
            now = time.time()
            util = _call(nv.nvmlDeviceGetUtilizationRates, h)
            out.append(
                Sample(
                    timestamp=now,
                    index=index,
                    power_w=_scaled(_call(nv.nvmlDeviceGetPowerUsage, h), 1e-3),
                    energy_j=_scaled(_call(nv.nvmlDeviceGetTotalEnergyConsumption, h), 1e-3),
                    memory_used_mib=_scaled(_attr(_call(nv.nvmlDeviceGetMemoryInfo, h), "used"), 1 / 2**20),
                    sm_clock_mhz=_scaled(_call(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM), 1),
                    mem_clock_mhz=_scaled(_call(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM), 1),
                    gpu_util_pct=_scaled(util.gpu if util is not None else None, 1),
                    mem_util_pct=_scaled(util.memory if util is not None else None, 1),
                    temperature_c=_scaled(_call(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU), 1),
                )
            )
        return out

    def close(self) -> None:
        node_gpus.close_nvml(self._nvml)


class SmiSource:
    """`nvidia-smi --query-gpu` once per interval (no energy counter: the CSV leaves that column empty)."""

    name = "nvidia-smi"

    def __init__(self, wanted: list[str] | None, smi: str = "nvidia-smi") -> None:
        self._smi = smi
        rows = self._query()
        ids = [(row[0], row[1]) for row in rows]
        self.gpus = node_gpus.select(ids, wanted)
        self.devices = [{"index": index, "uuid": uuid} for index, uuid in self.gpus]

    def _query(self) -> list[list[str]]:
        out = subprocess.run(
            [self._smi, f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            start_new_session=True,  # the job's teardown TERMs our group: the last query must still answer
        ).stdout
        return parse_smi_rows(out)

    def energy_j(self) -> dict[str, float | None]:
        return {index: None for index, _ in self.gpus}

    def read(self) -> list[Sample]:
        now = time.time()
        wanted = {index for index, _ in self.gpus}
        try:
            rows = self._query()
        except (OSError, subprocess.SubprocessError):
            return []  # one missed round is a gap InferenceX's rules judge; a dead sampler is no data at all
        return [smi_sample(row, now) for row in rows if row[0] in wanted]

    def close(self) -> None:
        return None


def parse_smi_rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in row] for row in csv.reader(text.splitlines()) if row]


def smi_sample(row: Sequence[str], timestamp: float) -> Sample:
    """One `--query-gpu=SMI_QUERY --format=csv,noheader,nounits` row as a Sample."""
    values = [_number(cell) for cell in row[2:]]
    power, mem, sm, memclk, util, mutil, temp = values
    return Sample(timestamp, row[0], power, None, mem, sm, memclk, util, mutil, temp)


def open_source(env: dict[str, str]) -> tuple[NvmlSource | SmiSource | None, list[str]]:
    """NVML, else nvidia-smi; else None with the reasons each was not usable."""
    wanted = node_gpus.visible(env)
    reasons = []
    if wanted == []:
        return None, ["CUDA_VISIBLE_DEVICES is empty: no GPU granted"]
    try:
        source: NvmlSource | SmiSource = NvmlSource(wanted)
    except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        reasons.append(f"nvml: {type(exc).__name__}: {exc}".strip())
    else:
        if source.gpus:
            return source, reasons
        reasons.append(f"nvml: none of CUDA_VISIBLE_DEVICES={env.get(node_gpus.VISIBLE_ENV)} found")
        source.close()
    smi = shutil.which("nvidia-smi", path=env.get("PATH", os.defpath))  # the job's PATH, not this process's
    if smi is None:
        reasons.append("nvidia-smi: not on PATH")
        return None, reasons
    try:
        source = SmiSource(wanted, smi)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        reasons.append(f"nvidia-smi: {type(exc).__name__}: {exc}".splitlines()[0])
        return None, reasons
    if not source.gpus:
        reasons.append("nvidia-smi: no GPU of the allocation found")
        return None, reasons
    return source, reasons


def write_energy_snapshot(path: Path, energy_j: dict[str, float | None]) -> None:
    """InferenceX's accumulator snapshot format (`gpu,total_energy_consumption`, joules)."""
    known = {index: value for index, value in energy_j.items() if value is not None}
    if not known:
        return
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["gpu", "total_energy_consumption"])
        for index, value in known.items():
            writer.writerow([index, f"{value:.3f}"])


def sample_until_stopped(
    source: NvmlSource | SmiSource,
    out_dir: Path,
    interval_s: float,
    stop: Callable[[], bool],
    max_samples: int | None = None,
) -> int:
    """Rows to `gpu_metrics.csv` (flushed each round) until `stop()`; returns the rounds written."""
    write_energy_snapshot(out_dir / ENERGY_START_CSV, source.energy_j())
    rounds = 0
    with (out_dir / METRICS_CSV).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        next_at = time.monotonic()
        while not stop():
            for sample in source.read():
                writer.writerow(sample.row())
            f.flush()
            rounds += 1
            if max_samples is not None and rounds >= max_samples:
                break
            next_at += interval_s
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_at = time.monotonic()
        # one more round after the stop, so the window's end is bracketed (InferenceX does the same)
        for sample in source.read():
            writer.writerow(sample.row())
    write_energy_snapshot(out_dir / ENERGY_END_CSV, source.energy_j())
    return rounds


def run(
    out_dir: Path, interval_s: float, env: dict[str, str], max_samples: int | None = None, absent: str | None = None
) -> int:
    """`absent`: the cluster profile's reason this node's GPUs cannot be sampled (recorded; nothing is opened)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stopping = {"now": False}

    def on_term(signum: int, frame: FrameType | None) -> None:
        stopping["now"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    source, reasons = open_source(env) if absent is None else (None, [absent])
    info: dict[str, Any] = {
        "source": source.name if source else "none",
        "interval_s": interval_s,
        "cuda_visible_devices": env.get(node_gpus.VISIBLE_ENV),
        "devices": source.devices if source else [],
        "fallback_reasons": reasons,
        "started_at": time.time(),
    }
    if source is None:
        info["absent_reason"] = "; ".join(reasons)
        _write_json(out_dir / INFO_JSON, info)
        print(f"telemetry: no GPU telemetry on this node: {info['absent_reason']}", flush=True)
        return 0
    _write_json(out_dir / INFO_JSON, info)
    print(f"telemetry: {source.name}, GPUs {[index for index, _ in source.gpus]}, every {interval_s:g} s", flush=True)
    try:
        rounds = sample_until_stopped(source, out_dir, interval_s, lambda: stopping["now"], max_samples)
    finally:
        source.close()
    info.update(ended_at=time.time(), rounds=rounds)
    _write_json(out_dir / INFO_JSON, info)
    return 0


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(atomic.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def telemetry_argv(
    python: str, out_dir: Path, interval_s: float = DEFAULT_INTERVAL_S, absent: str | None = None
) -> list[str]:
    """The sampler as the supervisor starts it (with the interpreter that runs the job body)."""
    argv = [python, "-m", "slurmx.node.telemetry", "--out", str(out_dir), "--interval-s", f"{interval_s:g}"]
    return [*argv, "--absent", absent] if absent else argv


def await_sample_after(out_dir: Path, after_unix: float, timeout_s: float = 3.0) -> bool:
    """Wait until the sampler has a row past `after_unix`, so the window's end is bracketed.

    Returns False at once where no sampler samples (no GPU), or after `timeout_s` without one."""
    info_path, csv_path = out_dir / INFO_JSON, out_dir / METRICS_CSV
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if json.loads(info_path.read_text()).get("source", "none") == "none":
                return False
            last = csv_path.read_text().rstrip("\n").rsplit("\n", 1)[-1]
            if float(last.split(",", 1)[0]) > after_unix:
                return True
        except (OSError, ValueError):
            pass  # not written yet, or a half-written last line
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def _try(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception:  # NVMLError_NotSupported and friends: that field is unknown, the rest still counts
        return None


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported and friends: that field is unknown, the rest still counts
        return None


def _attr(value: Any, name: str) -> Any:
    return getattr(value, name, None) if value is not None else None


def _scaled(value: Any, factor: float) -> float | None:
    if value is None:
        return None
    try:
        return float(value) * factor
    except (TypeError, ValueError):
        return None


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="GPU telemetry sampler (until SIGTERM)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--interval-s", type=float, default=DEFAULT_INTERVAL_S)
    parser.add_argument("--max-samples", type=int, default=None)
    parser.add_argument("--absent", metavar="REASON", help="sample nothing and record why (the cluster profile's)")
    args = parser.parse_args(argv)
    return run(args.out, args.interval_s, dict(os.environ), args.max_samples, args.absent)


if __name__ == "__main__":
    sys.exit(main())
