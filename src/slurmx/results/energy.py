"""Energy over a point's measured window, by InferenceX's power contract (utils/aggregate_power.py,
utils/agentic/power_adapter.py, POWER_METRIC_SCHEMA_VERSION 2).

Rules taken from there, unchanged: power is integrated per GPU with the trapezoid rule and linear
interpolation at the window's two ends; every GPU must bracket both ends, have at least two samples
and no in-window gap over 3 s; the GPU count must match tp*pp*pcp; duplicate timestamps are averaged;
an unparseable timestamp or a negative power is a reason, not a skip. The window is aiperf's
start_time/end_time, `completed` is the count of profiled records and the token counts are the sums
of their input/output sequence lengths. `avg_power_w` is the per-GPU mean, `avg_total_gpu_power_w`
the whole deployment's. The reasons are InferenceX's codes. Only stdlib: this module also runs on
GPU machines that lack slurmx's dependencies.

slurmx adds (in its own block): per-GPU energy, peak power, tokens per second per kW and the driver's
energy counter over the same window, interpolated at both ends, as an independent check.
"""

from __future__ import annotations

import bisect
import contextlib
import csv
import functools
import math
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from statistics import mean
from typing import Any

POWER_METRIC_SCHEMA_VERSION = 2
# the sampler's files in its directory (node/telemetry.py writes them)
METRICS_CSV = "gpu_metrics.csv"
INFO_JSON = "telemetry.json"
INTEGRATION_METHOD = "per_device_trapezoidal_with_linear_boundary_interpolation"
MAX_SAMPLE_GAP_S = 3.0

# Which CSV column holds what, by its header (our sampler's, or an nvidia-smi query's with units).
_GPU_ID_NAMES = frozenset({"index", "gpu", "gpu_id", "gpu_index", "card", "device"})
_NOT_A_READING = ("limit", "cap", "max", "min")  # power.limit, enforced.power.max, ... are not samples
_DECIMAL = re.compile(r"[-+]?\d+(?:\.\d+)?")
_MISSING = frozenset({"", "n/a", "[n/a]", "na"})
# nvidia-smi's timestamp column, in the node's local time
_SMI_LAYOUTS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")


def _columns(header: list[str]) -> dict[str, str | None]:
    """The time, power, GPU id and energy-counter columns of a telemetry CSV (None where absent)."""
    lower = {name: name.lower() for name in header}
    return {
        "time": next((n for n, low in lower.items() if "time" in low), None),
        "power": next(
            (n for n, low in lower.items() if "power" in low and not any(w in low for w in _NOT_A_READING)), None
        ),
        "gpu": next((n for n, low in lower.items() if low in _GPU_ID_NAMES), None),
        "energy": next((n for n, low in lower.items() if low.startswith("energy.total")), None),
    }


Series = list[tuple[float, float]]


@dataclass(frozen=True)
class Window:
    """The benchmark window and the counts energy is normalised by (InferenceX's BenchmarkData)."""

    start_unix: float
    end_unix: float
    completed: int
    total_input_tokens: int
    total_output_tokens: int

    @property
    def duration_s(self) -> float:
        return self.end_unix - self.start_unix


@dataclass
class Telemetry:
    """Samples per GPU id: power (W) and, where the source has it, the energy counter (J)."""

    power: dict[str, Series] = field(default_factory=dict)
    energy_counter: dict[str, Series] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)  # read-time problems, InferenceX's codes


@dataclass(frozen=True)
class Energy:
    power_valid: bool
    reasons: list[str]
    observed_gpu_ids: list[str]
    per_gpu_energy_j: dict[str, float]
    per_gpu_max_sample_gap_s: dict[str, float]
    per_gpu_sample_counts: dict[str, int]
    total_gpu_energy_j: float | None = None
    avg_total_gpu_power_w: float | None = None
    avg_power_w: float | None = None
    peak_power_w: float | None = None  # the highest single-GPU sample inside the window
    counter_energy_j: float | None = None  # the driver's total-energy counter over the same window

    def metrics(self, window: Window) -> dict[str, float]:
        """InferenceX's metric keys (only for a valid measurement, as it writes them)."""
        if not self.power_valid or self.total_gpu_energy_j is None:
            return {}
        energy = self.total_gpu_energy_j
        assert self.avg_power_w is not None and self.avg_total_gpu_power_w is not None
        return {
            "avg_power_w": self.avg_power_w,
            "avg_total_gpu_power_w": self.avg_total_gpu_power_w,
            "total_gpu_energy_j": energy,
            "joules_per_successful_query": energy / window.completed,
            "joules_per_input_token": energy / window.total_input_tokens,
            "joules_per_output_token": energy / window.total_output_tokens,
            "joules_per_total_token": energy / (window.total_input_tokens + window.total_output_tokens),
        }

    def tokens_per_s_per_kw(self, window: Window) -> dict[str, float] | None:
        if not self.power_valid or not self.avg_total_gpu_power_w:
            return None
        kw = self.avg_total_gpu_power_w / 1000.0
        total = window.total_input_tokens + window.total_output_tokens
        return {
            "output": window.total_output_tokens / window.duration_s / kw,
            "total": total / window.duration_s / kw,
        }


def _append(reasons: list[str], reason: str) -> None:
    if reason not in reasons:
        reasons.append(reason)


def parse_timestamp(text: str) -> float | None:
    """Epoch seconds from a sampler's timestamp: a number (milliseconds when past 1e12), nvidia-smi's
    local `YYYY/MM/DD HH:MM:SS[.f]`, or ISO 8601 (naive means local time)."""
    text = text.strip()
    if not text:
        return None
    if _DECIMAL.fullmatch(text):
        seconds = float(text)
        return seconds / 1000.0 if seconds > 1e12 else seconds
    for layout in _SMI_LAYOUTS:
        with contextlib.suppress(ValueError):
            return datetime.strptime(text, layout).timestamp()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment.astimezone(UTC).timestamp() if moment.tzinfo else moment.timestamp()


def parse_number(text: str) -> float | None:
    """The first number in a cell ("412.31 W" -> 412.31); None for an empty or N/A cell."""
    if text.strip().lower() in _MISSING:
        return None
    found = _DECIMAL.search(text)
    return float(found.group()) if found else None


def _cell(cells: list[str], where: dict[str, int | None], role: str) -> str:
    index = where[role]
    return cells[index] if index is not None and index < len(cells) else ""


def read_telemetry(csv_path: Path, window: Window | None = None, max_gap_s: float = MAX_SAMPLE_GAP_S) -> Telemetry:
    """The sampler's CSV (or an nvidia-smi query's); rows far outside the window are not kept."""
    out = Telemetry()
    if not csv_path.is_file():  # absent, or not a file (a directory)
        return Telemetry(reasons=["telemetry_file_missing"])
    try:
        lines = csv_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:  # there but not readable (permissions, an I/O error)
        return Telemetry(reasons=["telemetry_file_unreadable"])
    if not lines:
        return Telemetry(reasons=["telemetry_file_empty"])
    reader = csv.reader(lines)
    try:
        header = [name.strip() for name in next(reader, [])]
    except csv.Error:
        return Telemetry(reasons=["telemetry_file_unreadable"])
    where = {role: header.index(name) if name is not None else None for role, name in _columns(header).items()}
    missing = [
        ("time", "timestamp_column_missing"),
        ("power", "power_column_missing"),
        ("gpu", "gpu_identity_column_missing"),
    ]
    out.reasons = [reason for role, reason in missing if where[role] is None]
    if out.reasons:
        return out
    keep_from, keep_to = (
        (-math.inf, math.inf) if window is None else (window.start_unix - max_gap_s, window.end_unix + max_gap_s)
    )
    powers: dict[str, dict[float, list[float]]] = {}
    counters: dict[str, dict[float, float]] = {}
    unnamed = False  # a sample without its GPU's id: said once, after the rows (InferenceX's reason order)
    try:
        for row in reader:
            cells = [text.strip() for text in row]
            cell = functools.partial(_cell, cells, where)
            at = parse_timestamp(cell("time"))
            if at is None or not math.isfinite(at):
                _append(out.reasons, "invalid_timestamp_sample")
                continue
            if not keep_from <= at <= keep_to:
                continue
            watts, gpu = parse_number(cell("power")), cell("gpu")
            if watts is None or not math.isfinite(watts) or watts < 0:
                _append(out.reasons, "invalid_power_sample")
            elif not gpu:
                unnamed = True
            else:
                powers.setdefault(gpu, {}).setdefault(at, []).append(watts)  # equal timestamps are averaged below
                joules = parse_number(cell("energy")) if where["energy"] is not None else None
                if joules is not None:
                    counters.setdefault(gpu, {})[at] = joules
    except csv.Error:  # a row the reader refuses (a field over its size limit): the file is not read, as InferenceX
        _append(out.reasons, "telemetry_file_unreadable")
        return Telemetry(reasons=out.reasons)
    if unnamed:
        _append(out.reasons, "gpu_identity_missing")
    if not powers:  # however many rows were refused, as InferenceX says it
        _append(out.reasons, "no_usable_power_samples")
    out.power = {gpu: sorted((at, mean(ws)) for at, ws in by_time.items()) for gpu, by_time in powers.items()}
    out.energy_counter = {gpu: sorted(by_time.items()) for gpu, by_time in counters.items()}
    return out


def interpolate(samples: Series, at: float) -> float:
    """The value at `at`, linear between the samples that bracket it."""
    times = [t for t, _ in samples]
    right = bisect.bisect_left(times, at)
    if right < len(samples) and math.isclose(samples[right][0], at, rel_tol=0.0, abs_tol=1e-9):
        return samples[right][1]
    left = right - 1
    if left < 0 or right >= len(samples):
        raise ValueError("timestamp is not bracketed")
    (t0, v0), (t1, v1) = samples[left], samples[right]
    return v0 + (at - t0) / (t1 - t0) * (v1 - v0)


def integrate_device(samples: Series, start_unix: float, end_unix: float) -> float:
    clipped = [(start_unix, interpolate(samples, start_unix))]
    clipped += [(t, p) for t, p in samples if start_unix < t < end_unix]
    clipped.append((end_unix, interpolate(samples, end_unix)))
    return sum((t1 - t0) * (p0 + p1) / 2.0 for (t0, p0), (t1, p1) in zip(clipped, clipped[1:], strict=False))


def integrate(
    telemetry: Telemetry,
    window: Window,
    expected_num_gpus: int | None,
    max_gap_s: float = MAX_SAMPLE_GAP_S,
) -> Energy:
    """InferenceX's integrate_power on parsed samples, plus peak power and the counter's view."""
    if not (math.isfinite(window.start_unix) and math.isfinite(window.end_unix)) or window.duration_s <= 0:
        return Energy(False, ["invalid_benchmark_window"], [], {}, {}, {})
    if not (math.isfinite(max_gap_s) and max_gap_s > 0):  # no gap could pass: nothing is judged
        return Energy(False, ["invalid_max_sample_gap"], [], {}, {}, {})
    # a point of no GPUs is said first, before what the file says, as InferenceX orders them
    reasons = ["invalid_expected_gpu_count"] if expected_num_gpus is not None and expected_num_gpus <= 0 else []
    for reason in telemetry.reasons:
        _append(reasons, reason)
    if not telemetry.power and not telemetry.reasons:
        _append(reasons, "no_usable_power_samples")
    gpu_ids = sorted(telemetry.power, key=lambda g: (0, int(g), "") if g.isdigit() else (1, 0, g))
    if expected_num_gpus is not None and expected_num_gpus > 0 and gpu_ids and len(gpu_ids) != expected_num_gpus:
        _append(reasons, "expected_gpu_count_mismatch")
    energy: dict[str, float] = {}
    gaps: dict[str, float] = {}
    counts: dict[str, int] = {}
    peak: float | None = None
    for gpu in gpu_ids:
        samples = telemetry.power[gpu]
        counts[gpu] = len(samples)
        if len(samples) < 2:
            _append(reasons, "insufficient_power_samples")
            continue
        if samples[0][0] > window.start_unix or samples[-1][0] < window.end_unix:
            _append(reasons, "benchmark_window_not_bracketed")
            continue
        times = [t for t, _ in samples]
        relevant = samples[
            bisect.bisect_right(times, window.start_unix) - 1 : bisect.bisect_left(times, window.end_unix) + 1
        ]
        gaps[gpu] = max((b[0] - a[0] for a, b in zip(relevant, relevant[1:], strict=False)), default=0.0)
        if gaps[gpu] > max_gap_s:
            _append(reasons, "sampling_gap_exceeded")
        energy[gpu] = integrate_device(samples, window.start_unix, window.end_unix)
        inside = [p for t, p in samples if window.start_unix <= t <= window.end_unix]
        if inside:
            peak = max(peak or 0.0, *inside)
    result = Energy(
        power_valid=not reasons,
        reasons=reasons,
        observed_gpu_ids=gpu_ids,
        per_gpu_energy_j=energy,
        per_gpu_max_sample_gap_s=gaps,
        per_gpu_sample_counts=counts,
        peak_power_w=peak,
        counter_energy_j=counter_energy(telemetry, window),
    )
    if gpu_ids and len(energy) == len(gpu_ids):
        total = sum(energy.values())
        return replace(
            result,
            total_gpu_energy_j=total,
            avg_total_gpu_power_w=total / window.duration_s,
            avg_power_w=total / window.duration_s / len(gpu_ids),
        )
    return result


def counter_energy(telemetry: Telemetry, window: Window) -> float | None:
    """The driver's energy counter (J) interpolated at both ends of the window, summed over GPUs."""
    if not telemetry.energy_counter or set(telemetry.energy_counter) != set(telemetry.power):
        return None
    try:
        return sum(
            interpolate(series, window.end_unix) - interpolate(series, window.start_unix)
            for series in telemetry.energy_counter.values()
        )
    except ValueError:
        return None


def window_from_aiperf(profile: dict[str, Any], records: list[dict[str, Any]]) -> tuple[Window | None, list[str]]:
    """InferenceX's build_power_window: aiperf's start/end (time-zone aware or epoch), profiled records."""
    start = _profile_time(profile.get("start_time"))
    end = _profile_time(profile.get("end_time"))
    if profile.get("start_time") is None or profile.get("end_time") is None:
        return None, ["profile_window_missing"]
    if start is None or end is None or end <= start:
        return None, ["profile_window_invalid"]
    if not records:
        return None, ["successful_request_count_invalid"]
    isl = [_record_int(r, "input_sequence_length") for r in records]
    osl = [_record_int(r, "output_sequence_length") for r in records]
    if None in isl or None in osl:
        return None, ["incomplete_token_accounting"]
    input_tokens = sum(v for v in isl if v is not None)
    output_tokens = sum(v for v in osl if v is not None)
    if input_tokens <= 0 or output_tokens <= 0 or any(v is not None and v < 0 for v in isl + osl):
        return None, ["incomplete_token_accounting"]
    return Window(start, end, len(records), input_tokens, output_tokens), []


def _profile_time(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    # aiperf writes naive local times; the job body runs on the node whose clock the samples carry
    return parsed.timestamp() if parsed.tzinfo is None else parsed.astimezone(UTC).timestamp()


def _record_int(record: dict[str, Any], key: str) -> int | None:
    metric = (record.get("metrics") or {}).get(key)
    if isinstance(metric, dict):
        metric = metric.get("value")
    if isinstance(metric, bool) or not isinstance(metric, int | float):
        return None
    return int(metric)


def power_fields(result: Energy, window: Window) -> dict[str, int | float]:
    """What InferenceX's _patch_power_result writes into the aggregate: version, validity (1/0) and,
    for a valid measurement only, the metrics rounded as it rounds them."""
    fields: dict[str, int | float] = {
        "power_metric_schema_version": POWER_METRIC_SCHEMA_VERSION,
        "power_valid": int(result.power_valid),
    }
    for key, value in result.metrics(window).items():
        fields[key] = round(value, 3 if key.endswith(("_w", "_j")) else 6)
    return fields
