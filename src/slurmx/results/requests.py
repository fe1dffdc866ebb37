"""aiperf's per-request records -> the request figures of result.json (InferenceX's agentic aggregation).

profile_export.jsonl (required): one record per request, `metadata` (benchmark_phase, request_start_ns,
request_end_ns, was_cancelled, ...), `metrics` ({name: {value, unit}}, latencies in ms), `error` (null or an
object); profile_export_aiperf.json: run-level statistics (see schema.py for the facts).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurmx.results import certify
from slurmx.results.schema import (
    AiperfCounts,
    Certification,
    Latency,
    PercentileCertificate,
    QpsStats,
    Rate,
    RequestAccounting,
    RequestCache,
    RequestMetrics,
    Stats,
    Throughput,
    TokenStats,
)

PROFILE_JSONL = "profile_export.jsonl"
PROFILE_JSON = "profile_export_aiperf.json"
SERVER_METRICS_JSON = "server_metrics_export.json"
SERVER_METRICS_CSV = "server_metrics_export.csv"
_STAT_KEYS = ("mean", "p50", "p75", "p90", "p95", "std")


class ArtifactError(ValueError):
    """The replay's artifacts are missing or unreadable; the message names the file."""


# ---------------------------------------------------------------- loading


def load_records(path: Path) -> tuple[list[dict[str, Any]], RequestAccounting]:
    """Profiling-phase, error-free records and the accounting of everything dropped.

    aiperf appends whole lines in batches; an unterminated last line that does not parse is a batch
    cut off by a kill (a partial replay) and is left out, not an error."""
    if not path.is_file():
        raise ArtifactError(f"{path}: missing (aiperf wrote no per-request records)")
    records: list[dict[str, Any]] = []
    acc = RequestAccounting()
    with path.open(encoding="utf-8") as handle:
        for number, raw in enumerate(handle, 1):
            line = raw.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                if not raw.endswith("\n"):  # only the last line can lack its newline
                    break  # the torn tail of a killed writer
                raise ArtifactError(f"{path}:{number}: not JSON ({exc.msg})") from None
            acc.records_total += 1
            phase = (obj.get("metadata") or {}).get("benchmark_phase")
            warmup = phase is not None and phase != "profiling"
            error = obj.get("error")
            if warmup:
                acc.records_warmup_dropped += 1
            if error:
                acc.records_error_dropped += 1
                category = _error_category(error)
                acc.error_categories[category] = acc.error_categories.get(category, 0) + 1
            if error or warmup:
                continue
            records.append(obj)
    acc.records_profiled = len(records)
    acc.records_dropped_total = acc.records_total - len(records)
    return records, acc


def aiperf_counts(path: Path) -> AiperfCounts:
    """The request counts of aiperf's aggregate, read as InferenceX's validity gate reads them
    (validate_agentic_result.py): `<name>.avg`, a finite non-negative number when present; what makes the
    file unusable to that gate is kept as its message."""
    if not path.is_file():
        return AiperfCounts(unreadable=f"{path} not found")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            return AiperfCounts(unreadable=f"{path} must contain a JSON object")
        return AiperfCounts(
            request_count=_count(data, "request_count"),
            error_request_count=_count(data, "error_request_count"),
            completed_request_count=_count(data, "completed_request_count"),
        )
    except (OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
        return AiperfCounts(unreadable=f"failed to read {path}: {exc}")


def _count(aggregate: dict[str, Any], name: str) -> float | None:
    metric = aggregate.get(name)
    if metric is None:
        return None
    if not isinstance(metric, dict):
        raise ValueError(f"{name} must be an object")
    value = metric.get("avg")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}.avg must be numeric")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}.avg must be a finite non-negative number")
    return float(value)


def _load_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}: not JSON ({exc.msg})") from None
    return data if isinstance(data, dict) else {}


def _error_category(error: Any) -> str:
    if isinstance(error, dict):
        for key in ("type", "error_type", "code", "class", "status"):
            value = error.get(key)
            if value not in (None, ""):
                return str(value)
        message = error.get("message") or error.get("error")
    else:
        message = error
    if not message:
        return "unknown"
    first_line = str(message).strip().splitlines()[0]
    return (first_line.split(":", 1)[0] or "unknown")[:120]


# ---------------------------------------------------------------- request metrics


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (InferenceX's aggregation_common.percentile)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = (len(ordered) - 1) * (p / 100)
    lo = int(k)
    if lo + 1 >= len(ordered):
        return ordered[lo]
    return ordered[lo] + (k - lo) * (ordered[lo + 1] - ordered[lo])


def stats(values: list[float]) -> Stats:
    if not values:
        return Stats()
    ordered = sorted(values)
    return Stats(
        mean=statistics.fmean(values),
        p50=percentile(ordered, 50),
        p75=percentile(ordered, 75),
        p90=percentile(ordered, 90),
        p95=percentile(ordered, 95),
        std=statistics.pstdev(values) if len(values) > 1 else 0.0,
    )


def _inverse(rate_of: Stats, per_request: list[float]) -> Stats:
    """tokens/s per user from seconds per token: 1/x of each statistic, so p90 is the slow tail."""
    out: dict[str, float] = {}
    for key in ("mean", "p50", "p75", "p90", "p95"):
        value = getattr(rate_of, key)
        if value is not None and value > 0:
            out[key] = 1.0 / value
    inverted = [1.0 / v for v in per_request if v > 0]
    if inverted:
        out["std"] = statistics.pstdev(inverted) if len(inverted) > 1 else 0.0
    return Stats(**out)


def _value(record: dict[str, Any], key: str) -> float | None:
    metric = (record.get("metrics") or {}).get(key)
    if isinstance(metric, dict):
        metric = metric.get("value")
    if metric is None or isinstance(metric, bool):
        return None
    try:
        value = float(metric)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _values(records: list[dict[str, Any]], key: str) -> list[float]:
    return [v for r in records if (v := _value(r, key)) is not None]


def _seconds(records: list[dict[str, Any]], key: str) -> list[float]:
    return [v / 1000.0 for v in _values(records, key) if v > 0]


def _e2e_per_token(records: list[dict[str, Any]]) -> list[float]:
    """Seconds of the whole request per output token, paired within each record."""
    out: list[float] = []
    for r in records:
        latency_ms, out_tokens = _value(r, "request_latency"), _value(r, "output_sequence_length")
        if latency_ms is not None and out_tokens is not None and latency_ms > 0 and out_tokens > 0:
            out.append(latency_ms / 1000.0 / out_tokens)
    return out


# The headline metrics certified: name in Latency -> (the per-request values, reported as their inverse)
HEADLINE: dict[str, tuple[Callable[[list[dict[str, Any]]], list[float]], bool]] = {
    "ttft": (lambda records: _seconds(records, "time_to_first_token"), False),
    "e2el": (lambda records: _seconds(records, "request_latency"), False),
    "intvty": (lambda records: _seconds(records, "inter_token_latency"), True),
    "e2e_norm_intvty": (_e2e_per_token, True),
}
# The percentiles certified: those result.json reports, and the p99 the tail is judged by (not in InferenceX's
# aggregate: slurmx records only whether the sample could support it)
CERTIFIED_PERCENTILES = certify.CERTIFIABLE


def certification(records: list[dict[str, Any]], policy: certify.Policy | None = None) -> Certification:
    """Every headline metric's certified percentiles over the profiled, error-free records."""
    policy = policy or certify.Policy()
    metrics: dict[str, dict[str, PercentileCertificate]] = {}
    for name, (series, inverse) in HEADLINE.items():
        values = series(records)
        metrics[name] = {}
        for pct in CERTIFIED_PERCENTILES:
            cert = certify.certify(values, pct, policy, inverse=inverse)
            metrics[name][f"p{pct}"] = PercentileCertificate(
                count=cert.count, estimate=cert.estimate, lo=cert.lo, hi=cert.hi, lo_rank=cert.lo_rank,
                hi_rank=cert.hi_rank, coverage=cert.coverage, certified=cert.certified, need=cert.need,
            )  # fmt: skip
    width = policy.rel_width if policy.method == "order-statistics" else None
    return Certification(method=policy.method, confidence=policy.confidence, rel_width=width, metrics=metrics)


# What `--until-certified` waits for: the headline metrics whose sample is the point's requests. Interactivity
# (1 / ITL) is left out: aiperf measures ITL only on requests that streamed more than one chunk (it writes 0 for
# the others: about half of them on the local CPU stack), so its sample is a subset chosen by the server's
# chunking; it is still certified and marked like the others.
STOP_METRICS = ("ttft", "e2el", "e2e_norm_intvty")


def certified_by_percentile(cert: Certification, metrics: tuple[str, ...] = STOP_METRICS) -> dict[str, bool]:
    """Each certified percentile's name ("p90") -> whether it is certified for every one of `metrics` (what
    `--until-certified` waits for: certify.stop_reason); a metric the block lacks is not certified."""
    names = {name for per_metric in cert.metrics.values() for name in per_metric}
    return {
        name: all(name in cert.metrics.get(m, {}) and cert.metrics[m][name].certified for m in metrics)
        for name in sorted(names)
    }


def compute_request_metrics(
    records: list[dict[str, Any]], profile: dict[str, Any], rounds: list[list[dict[str, Any]]] | None = None
) -> RequestMetrics:
    """`rounds`: the records split by round (a point replayed until certified): throughput over the rounds' own
    spans, summed, and QPS over each round's windows, so the cache resets between rounds count as no time."""
    ttft = _seconds(records, "time_to_first_token")
    e2el = _seconds(records, "request_latency")
    itl = _seconds(records, "inter_token_latency")
    full_itl = _seconds(records, "full_response_inter_token_latency")
    itl_stats = stats(itl)
    full_itl_stats = stats(full_itl)
    e2e_per_token = _e2e_per_token(records)
    latency = Latency(
        ttft=stats(ttft),
        e2el=stats(e2el),
        itl=itl_stats,
        tpot=itl_stats,
        intvty=_inverse(itl_stats, itl),
        e2e_norm_intvty=_inverse(stats(e2e_per_token), e2e_per_token),
        full_response_itl=full_itl_stats,
        full_response_intvty=_inverse(full_itl_stats, full_itl),
    )
    isl = _values(records, "input_sequence_length")
    osl = _values(records, "output_sequence_length")
    tokens = TokenStats(input=stats(isl), output_actual=stats(osl))
    return RequestMetrics(
        qps=_qps(records) if rounds is None else _qps_rounds(rounds),
        latency=latency,
        tokens=tokens,
        throughput=_throughput(records, isl, osl, None if rounds is None else sum(map(_span, rounds))),
        cache=RequestCache(theoretical_cache_hit_rate=_theoretical_hit_rate(profile)),
    )


def _meta_ns(record: dict[str, Any], key: str) -> int | None:
    value = (record.get("metadata") or {}).get(key)
    return int(value) if value else None


def _qps(records: list[dict[str, Any]]) -> QpsStats:
    ends = sorted(ns / 1e9 for r in records if (ns := _meta_ns(r, "request_end_ns")) is not None)
    if len(ends) < 2 or ends[-1] - ends[0] <= 0:
        return QpsStats()
    window = 1.0
    values = _qps_windows(ends, window)
    if not values:
        return QpsStats(mean=len(ends) / (ends[-1] - ends[0]), window_seconds=window, samples=0)
    s = stats(values)
    return QpsStats(window_seconds=window, samples=len(values), **s.model_dump())


def _qps_rounds(rounds: list[list[dict[str, Any]]]) -> QpsStats:
    """QPS over every round's own 1 s windows, pooled (no window spans two rounds); when no round lasts a whole
    window, the plain rate over the rounds' own spans (as _qps gives one round), never over the gaps between them."""
    window, values = 1.0, []
    ended, span = 0, 0.0
    for part in rounds:
        ends = sorted(ns / 1e9 for r in part if (ns := _meta_ns(r, "request_end_ns")) is not None)
        values += _qps_windows(ends, window)
        if len(ends) >= 2:
            ended, span = ended + len(ends), span + ends[-1] - ends[0]
    if not values:
        return QpsStats(mean=ended / span, window_seconds=window, samples=0) if span > 0 else QpsStats()
    s = stats(values)
    return QpsStats(window_seconds=window, samples=len(values), **s.model_dump())


def _qps_windows(ends: list[float], window: float = 1.0) -> list[float]:
    """Requests finished per second in each whole window from the first end on (InferenceX's QPS)."""
    if len(ends) < 2:
        return []
    values: list[float] = []
    start, i = ends[0], 0
    while start + window <= ends[-1]:
        while i < len(ends) and ends[i] < start:
            i += 1
        j = i
        while j < len(ends) and ends[j] < start + window:
            j += 1
        values.append((j - i) / window)
        start += window
    return values


def _span(records: list[dict[str, Any]]) -> float:
    """Seconds from the first request's start to the last one's end (0 without both)."""
    starts = [ns for r in records if (ns := _meta_ns(r, "request_start_ns")) is not None]
    ends = [ns for r in records if (ns := _meta_ns(r, "request_end_ns")) is not None]
    return (max(ends) - min(starts)) / 1e9 if starts and ends else 0.0


def _throughput(
    records: list[dict[str, Any]], isl: list[float], osl: list[float], duration: float | None = None
) -> Throughput:
    """`duration`: the seconds the tokens took, when not the records' own span (rounds: their spans summed)."""
    starts = [ns for r in records if (ns := _meta_ns(r, "request_start_ns")) is not None]
    ends = [ns for r in records if (ns := _meta_ns(r, "request_end_ns")) is not None]
    if not starts or not ends:
        return Throughput()
    duration = (max(ends) - min(starts)) / 1e9 if duration is None else duration
    if duration <= 0:
        return Throughput()
    total_in, total_out = sum(isl), sum(osl)
    return Throughput(
        input=Rate(tokens_per_second=total_in / duration),
        output=Rate(tokens_per_second=total_out / duration),
        total=Rate(tokens_per_second=(total_in + total_out) / duration),
        duration_seconds=duration,
    )


def _theoretical_hit_rate(profile: dict[str, Any]) -> float | None:
    metric = profile.get("theoretical_prefix_cache_hit")
    if not isinstance(metric, dict):
        return None
    hits, count = metric.get("sum"), metric.get("count")
    if isinstance(hits, (int, float)) and isinstance(count, (int, float)) and count > 0:
        return float(hits) / float(count)
    avg = metric.get("avg")
    if not isinstance(avg, (int, float)):
        return None
    return float(avg) / 100.0 if str(metric.get("unit", "")).strip() == "%" else float(avg)
