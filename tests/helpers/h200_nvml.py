"""A stand-in `pynvml` answering as the H200s of tests/data/gpu answered (no GPU, no nvidia-ml-py here).

Each value is the captured one in NVML's own units (nvidia-ml-py's docs: power and power limit in mW,
the energy counter in mJ, memory in bytes, clocks in MHz, utilisation in %, temperature in C), so what
slurmx derives from them can be compared with the files the real runs wrote. Put it in place with
`monkeypatch.setitem(sys.modules, "pynvml", H200Nvml(...))`: `import pynvml` then returns it.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu"
H200 = DATA / "h200"
MIB = 2**20

# pynvml's constants, as nvidia-ml-py defines them
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0


class NVMLError(Exception):
    """pynvml's error base; `NVMLError(3)` is NVML_ERROR_NOT_SUPPORTED, what an N/A field raises."""


@dataclass(frozen=True)
class Handle:
    index: int


class Memory:
    """nvmlDeviceGetMemoryInfo's answer; `used` is read when asked (the sampler asks once a round, the
    device description only for `total`)."""

    def __init__(self, total: int, used: Callable[[], int]) -> None:
        self.total = total
        self._used = used

    @property
    def used(self) -> int:
        return self._used()


@dataclass(frozen=True)
class Utilization:
    gpu: int
    memory: int


@dataclass(frozen=True)
class PciInfo:
    busId: bytes  # noqa: N815  (pynvml's field name)


@dataclass(frozen=True)
class Process:
    pid: int
    usedGpuMemory: int | None  # noqa: N815  (pynvml's field name)


@dataclass
class Gpu:
    """One device: its captured identity, fixed readings, and per-call series where the run recorded them."""

    uuid: str
    name: str = "NVIDIA H200"
    pci_bus_id: str = "00000000:00:06.0"  # nvidia-smi -q, telemetry.json
    power_limit_mw: int = 700_000  # "Current Power Limit : 700.00 W"
    memory_total: int = 143771 * MIB  # "FB Memory Usage Total : 143771 MiB"
    memory_used: int = 0
    compute: list[Process] = field(default_factory=list)
    graphics: list[Process] = field(default_factory=list)
    ecc_uncorrected_volatile: int = 0  # nvidia-smi -q: every ECC count 0
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # "Remapped Rows": 0 corr, 0 uncorr, no pending, no failure
    retired_pages_pending: bool | None = None  # "Pending Page Blacklist : N/A": NVML answers NOT_SUPPORTED
    # one value per call, in call order (a sampler round reads each once); None: the fixed reading above
    series: dict[str, list[Any]] | None = None


class H200Nvml:
    """The `pynvml` module as a node with these GPUs shows it."""

    NVMLError = NVMLError
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC

    def __init__(self, gpus: list[Gpu], uuid_bytes: bool = False, init_error: Exception | None = None) -> None:
        self.gpus = gpus
        self.uuid_bytes = uuid_bytes  # nvidia-ml-py before 12 answers bytes, later ones str
        self.init_error = init_error
        self.initialised = 0
        self.shutdowns = 0
        self.calls: dict[tuple[int, str], int] = defaultdict(int)

    # --- the library ---
    def nvmlInit(self) -> None:  # noqa: N802
        if self.init_error is not None:
            raise self.init_error
        self.initialised += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Handle:  # noqa: N802
        if not 0 <= i < len(self.gpus):
            raise NVMLError(2)  # NVML_ERROR_INVALID_ARGUMENT
        return Handle(i)

    def nvmlDeviceGetUUID(self, h: Handle) -> str | bytes:  # noqa: N802
        uuid = self._gpu(h).uuid
        return uuid.encode() if self.uuid_bytes else uuid

    def nvmlDeviceGetName(self, h: Handle) -> bytes:  # noqa: N802
        return self._gpu(h).name.encode()

    def nvmlDeviceGetPciInfo(self, h: Handle) -> PciInfo:  # noqa: N802
        return PciInfo(self._gpu(h).pci_bus_id.encode())

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Handle) -> int:  # noqa: N802
        return self._gpu(h).power_limit_mw

    # --- readings: a series where the capture has one, else the fixed value ---
    def nvmlDeviceGetMemoryInfo(self, h: Handle) -> Memory:  # noqa: N802
        gpu = self._gpu(h)
        return Memory(gpu.memory_total, lambda: int(self._next(h, "memory_used", gpu.memory_used)))

    def nvmlDeviceGetPowerUsage(self, h: Handle) -> int:  # noqa: N802
        return int(self._next(h, "power_mw", None))

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Handle) -> int:  # noqa: N802
        return int(self._next(h, "energy_mj", None))

    def nvmlDeviceGetClockInfo(self, h: Handle, kind: int) -> int:  # noqa: N802
        names = {NVML_CLOCK_SM: "sm_mhz", NVML_CLOCK_MEM: "mem_mhz"}
        if kind not in names:
            raise NVMLError(2)
        return int(self._next(h, names[kind], None))

    def nvmlDeviceGetUtilizationRates(self, h: Handle) -> Utilization:  # noqa: N802
        return Utilization(int(self._next(h, "util_gpu", None)), int(self._next(h, "util_mem", None)))

    def nvmlDeviceGetTemperature(self, h: Handle, sensor: int) -> int:  # noqa: N802
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(2)
        return int(self._next(h, "temperature_c", None))

    def nvmlDeviceGetComputeRunningProcesses(self, h: Handle) -> list[Process]:  # noqa: N802
        return list(self._gpu(h).compute)

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: Handle) -> list[Process]:  # noqa: N802
        return list(self._gpu(h).graphics)

    def nvmlDeviceGetTotalEccErrors(self, h: Handle, error_type: int, counter: int) -> int:  # noqa: N802
        gpu = self._gpu(h)
        if (error_type, counter) != (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC):
            raise NVMLError(2)  # only the count slurmx asks for is recorded
        return gpu.ecc_uncorrected_volatile

    def nvmlDeviceGetRemappedRows(self, h: Handle) -> tuple[int, int, int, int]:  # noqa: N802
        return self._gpu(h).remapped_rows

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: Handle) -> int:  # noqa: N802
        pending = self._gpu(h).retired_pages_pending
        if pending is None:
            raise NVMLError(3)
        return int(pending)

    def _gpu(self, h: Handle) -> Gpu:
        if not isinstance(h, Handle):
            raise NVMLError(2)  # what the real library answers for a handle it did not give
        return self.gpus[h.index]

    def _next(self, h: Handle, key: str, fixed: Any) -> Any:
        gpu = self._gpu(h)
        series = (gpu.series or {}).get(key)
        if series is None:
            if fixed is None:
                raise NVMLError(3)
            return fixed
        n = self.calls[(h.index, key)]
        self.calls[(h.index, key)] += 1
        if n >= len(series):
            raise AssertionError(f"{key} read {n + 1} times, the capture has {len(series)}")
        return series[n]


def h200_metrics_rows() -> list[dict[str, str]]:
    with (H200 / "gpu_metrics.csv").open() as f:
        return list(csv.DictReader(f))


def energy_snapshot_j(name: str) -> float:
    with (H200 / name).open() as f:
        return float(next(csv.DictReader(f))["total_energy_consumption"])


def h200_sampled() -> Gpu:
    """The first H200 as its NVML sampler saw it, call by call: the energy counter once before the rounds
    (gpu_metrics_energy_start.csv), once a round, once after (gpu_metrics_energy_end.csv)."""
    rows = h200_metrics_rows()

    def col(name: str, factor: float) -> list[int]:
        return [round(float(r[name]) * factor) for r in rows]

    energy = [
        round(energy_snapshot_j("gpu_metrics_energy_start.csv") * 1000),
        *col("energy.total [J]", 1000),
        round(energy_snapshot_j("gpu_metrics_energy_end.csv") * 1000),
    ]
    return Gpu(
        uuid=first_h200_uuid(),
        series={
            "power_mw": col("power.draw [W]", 1000),
            "energy_mj": energy,
            "memory_used": col("memory.used [MiB]", MIB),
            "sm_mhz": col("clocks.current.sm [MHz]", 1),
            "mem_mhz": col("clocks.current.memory [MHz]", 1),
            "util_gpu": col("utilization.gpu [%]", 1),
            "util_mem": col("utilization.memory [%]", 1),
            "temperature_c": col("temperature.gpu", 1),
        },
    )


def first_h200_uuid() -> str:
    return str(json.loads((H200 / "telemetry.json").read_text())["devices"][0]["uuid"])


def dirty_state(run: str) -> dict[str, Any]:
    """The GPU state scripts/gpu/h200_proof.py recorded while a foreign process held 4 GiB (`h200`, `h200-rerun`)."""
    return dict(json.loads((DATA / run / "proof_summary.json").read_text())["gpu_states_dirty"][0])


def h200_dirty(run: str) -> Gpu:
    """That GPU as NVML showed it: memory used, the holder among the compute processes, ECC as captured."""
    state = dirty_state(run)
    return Gpu(
        uuid=state["uuid"],
        memory_used=round(state["memory_used_mib"] * MIB),
        compute=[Process(p["pid"], round(p["used_mib"] * MIB)) for p in state["processes"]],
        ecc_uncorrected_volatile=state["ecc_uncorrected_volatile"],
        remapped_rows=(0, 0, 0, int(state["remapping_failed"])),
    )
