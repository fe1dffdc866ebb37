"""The engine's /metrics over the replay window -> the server figures of result.json, by the names the
engine declares (`Engine.metrics`, `Engine.kv_pool_log`).

Preferably the counters scraped right before and right after the replay (their difference covers exactly
this point's requests, even on a server shared by several points), else aiperf's server-metrics export
(server_metrics_export.json: {"metrics": {name: {"type", "series": [{"labels", "stats": {...}}]}}};
counters carry the window's delta as stats.total).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slurmx import engines
from slurmx.engines import EngineMetrics, KvPoolLog
from slurmx.results import prometheus
from slurmx.results.requests import SERVER_METRICS_CSV, SERVER_METRICS_JSON, ArtifactError, _values
from slurmx.results.schema import (
    KvCache,
    KvOffload,
    MetricsExport,
    MetricsSource,
    PromptBySource,
    ServerCache,
    ServerMetrics,
    ServerTokens,
)

# ---------------------------------------------------------------- server metrics


class _Counters:
    """Counter deltas and gauges by metric name (without `_total`), from either source."""

    def __init__(self, rank_label: str = "engine") -> None:
        self.rank_label = rank_label
        self.delta: dict[str, float] = {}
        # label key -> name -> label value -> sum: prompt tokens by origin (`source`), cached tokens by tier
        # (SGLang's `cache_source`), one per data-parallel rank (the engine's rank label), ...
        self.by_label: dict[str, dict[str, dict[str, float]]] = {}
        self.gauge_max: dict[str, float] = {}
        self.gauge_sum: dict[str, float] = {}  # each gauge's series summed (one per server: a pool's whole size)
        self.gauge_avgs: dict[str, list[float]] = {}  # each series' average over the window (a scrape: its value)
        self.names: set[str] = set()

    @property
    def by_source(self) -> dict[str, dict[str, float]]:
        return self.by_label.get("source", {})

    @property
    def by_engine(self) -> dict[str, dict[str, float]]:
        return self.by_label.get(self.rank_label, {})

    def get(self, name: str) -> float | None:
        return self.delta.get(name)

    def merge_gauges(self, other: _Counters) -> None:
        """Each gauge's maximum over both: gauges seen over the whole window beat a single scrape."""
        for mine, theirs in ((self.gauge_max, other.gauge_max), (self.gauge_sum, other.gauge_sum)):
            for name, value in theirs.items():
                mine[name] = max(mine.get(name, -math.inf), value)
        self.gauge_avgs.update(other.gauge_avgs)

    def add(self, name: str, labels: dict[str, str], value: float) -> None:
        self.delta[name] = self.delta.get(name, 0.0) + value
        for key, label in labels.items():
            bucket = self.by_label.setdefault(key, {}).setdefault(name, {})
            bucket[label] = bucket.get(label, 0.0) + value

    def add_gauge(self, name: str, value: float, avg: float | None = None) -> None:
        self.gauge_max[name] = max(self.gauge_max.get(name, -math.inf), value)
        self.gauge_sum[name] = self.gauge_sum.get(name, 0.0) + value
        self.gauge_avgs.setdefault(name, []).append(value if avg is None else avg)


def _strip_total(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def counters_from_scrapes(before: str, after: str, rank_label: str = "engine") -> _Counters:
    """after - before for every counter series; gauges from `after`."""
    out = _Counters(rank_label)
    start = {(s.name, s.labels): s.value for s in prometheus.iter_samples(before)}
    declared = prometheus.counter_families(after)
    for s in prometheus.iter_samples(after):
        out.names.add(_strip_total(s.name))
        if s.name.endswith("_total") or s.name in declared:
            name = _strip_total(s.name)
            delta = s.value - start.get((s.name, s.labels), 0.0)
            if delta < 0:  # counter reset (engine restarted between scrapes): count from zero
                delta = s.value
            out.add(name, dict(s.labels), delta)
        elif not s.name.endswith(("_bucket", "_sum", "_count", "_created")):
            out.add_gauge(s.name, s.value)
    return out


def counters_from_export(export: dict[str, Any], rank_label: str = "engine") -> _Counters:
    """aiperf's server_metrics_export.json: counters' stats.total is the window delta, gauges' stats.max."""
    out = _Counters(rank_label)
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
                    out.add_gauge(name, value, _first_number(st, ("avg", "max", "total")))
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
    metrics: EngineMetrics | None = None,
) -> tuple[ServerMetrics, MetricsSource]:
    counters, source = engine_counters(export, before, after, metrics)
    return server_metrics_from(records, counters, metrics), source


def requests_by_rank(counters: _Counters, metrics: EngineMetrics | None = None) -> dict[str, int] | None:
    """Requests each data-parallel rank finished over the window (the engine's rank label), when there are
    several: how evenly the API server spread the load."""
    names = metrics or engines.default().metrics
    ranks = counters.by_engine.get(names.requests_done, {})
    return (
        {rank: round(n) for rank, n in sorted(ranks.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0)}
        if len(ranks) > 1
        else None
    )


def tier_counters(
    export: dict[str, Any], scrapes: Sequence[tuple[str | None, str | None]], rank_label: str = "engine"
) -> _Counters:
    """The KV tier's counters: the before/after scrapes of its /metrics when all of them exist (the engine's
    window, and servers aiperf cannot read: Mooncake's master answers HEAD with a stray body, which aiperf
    0.13 counts as unreachable), else aiperf's export of them."""
    exported = counters_from_export(export, rank_label)
    pairs = [(b, a) for b, a in scrapes if b is not None and a is not None]
    if not pairs or len(pairs) != len(scrapes):
        return exported
    out = _Counters(rank_label)
    try:
        parts = [counters_from_scrapes(before, after, rank_label) for before, after in pairs]
    except prometheus.PrometheusParseError:
        return exported
    for part in parts:
        out.names |= part.names
        for name, value in part.delta.items():
            out.delta[name] = out.delta.get(name, 0.0) + value
        out.merge_gauges(part)
    out.merge_gauges(exported)
    return out


def engine_counters(
    export: dict[str, Any], before: str | None, after: str | None, metrics: EngineMetrics | None = None
) -> tuple[_Counters, MetricsSource]:
    """The engine's counters over the window: the before/after scrape delta when both exist, else aiperf's
    export of the engine's /metrics."""
    rank_label = (metrics or engines.default().metrics).rank_label
    exported = counters_from_export(export, rank_label)
    source: MetricsSource
    if before is not None and after is not None:
        try:
            counters, source = counters_from_scrapes(before, after, rank_label), "scrape-delta"
        except prometheus.PrometheusParseError as exc:
            raise ArtifactError(f"the engine's /metrics scrape does not parse: {exc}") from None
        counters.merge_gauges(exported)
    elif exported.names:
        counters, source = exported, "aiperf-export"
    else:
        counters, source = _Counters(rank_label), "none"
    return counters, source


def server_metrics_from(
    records: list[dict[str, Any]], counters: _Counters, metrics: EngineMetrics | None = None
) -> ServerMetrics:
    names = metrics or engines.default().metrics
    present = bool(counters.names)
    hits, queries = counters.get(names.prefix_hits), counters.get(names.prefix_queries)
    ext_hits, ext_queries = counters.get(names.external_hits), counters.get(names.external_queries)
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
    prompt_total = counters.get(names.prompt_tokens)
    by_source = PromptBySource()
    cached = counters.by_source.get(names.cached_by_source, {})
    split = counters.by_source.get(names.prompt_by_source, {})
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
    if names.tier_label:
        cache, by_source = _tiered(counters, names, prompt_total)

    gpu_usage = max((counters.gauge_max[n] for n in names.gpu_usage if n in counters.gauge_max), default=None)
    # an engine without an offload counter has no figure for it (None), not a missing field
    fields = ("bytes_gpu_to_cpu", "bytes_cpu_to_gpu", "time_gpu_to_cpu", "time_cpu_to_gpu")
    offload = {f: counters.get(names.offload[f]) if f in names.offload else None for f in fields}
    kv_offload = KvOffload(
        **offload,
        bandwidth_gpu_to_cpu_bytes_per_second=_rate(offload["bytes_gpu_to_cpu"], offload["time_gpu_to_cpu"]),
        bandwidth_cpu_to_gpu_bytes_per_second=_rate(offload["bytes_cpu_to_gpu"], offload["time_cpu_to_gpu"]),
    )
    generation_total = counters.get(names.generation_tokens)
    isl = sum(_values(records, "input_sequence_length"))
    osl = sum(_values(records, "output_sequence_length"))
    tokens = ServerTokens(
        prompt_total=round(prompt_total) if prompt_total is not None else (round(isl) if records else None),
        generation_total=round(generation_total) if generation_total is not None else (round(osl) if records else None),
        requests_completed=len(records),
        prompt_by_source=by_source,
    )
    server = ServerMetrics(
        present=present,
        adapter=names.prefix.rstrip(":") if any(n.startswith(names.prefix) for n in counters.names) else "none",
        metric_count=len(counters.names),
        cache=cache,
        kv_cache=_kv_cache(counters, names, gpu_usage),
        kv_offload=kv_offload,
        tokens=tokens,
    )
    return server


def _tiered(counters: _Counters, names: EngineMetrics, prompt: float | None) -> tuple[ServerCache, PromptBySource]:
    """An engine that counts cached prompt tokens by tier (SGLang's cached_tokens by cache_source): each tier's hit
    rate is its tokens over the window's prompt tokens, the host tier (HiCache) being the external one, the overall
    rate all tiers' (InferenceX's backends/sglang.py); prompt tokens by origin: device, host and those computed."""
    by_tier = counters.by_label.get(names.tier_label, {}).get(names.cached_by_source, {})
    device, host = by_tier.get("device"), by_tier.get("host")
    host_rate = _rate(host, prompt)
    cache = ServerCache(
        gpu_cache_hit_rate=_rate(device, prompt),
        cpu_cache_hit_rate=host_rate,
        external_cache_hit_rate=host_rate,
        overall_cache_hit_rate=_rate(sum(by_tier.values()), prompt) if by_tier else None,
        cached_tokens_by_source=by_tier,
    )
    averages = counters.gauge_avgs.get(names.hit_rate_gauge) if names.hit_rate_gauge else None
    if cache.overall_cache_hit_rate is None and averages:  # no prompt tokens to rate over: the engine's own gauge
        cache.overall_cache_hit_rate = _fraction(sum(averages) / len(averages))
    label, value = names.computed_tokens
    computed = counters.by_label.get(label, {}).get(names.prompt_by_source, {}).get(value)
    return cache, PromptBySource(gpu_cache_hit=device, cpu_or_external_cache_hit=host, computed=computed, raw=by_tier)


def _kv_cache(counters: _Counters, names: EngineMetrics, gpu_usage: float | None) -> KvCache:
    """The device pool's usage (and size, where the engine exports it) and the host tier's."""
    used = counters.gauge_max.get(names.cpu_usage)
    pool = counters.gauge_sum.get(names.gpu_total) if names.gpu_total else None
    total = counters.gauge_max.get(names.cpu_total) if names.cpu_total else None
    return KvCache(
        gpu_usage_pct=_fraction(gpu_usage),
        gpu_total_tokens=round(pool) if pool is not None else None,
        # a host tier exported as tokens used of a total, or as a usage fraction
        cpu_usage_pct=_rate(used, total) if names.cpu_total else _fraction(used),
        cpu_used_tokens=used if names.cpu_total else None,
        cpu_total_tokens=total,
    )


# ---------------------------------------------------------------- InferenceX's per-source figures and export check

# labels that tell one scraped server (a rank, a worker) from another, after its role and endpoint
_SOURCE_LABELS = ("worker_id", "dp_rank", "engine")
_ROLES = {"prefill": "prefill", "backend": "decode", "decode": "decode", "frontend": "router", "router": "router"}


def export_sources(export: dict[str, Any], metrics: EngineMetrics | None = None) -> list[dict[str, Any]]:
    """server_metrics.sources as InferenceX fills it from aiperf's export: one entry per scraped server
    (role, endpoint, rank labels), with its prompt/generation tokens, prefix-cache hit rate and KV usage."""
    names = metrics or engines.default().metrics
    entries = export.get("metrics") if isinstance(export, dict) else None
    if not names.lists_sources:
        return []
    if not isinstance(entries, dict) or not any(str(n).startswith(names.prefix) for n in entries):
        return []  # InferenceX fills sources only through an engine adapter the export matched
    keyed = (
        names.prompt_tokens, names.generation_tokens, names.prefix_hits, names.prefix_queries,
        names.gpu_usage[0], names.prompt_by_source,
    )  # fmt: skip
    ids = sorted({_source_id(series) for name in keyed for series in _series(entries, name)})
    out = []
    for source in ids:
        hits = _series_sum(entries, names.prefix_hits, source)
        queries = _series_sum(entries, names.prefix_queries, source)
        usage = [v for n in names.gpu_usage for s in _series(entries, n) if _source_id(s) == source
                 if (v := _series_value(s, ("max", "avg", "total"))) is not None]  # fmt: skip
        out.append(
            {
                "id": source,
                "role": source.split("|", 1)[0],
                "prompt_tokens": _series_sum(entries, names.prompt_tokens, source),
                "generation_tokens": _series_sum(entries, names.generation_tokens, source),
                "prefix_cache_hit_rate": _rate(hits, queries),
                "gpu_kv_cache_usage_pct": _fraction(max(usage)) if usage else None,
            }
        )
    return out


def _series(entries: dict[str, Any], name: str) -> list[dict[str, Any]]:
    entry = entries.get(name)
    series = entry.get("series") if isinstance(entry, dict) else None
    return [s for s in series if isinstance(s, dict)] if isinstance(series, list) else []


def _series_value(series: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    stats_ = series.get("stats")
    if not isinstance(stats_, dict):
        return None
    for key in keys:
        try:
            return float(stats_[key])
        except (KeyError, TypeError, ValueError):
            continue  # absent, null or not a number: the next statistic
    return None


def _series_sum(entries: dict[str, Any], name: str, source: str) -> float | None:
    values = [
        v
        for s in _series(entries, name)
        if _source_id(s) == source and (v := _series_value(s, ("total", "sum", "max", "avg"))) is not None
    ]
    return sum(values) if values else None


def _source_id(series: dict[str, Any]) -> str:
    """role|endpoint|label=value...: the server a series was scraped from, as InferenceX names it."""
    labels = series.get("labels") if isinstance(series.get("labels"), dict) else {}
    assert isinstance(labels, dict)
    component = str(labels.get("dynamo_component") or labels.get("component") or "")
    parts = [_ROLES.get(component, "combined")]
    if endpoint := series.get("endpoint_url"):
        parts.append(str(endpoint))
    parts += [f"{key}={labels[key]}" for key in _SOURCE_LABELS if labels.get(key) is not None]
    return "|".join(parts)


def metrics_export(artifact_dir: Path, metrics: EngineMetrics | None = None) -> MetricsExport:
    """What InferenceX's `validate_required_agentic_server_metrics` reads: both export files non-empty, and
    a metric named with the engine's required prefix in the JSON (a fixed-string scan, as its grep does)."""
    prefix = (metrics or engines.default().metrics).required_prefix
    json_path, csv_path = artifact_dir / SERVER_METRICS_JSON, artifact_dir / SERVER_METRICS_CSV
    json_nonempty, csv_nonempty = _nonempty(json_path), _nonempty(csv_path)
    found = bool(prefix) and json_nonempty and _contains(json_path, f'"{prefix}'.encode())
    return MetricsExport(
        required_prefix=prefix, json_nonempty=json_nonempty, csv_nonempty=csv_nonempty, prefix_found=found
    )


def _nonempty(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def _contains(path: Path, needle: bytes, chunk: int = 1 << 20) -> bool:
    """Whether `needle` occurs in the file, read in chunks (the export can be GiBs)."""
    tail = b""
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            if needle in tail + block:
                return True
            # the needle's first bytes may lie in more than one earlier block when blocks are shorter than it
            tail = (tail + block)[-(len(needle) - 1) :] if len(needle) > 1 else b""
    return False


def _warnings(server: ServerMetrics, source: MetricsSource) -> list[str]:
    out = []
    if source == "none":
        out.append("no engine metrics: neither before/after scrapes nor server_metrics_export.json")
    return out


def kv_pool_tokens(
    engine_logs: Sequence[Path], pattern: KvPoolLog | None = None, attention_dp_ranks: int = 1
) -> int | None:
    """Tokens of KV cache the engine allocated, from its pool-size log line (`Engine.kv_pool_log`), summed over
    the logs (every node's log of a multinode engine: each node logs its own ranks). `attention_dp_ranks`: the
    pools of an engine whose ranks all log the one pool they share (`pattern.shared`), one per attention-DP rank."""
    pattern = pattern or engines.default().kv_pool_log
    pools = [pool for log in engine_logs if (pool := _log_pool_tokens(log, pattern, attention_dp_ranks)) is not None]
    return sum(pools) if pools else None


def _log_pool_tokens(log: Path, pattern: KvPoolLog, attention_dp_ranks: int = 1) -> int | None:
    """One log's pools: the last line of each tagged rank, summed; untagged lines only where no line is tagged
    (summed or the last, `pattern.untagged`); a lone rank's line counted `pattern.ranks` times. Ranks that share one
    pool (`pattern.shared`): one rank's figure (the smallest), once per attention-DP rank."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    size_re, rank_re = re.compile(pattern.size), re.compile(pattern.rank)
    tagged: dict[str, int] = {}
    untagged: list[int] = []
    for line in text.splitlines():
        if pattern.marker not in line or not (size := size_re.search(line)):
            continue
        try:
            tokens = int(size.group("tokens").replace(",", ""))
        except ValueError:  # a run of commas and no digit
            continue
        if tokens <= 0:
            continue
        if tag := rank_re.search(line):
            tagged[tag.group("tag")] = tokens
        else:
            untagged.append(tokens)
    pools = list(tagged.values()) or (untagged if pattern.untagged == "sum" else untagged[-1:])
    if not pools:
        return None
    if pattern.shared:
        return min(pools) * max(attention_dp_ranks, 1)
    ranks = re.search(pattern.ranks, text) if pattern.ranks else None
    if len(pools) == 1 and ranks and int(ranks.group("ranks")) > 1:
        return pools[0] * int(ranks.group("ranks"))
    return sum(pools)
