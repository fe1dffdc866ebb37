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
import csv
import math
import re
from dataclasses import dataclass, field
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

_POWER_COL_RE = re.compile(r"power", re.IGNORECASE)
_POWER_EXCLUDE_RE = re.compile(r"limit|cap|max|min", re.IGNORECASE)
_TIMESTAMP_COL_RE = re.compile(r"time", re.IGNORECASE)
_GPU_INDEX_COL_RE = re.compile(r"^(index|gpu|gpu_id|gpu_index|card|device)$", re.IGNORECASE)
_ENERGY_COL_RE = re.compile(r"^energy\.total", re.IGNORECASE)
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")

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


def parse_timestamp(value: str) -> float | None:
    """Epoch seconds (or ms), nvidia-smi's `YYYY/MM/DD HH:MM:SS.fff` (local) or ISO 8601."""
    value = value.strip()
    if not value:
        return None
    if _NUMBER_RE.fullmatch(value):
        n = float(value)
        return n / 1000.0 if n > 1e12 else n
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
        try:
            return datetime.strptime(value, fmt).timestamp()
        except ValueError:
            pass
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed.timestamp() if parsed.tzinfo is None else parsed.astimezone(UTC).timestamp()


def parse_number(value: str) -> float | None:
    value = value.strip()
    if not value or value.lower() in {"[n/a]", "n/a", "na"}:
        return None
    match = _NUMBER_RE.search(value)
    return float(match.group(0)) if match else None


def read_telemetry(csv_path: Path, window: Window | None = None, max_gap_s: float = MAX_SAMPLE_GAP_S) -> Telemetry:
    """The sampler's CSV (or InferenceX's nvidia-smi CSV); rows far outside the window are skipped."""
    out = Telemetry()
    if not csv_path.is_file():
        _append(out.reasons, "telemetry_file_missing")
        return out
    if csv_path.stat().st_size == 0:
        _append(out.reasons, "telemetry_file_empty")
        return out
    raw: dict[str, dict[float, list[float]]] = {}
    counters: dict[str, dict[float, float]] = {}
    with csv_path.open(newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f, skipinitialspace=True)
        header = [c.strip() for c in (reader.fieldnames or [])]
        reader.fieldnames = header
        time_col = next((c for c in header if _TIMESTAMP_COL_RE.search(c)), None)
        power_col = next((c for c in header if _POWER_COL_RE.search(c) and not _POWER_EXCLUDE_RE.search(c)), None)
        gpu_col = next((c for c in header if _GPU_INDEX_COL_RE.match(c)), None)
        energy_col = next((c for c in header if _ENERGY_COL_RE.match(c)), None)
        for col, reason in ((time_col, "timestamp_column_missing"), (power_col, "power_column_missing")):
            if col is None:
                _append(out.reasons, reason)
        if gpu_col is None:
            _append(out.reasons, "gpu_identity_column_missing")
        if time_col is None or power_col is None or gpu_col is None:
            return out
        for row in reader:
            timestamp = parse_timestamp(row.get(time_col) or "")
            if timestamp is None or not math.isfinite(timestamp):
                _append(out.reasons, "invalid_timestamp")
                continue
            if window is not None and (
                timestamp < window.start_unix - max_gap_s or timestamp > window.end_unix + max_gap_s
            ):
                continue
            power = parse_number(row.get(power_col) or "")
            gpu_id = (row.get(gpu_col) or "").strip()
            if power is None or not math.isfinite(power) or power < 0:
                _append(out.reasons, "invalid_power_sample")
                continue
            if not gpu_id:
                _append(out.reasons, "gpu_identity_missing")
                continue
            raw.setdefault(gpu_id, {}).setdefault(timestamp, []).append(power)
            energy = parse_number(row.get(energy_col) or "") if energy_col else None
            if energy is not None:
                counters.setdefault(gpu_id, {})[timestamp] = energy
    out.power = {gpu: sorted((t, mean(v)) for t, v in by_time.items()) for gpu, by_time in raw.items()}
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
    reasons = list(telemetry.reasons)
    if not (math.isfinite(window.start_unix) and math.isfinite(window.end_unix)) or window.duration_s <= 0:
        return Energy(False, ["invalid_benchmark_window"], [], {}, {}, {})
    if not telemetry.power and not reasons:
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
        return Energy(
            **{
                **result.__dict__,
                "total_gpu_energy_j": total,
                "avg_total_gpu_power_w": total / window.duration_s,
                "avg_power_w": total / window.duration_s / len(gpu_ids),
            }
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
