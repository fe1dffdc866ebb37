"""aiperf artifacts (+ engine /metrics scraped before and after the replay) -> one Result.

Inputs, as aiperf 0.13 writes them into the point's aiperf/ directory:
- profile_export.jsonl (required): one record per request, `metadata` (benchmark_phase,
  request_start_ns, request_end_ns, was_cancelled, ...), `metrics` ({name: {value, unit}}, latencies
  in ms), `error` (null or an object).
- profile_export_aiperf.json: run-level statistics, `was_cancelled`, `error_summary`, and
  `metadata.dataset` when a public dataset was replayed.
- server_metrics_export.json: the engine's /metrics over the benchmark window,
  {"metrics": {name: {"type", "series": [{"labels", "stats": {...}}]}}}; counters carry the window's
  delta as stats.total.

The statistics follow InferenceX's agentic aggregation exactly (see schema.py for the facts);
cache hit rates come preferably from the engine counters scraped right before and right after the
replay (their difference covers exactly this point's requests, even on a server shared by
several points), else from aiperf's server-metrics export.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmx.config.master import WorkerSpec
from slurmx.plan import Point
from slurmx.results import energy, prometheus
from slurmx.results.evidence import ArmInputs, build_evidence
from slurmx.results.schema import (
    ComponentMeta,
    EnergyMeta,
    KvCache,
    KvOffload,
    Latency,
    MetricsSource,
    PerGpu,
    PromptBySource,
    QpsStats,
    Rate,
    RequestAccounting,
    RequestCache,
    RequestMetrics,
    Result,
    ServerCache,
    ServerMetrics,
    ServerTokens,
    SlurmxMeta,
    Stats,
    Throughput,
    TokenStats,
)
from slurmx.store import atomic

PROFILE_JSONL = "profile_export.jsonl"
PROFILE_JSON = "profile_export_aiperf.json"
SERVER_METRICS_JSON = "server_metrics_export.json"
_STAT_KEYS = ("mean", "p50", "p75", "p90", "p95", "std")


class ArtifactError(ValueError):
    """The replay's artifacts are missing or unreadable; the message names the file."""


# ---------------------------------------------------------------- public entry point


@dataclass(frozen=True)
class RunMeta:
    """The attempt a result comes from (what the point itself does not say)."""

    sweep_id: str
    attempt: int = 1
    slurm_job_id: str | None = None
    node: str | None = None
    nodes: tuple[str, ...] = ()  # a multinode point's nodes, the head first


@dataclass(frozen=True)
class ReplayWindow:
    """When the replay ran, and the engine's /metrics text scraped right before and right after it."""

    started_at: float | None = None
    ended_at: float | None = None
    engine_metrics_before: str | None = None
    engine_metrics_after: str | None = None


def build_result(
    point: Point,
    artifact_dir: Path,
    *,
    run: RunMeta,
    window: ReplayWindow | None = None,
    engine_logs: Sequence[Path] = (),
    arm: ArmInputs | None = None,
    telemetry_dir: Path | None = None,
) -> Result:
    """The aggregate of one point's replay; its identity fields are the point's InferenceX row.

    `engine_logs` are the engine's logs (one per node of a multinode engine), for the KV-cache pool size
    (kv_cache_pool_tokens); `arm` is what
    the job body knows of how the arm ran (engine argv, logs, working set), for the arm's evidence."""
    window = window or ReplayWindow()
    artifact_dir = Path(artifact_dir)
    records, accounting = load_records(artifact_dir / PROFILE_JSONL)
    profile = _load_json(artifact_dir / PROFILE_JSON)
    server_export = _load_json(artifact_dir / SERVER_METRICS_JSON)

    gpus = _multinode_gpus(point) if point.multinode else point.gpus
    request_metrics = compute_request_metrics(records, profile)
    totals = request_metrics.throughput
    if totals.total is not None and gpus > 0:
        request_metrics.throughput.per_gpu = PerGpu(
            total_tput_tps=totals.total.tokens_per_second / gpus,
            output_tput_tps=totals.output.tokens_per_second / gpus if totals.output else 0.0,
            input_tput_tps=totals.input.tokens_per_second / gpus if totals.input else 0.0,
        )

    counters, source = engine_counters(server_export, window.engine_metrics_before, window.engine_metrics_after)
    server_metrics = server_metrics_from(records, counters)
    if engine_logs:
        server_metrics.kv_cache.gpu_total_tokens = kv_pool_tokens(engine_logs)
    meta = _slurmx_meta(point, profile, run, window, source)
    meta.requests_by_rank = requests_by_rank(counters)
    # the tier's own counters reach us through aiperf's export (it scrapes the backend's /metrics)
    exported = counters_from_export(server_export)
    meta.evidence = build_evidence(
        point.backend_name, server_metrics, exported.delta, exported.gauge_max, arm or ArmInputs()
    )
    backend = point.kv_offload_backend
    dataset = (profile.get("metadata") or {}).get("dataset") if isinstance(profile, dict) else None
    assert not point.concs, "a result is of one concurrency"
    power: dict[str, int | float] = {}
    if telemetry_dir is not None:
        power, meta.energy = point_energy(Path(telemetry_dir), profile, records, gpus)
    result = Result(
        hw=point.runner,
        conc=point.conc,
        image=point.image,
        recipe_fingerprint=recipe_fingerprint(point),
        model=point.model,
        infmax_model_prefix=point.model_prefix,
        framework=point.framework,
        precision=point.precision,
        spec_decoding=point.spec_decoding,
        disagg=point.disagg,
        scenario_type=point.scenario,
        is_multinode=point.multinode,
        num_gpus=gpus,
        tp=point.tp,
        ep=point.ep,
        dp_attention="true" if point.dp_attn else "false",
        pp=point.pp,
        dcp_size=point.dcp_size,
        pcp_size=point.pcp_size,
        kv_offloading=point.kv_offloading,
        kv_offload_backend=(
            ComponentMeta(name=backend.name, version=backend.version or meta.backend_version) if backend else None
        ),
        allocated_cpu_dram_gb=point.total_cpu_dram_gb,
        router=ComponentMeta(name=point.router.name, version=point.router.version) if point.router else None,
        kv_p2p_transfer=point.kv_p2p_transfer,
        dataset=dataset if isinstance(dataset, dict) else None,
        num_requests_total=accounting.records_total,
        num_requests_successful=len(records),
        request_accounting=accounting,
        request_metrics=request_metrics,
        server_metrics=server_metrics,
        kv_cache_pool_tokens=server_metrics.kv_cache.gpu_total_tokens,
        warnings=_warnings(server_metrics, source) or None,
        slurmx=meta,
    )
    for key, value in power.items():
        setattr(result, key, value)
    if point.multinode:
        _set_worker_shape(result, point)
    return result


def _worker_gpus(worker: WorkerSpec) -> int:
    return worker.num_worker * worker.tp * worker.pp * worker.pcp_size


def _multinode_gpus(point: Point) -> int:
    assert point.prefill is not None and point.decode is not None
    return _worker_gpus(point.prefill) + _worker_gpus(point.decode)


def _set_worker_shape(result: Result, point: Point) -> None:
    """InferenceX's multinode fields: each side's workers and parallelism, and the GPUs of each side."""
    assert point.prefill is not None and point.decode is not None
    for side, worker in (("prefill", point.prefill), ("decode", point.decode)):
        setattr(result, f"{side}_num_workers", worker.num_worker)
        for name in ("tp", "pp", "dcp_size", "pcp_size", "ep"):
            setattr(result, f"{side}_{name}", getattr(worker, name))
        setattr(result, f"{side}_dp_attention", "true" if worker.dp_attn else "false")
        setattr(result, f"num_{side}_gpu", _worker_gpus(worker))
    result.tp, result.ep = point.prefill.tp, point.prefill.ep


def point_energy(
    telemetry_dir: Path, profile: dict[str, Any], records: list[dict[str, Any]], gpus: int
) -> tuple[dict[str, int | float], EnergyMeta]:
    """InferenceX's power fields for the replay's window, and the telemetry behind them.

    No telemetry on the node (no GPU): no power fields, and the reason in the slurmx block."""
    info_path = telemetry_dir / energy.INFO_JSON
    info = _load_json(info_path) if info_path.is_file() else {}
    source = str(info.get("source") or "none")
    if source == "none":
        reason = str(info.get("absent_reason") or f"no telemetry in {telemetry_dir}")
        return {}, EnergyMeta(source="none", absent_reason=reason)
    window, reasons = energy.window_from_aiperf(profile, records)
    if window is None:
        meta = EnergyMeta(source=source, reasons=reasons)
        return {"power_metric_schema_version": energy.POWER_METRIC_SCHEMA_VERSION, "power_valid": 0}, meta
    measured = energy.integrate(energy.read_telemetry(telemetry_dir / energy.METRICS_CSV, window), window, gpus)
    per_kw = measured.tokens_per_s_per_kw(window) or {}
    meta = EnergyMeta(
        source=source,
        power_valid=measured.power_valid,
        reasons=measured.reasons,
        integration_method=energy.INTEGRATION_METHOD,
        window_start_unix=window.start_unix,
        window_end_unix=window.end_unix,
        gpu_ids=measured.observed_gpu_ids,
        per_gpu_energy_j=measured.per_gpu_energy_j,
        per_gpu_max_sample_gap_s=measured.per_gpu_max_sample_gap_s,
        peak_power_w=measured.peak_power_w,
        counter_energy_j=measured.counter_energy_j,
        output_tokens_per_s_per_kw=per_kw.get("output"),
        total_tokens_per_s_per_kw=per_kw.get("total"),
    )
    return energy.power_fields(measured, window), meta


def write_result(path: Path, result: Result) -> None:
    """result.json, atomically: a reader sees the whole file or none (collect relies on it)."""
    atomic.write_json(path, result.dump())


def recipe_fingerprint(point: Point) -> str:
    """sha256 of the InferenceX row without conc and names derived from it (InferenceX's recipe-fingerprint idea)."""
    drop = {"conc", "exp-name"}
    canonical = {k: v for k, v in point.row().items() if k not in drop}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


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


def compute_request_metrics(records: list[dict[str, Any]], profile: dict[str, Any]) -> RequestMetrics:
    ttft = _seconds(records, "time_to_first_token")
    e2el = _seconds(records, "request_latency")
    itl = _seconds(records, "inter_token_latency")
    full_itl = _seconds(records, "full_response_inter_token_latency")
    itl_stats = stats(itl)
    full_itl_stats = stats(full_itl)
    # seconds of the whole request per output token, paired within each record
    e2e_per_token: list[float] = []
    for r in records:
        latency_ms, out_tokens = _value(r, "request_latency"), _value(r, "output_sequence_length")
        if latency_ms is not None and out_tokens is not None and latency_ms > 0 and out_tokens > 0:
            e2e_per_token.append(latency_ms / 1000.0 / out_tokens)
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
        qps=_qps(records),
        latency=latency,
        tokens=tokens,
        throughput=_throughput(records, isl, osl),
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
    if not values:
        return QpsStats(mean=len(ends) / (ends[-1] - ends[0]), window_seconds=window, samples=0)
    s = stats(values)
    return QpsStats(window_seconds=window, samples=len(values), **s.model_dump())


def _throughput(records: list[dict[str, Any]], isl: list[float], osl: list[float]) -> Throughput:
    starts = [ns for r in records if (ns := _meta_ns(r, "request_start_ns")) is not None]
    ends = [ns for r in records if (ns := _meta_ns(r, "request_end_ns")) is not None]
    if not starts or not ends:
        return Throughput()
    duration = (max(ends) - min(starts)) / 1e9
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


# ---------------------------------------------------------------- server metrics

# vLLM counter names without the `_total` suffix (aiperf's export strips it; the raw text keeps it)
_PREFIX_QUERIES = "vllm:prefix_cache_queries"
_PREFIX_HITS = "vllm:prefix_cache_hits"
_EXT_QUERIES = "vllm:external_prefix_cache_queries"
_EXT_HITS = "vllm:external_prefix_cache_hits"
_PROMPT = "vllm:prompt_tokens"
_GENERATION = "vllm:generation_tokens"
_REQUESTS_DONE = "vllm:request_success"  # per finish reason and engine (data-parallel rank)
# vLLM 0.32: source = device | host | p2p | disk | external_unspecified
_CACHED_BY_SOURCE = "vllm:prompt_tokens_cached_by_source"
# vLLM 0.32: source = local_compute | local_cache_hit | external_kv_transfer (what InferenceX reads)
_PROMPT_BY_SOURCE = "vllm:prompt_tokens_by_source"
_GPU_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_CPU_USAGE = "vllm:cpu_kv_cache_usage_perc"
_OFFLOAD = {
    "bytes_gpu_to_cpu": "vllm:kv_offload_bytes_gpu_to_cpu",
    "bytes_cpu_to_gpu": "vllm:kv_offload_bytes_cpu_to_gpu",
    "time_gpu_to_cpu": "vllm:kv_offload_time_gpu_to_cpu",
    "time_cpu_to_gpu": "vllm:kv_offload_time_cpu_to_gpu",
}


class _Counters:
    """Counter deltas and gauges by metric name (without `_total`), from either source."""

    def __init__(self) -> None:
        self.delta: dict[str, float] = {}
        self.by_source: dict[str, dict[str, float]] = {}  # by the `source` label (prompt tokens by origin)
        self.by_engine: dict[str, dict[str, float]] = {}  # by vLLM's `engine` label: one per data-parallel rank
        self.gauge_max: dict[str, float] = {}
        self.names: set[str] = set()

    def get(self, name: str) -> float | None:
        return self.delta.get(name)

    def add(self, name: str, labels: dict[str, str], value: float) -> None:
        self.delta[name] = self.delta.get(name, 0.0) + value
        for key, buckets in (("source", self.by_source), ("engine", self.by_engine)):
            if (label := labels.get(key)) is not None:
                bucket = buckets.setdefault(name, {})
                bucket[label] = bucket.get(label, 0.0) + value


def _strip_total(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def counters_from_scrapes(before: str, after: str) -> _Counters:
    """after - before for every counter series; gauges from `after`."""
    out = _Counters()
    start = {(s.name, s.labels): s.value for s in prometheus.iter_samples(before)}
    for s in prometheus.iter_samples(after):
        out.names.add(_strip_total(s.name))
        if s.name.endswith("_total"):
            name = _strip_total(s.name)
            delta = s.value - start.get((s.name, s.labels), 0.0)
            if delta < 0:  # counter reset (engine restarted between scrapes): count from zero
                delta = s.value
            out.add(name, dict(s.labels), delta)
        elif not s.name.endswith(("_bucket", "_sum", "_count", "_created")):
            out.gauge_max[s.name] = max(out.gauge_max.get(s.name, -math.inf), s.value)
    return out


def counters_from_export(export: dict[str, Any]) -> _Counters:
    """aiperf's server_metrics_export.json: counters' stats.total is the window delta, gauges' stats.max."""
    out = _Counters()
    metrics = export.get("metrics") if isinstance(export, dict) else None
    if not isinstance(metrics, dict):
        return out
    for raw_name, entry in metrics.items():
        if not isinstance(entry, dict):
            continue
        name = _strip_total(raw_name)
        out.names.add(name)
        kind = str(entry.get("type", "")).lower()
        for series in entry.get("series") or []:
            st = series.get("stats") if isinstance(series, dict) else None
            if not isinstance(st, dict):
                continue
            if kind == "counter":
                value = _first_number(st, ("total", "sum", "max", "avg"))
                if value is None:
                    continue
                labels = series.get("labels") or {}
                out.add(name, {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}, value)
            elif kind == "gauge":
                value = _first_number(st, ("max", "avg", "total"))
                if value is not None:
                    out.gauge_max[name] = max(out.gauge_max.get(name, -math.inf), value)
    return out


def _first_number(stats_: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        value = stats_.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def _rate(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def _fraction(value: float | None) -> float | None:
    """Usage gauges are exported as 0..1 or 0..100 depending on the engine version."""
    if value is None:
        return None
    return value / 100.0 if value > 1.5 else value


def compute_server_metrics(
    records: list[dict[str, Any]],
    export: dict[str, Any],
    before: str | None,
    after: str | None,
) -> tuple[ServerMetrics, MetricsSource]:
    counters, source = engine_counters(export, before, after)
    return server_metrics_from(records, counters), source


def requests_by_rank(counters: _Counters) -> dict[str, int] | None:
    """Requests each data-parallel rank finished over the window (vLLM's `engine` label), when there are
    several: how evenly the API server spread the load."""
    ranks = counters.by_engine.get(_REQUESTS_DONE, {})
    return (
        {rank: round(n) for rank, n in sorted(ranks.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0)}
        if len(ranks) > 1
        else None
    )


def engine_counters(export: dict[str, Any], before: str | None, after: str | None) -> tuple[_Counters, MetricsSource]:
    """The engine's counters over the window: the before/after scrape delta when both exist, else aiperf's
    export of the engine's /metrics."""
    exported = counters_from_export(export)
    source: MetricsSource
    if before is not None and after is not None:
        try:
            counters, source = counters_from_scrapes(before, after), "scrape-delta"
        except prometheus.PrometheusParseError as exc:
            raise ArtifactError(f"the engine's /metrics scrape does not parse: {exc}") from None
        # gauges seen over the whole window beat a single scrape
        for name, value in exported.gauge_max.items():
            counters.gauge_max[name] = max(counters.gauge_max.get(name, -math.inf), value)
    elif exported.names:
        counters, source = exported, "aiperf-export"
    else:
        counters, source = _Counters(), "none"
    return counters, source


def server_metrics_from(records: list[dict[str, Any]], counters: _Counters) -> ServerMetrics:
    present = bool(counters.names)
    hits, queries = counters.get(_PREFIX_HITS), counters.get(_PREFIX_QUERIES)
    ext_hits, ext_queries = counters.get(_EXT_HITS), counters.get(_EXT_QUERIES)
    gpu_rate = _rate(hits, queries)
    ext_rate = _rate(ext_hits, ext_queries)
    cache = ServerCache(
        gpu_cache_hit_rate=gpu_rate,
        cpu_cache_hit_rate=ext_rate,
        external_cache_hit_rate=ext_rate,
        prefix_cache_hits=hits,
        prefix_cache_queries=queries,
        external_prefix_cache_hits=ext_hits,
        external_prefix_cache_queries=ext_queries,
    )
    prompt_total = counters.get(_PROMPT)
    by_source = PromptBySource()
    cached = counters.by_source.get(_CACHED_BY_SOURCE, {})
    split = counters.by_source.get(_PROMPT_BY_SOURCE, {})
    if cached:
        cache.cached_tokens_by_source = cached
    if split:
        # InferenceX's rule: prompt tokens split by where they came from (vLLM >= 0.11)
        local, external, computed = (
            split.get("local_cache_hit"),
            split.get("external_kv_transfer"),
            split.get("local_compute"),
        )
        whole = sum(split.values())
        if whole > 0:
            if local is not None:
                cache.gpu_cache_hit_rate = local / whole
            if external is not None:
                cache.cpu_cache_hit_rate = cache.external_cache_hit_rate = external / whole
            cache.overall_cache_hit_rate = ((local or 0.0) + (external or 0.0)) / whole
        by_source = PromptBySource(
            gpu_cache_hit=local, cpu_or_external_cache_hit=external, computed=computed, raw=split
        )
    elif gpu_rate is not None:
        cache.overall_cache_hit_rate = gpu_rate
    # slurmx refinement: when vLLM says which tier served cached tokens, CPU means host DRAM only
    host = cached.get("host")
    whole_prompt = sum(split.values()) if split else prompt_total
    if host and whole_prompt:
        cache.cpu_cache_hit_rate = host / whole_prompt

    gpu_usage = max((counters.gauge_max[n] for n in _GPU_USAGE if n in counters.gauge_max), default=None)
    offload = {field: counters.get(name) for field, name in _OFFLOAD.items()}
    kv_offload = KvOffload(
        **offload,
        bandwidth_gpu_to_cpu_bytes_per_second=_rate(offload["bytes_gpu_to_cpu"], offload["time_gpu_to_cpu"]),
        bandwidth_cpu_to_gpu_bytes_per_second=_rate(offload["bytes_cpu_to_gpu"], offload["time_cpu_to_gpu"]),
    )
    generation_total = counters.get(_GENERATION)
    isl = sum(_values(records, "input_sequence_length"))
    osl = sum(_values(records, "output_sequence_length"))
    tokens = ServerTokens(
        prompt_total=round(prompt_total) if prompt_total is not None else (round(isl) if records else None),
        generation_total=round(generation_total) if generation_total is not None else (round(osl) if records else None),
        requests_completed=len(records),
        prompt_by_source=by_source,
    )
    metrics = ServerMetrics(
        present=present,
        adapter="vllm" if any(n.startswith("vllm:") for n in counters.names) else "none",
        metric_count=len(counters.names),
        cache=cache,
        kv_cache=KvCache(
            gpu_usage_pct=_fraction(gpu_usage),
            cpu_usage_pct=_fraction(counters.gauge_max.get(_CPU_USAGE)),
        ),
        kv_offload=kv_offload,
        tokens=tokens,
    )
    return metrics


def _warnings(server: ServerMetrics, source: MetricsSource) -> list[str]:
    out = []
    if source == "none":
        out.append("no engine metrics: neither before/after scrapes nor server_metrics_export.json")
    return out


_KV_SIZE = re.compile(r"(?:GPU|CPU) KV cache size:\s*(?P<tokens>[\d,]+)\s*tokens")
_ENGINE_TAG = re.compile(r"\((?P<tag>EngineCore(?:_DP\d+)?)\s+pid=\d+\)")


def kv_pool_tokens(engine_logs: Sequence[Path]) -> int | None:
    """Tokens of KV cache the engine allocated, from vLLM's "GPU KV cache size: N tokens" log line
    ("CPU KV cache size" on the CPU build); the last line per engine core, summed over DP ranks: those
    of one log, and those of every node's log of a multinode engine (each node logs its own ranks)."""
    per_engine: dict[tuple[int, str], int] = {}
    for index, log in enumerate(engine_logs):
        try:
            text = log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if "KV cache size" not in line or not (size := _KV_SIZE.search(line)):
                continue
            tag = _ENGINE_TAG.search(line)
            per_engine[index, tag.group("tag") if tag else "EngineCore"] = int(size.group("tokens").replace(",", ""))
    return sum(per_engine.values()) if per_engine else None


# ---------------------------------------------------------------- identity helpers


def _slurmx_meta(
    point: Point, profile: dict[str, Any], run: RunMeta, window: ReplayWindow, source: MetricsSource
) -> SlurmxMeta:
    incomplete = None
    if profile.get("is_complete") is False:
        incomplete = str(profile.get("incomplete_reason") or "aiperf marked the run incomplete")
    return SlurmxMeta(
        point_id=point.point_id,
        config_key=point.config_key,
        exp_name=point.exp_name,
        parallelism=point.parallelism,
        sweep_id=run.sweep_id,
        attempt=run.attempt,
        slurm_job_id=run.slurm_job_id,
        node=run.node,
        nodes=list(run.nodes) or None,
        started_at=window.started_at,
        ended_at=window.ended_at,
        was_cancelled=bool(profile.get("was_cancelled", False)),
        incomplete_reason=incomplete,
        aiperf_version=str(profile["aiperf_version"]) if profile.get("aiperf_version") else None,
        aiperf_error_count=_aiperf_error_count(profile),
        engine_metrics_source=source,
    )


def _aiperf_error_count(profile: dict[str, Any]) -> int | None:
    summary = profile.get("error_summary")
    if not isinstance(summary, list):
        return None
    return sum(int(item.get("count", 0)) for item in summary if isinstance(item, dict))
