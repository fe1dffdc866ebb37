"""result.json: InferenceX's agentic *aggregate* schema (one object per sweep point), plus `slurmx`.

Field names follow InferenceX's aggregation code (utils/agentic/aggregation/process_agentic_result.py,
request_metrics.py, server_metrics.py and its test_process_agentic_result.py key sets; later moved to
infx/results/agentic/). Facts taken from there:

- Identity: hw (= RUNNER_TYPE), conc, image, recipe_fingerprint, model, infmax_model_prefix
  (= MODEL_PREFIX), framework, precision, spec_decoding, disagg, scenario_type ("agentic-coding"),
  is_multinode, num_gpus, tp, ep, dp_attention (the *string* "true"/"false", as the env carries it),
  pp, dcp_size, pcp_size (single node; multinode rows carry prefill_*/decode_* instead),
  kv_offloading ("none" | "dram"), kv_offload_backend ({name, version?} or null),
  allocated_cpu_dram_gb (= TOTAL_CPU_DRAM_GB), optional router {name, version}, kv_p2p_transfer,
  dataset (aiperf metadata.dataset).
- num_requests_total / num_requests_successful and request_accounting (records_total,
  records_profiled, records_dropped_total, records_warmup_dropped, records_error_dropped,
  error_categories). Warmup-phase and errored records are dropped before any statistic.
- request_metrics: qps {window_seconds, samples, mean..std} over 1 s completion windows;
  latency {ttft, e2el, itl, tpot, intvty, e2e_norm_intvty, full_response_itl, full_response_intvty},
  each {mean, p50, p75, p90, p95, std} in seconds (aiperf reports ms), or {} without samples;
  intvty.pX = 1 / itl.pX (tokens/s per user, slow tail); e2e_norm_intvty.pX = 1 / pX(e2el_s / osl);
  tpot is computed from the same per-request ITL values as itl; percentiles interpolate linearly,
  std is the population deviation.
  tokens {input, output_actual, output_expected}: same six statistics over per-request counts.
  throughput {input, output, total: {tokens_per_second}, duration_seconds
  (last request end - first request start), per_gpu {total_tput_tps, output_tput_tps,
  input_tput_tps} = those rates / (tp*pp*pcp)}; cache {theoretical_cache_hit_rate}.
- server_metrics {present, adapter, metric_count, cache {gpu/cpu/external/overall_cache_hit_rate,
  prefix_cache_hits/queries, external_prefix_cache_hits/queries, cached_tokens_by_source, ...},
  kv_cache {gpu_usage_pct, gpu_total_tokens, cpu_usage_pct, cpu_used_tokens, cpu_total_tokens},
  kv_offload {bytes_*, time_*, bandwidth_*_bytes_per_second}, tokens {prompt_total,
  generation_total, requests_completed, prompt_by_source {gpu_cache_hit,
  cpu_or_external_cache_hit, computed, raw}}, sources [...]}; rates and usage are fractions 0..1.
  vLLM rule: gpu = prefix_cache_hits/queries, cpu = external = external hits/queries; when
  vllm:prompt_tokens_by_source exists (local_cache_hit | external_kv_transfer | local_compute) those
  shares replace them and overall = (local + external) / all, else overall = gpu.
  slurmx additions (values only, no new names): counters may come from /metrics scraped before and
  after the replay (delta) instead of aiperf's export; cached_tokens_by_source holds vLLM 0.32's
  vllm:prompt_tokens_cached_by_source (device | host | p2p | disk | external_unspecified), and a
  non-zero `host` share becomes the cpu rate (LMCache reports as external_unspecified).
- kv_cache_pool_tokens (= server_metrics.kv_cache.gpu_total_tokens), warnings.
- The files are named RESULT_FILENAME.json per point and concatenated into `agg_<exp>.json`
  (a JSON list) by utils/collect_results.py.

Everything slurmx adds lives under `slurmx`, so an InferenceX reader sees only its own fields. A statistic,
per-GPU figure or component version slurmx has no value for is absent, as InferenceX leaves it out; result.json
keeps figures whole, and the InferenceX object (Result.inferencex(), agg_<key>.json) rounds them as InferenceX
writes them (five decimals).

- Power (utils/aggregate_power.py, power_metric_schema_version 2): power_metric_schema_version,
  power_valid (1/0) and, only when valid, avg_power_w, avg_total_gpu_power_w, total_gpu_energy_j,
  joules_per_successful_query / _input_token / _output_token / _total_token (slurmx.results.energy
  computes them by the same rules); absent when no telemetry ran (a node without GPUs).

- slurmx.certification (docs/certification.md): per headline metric and percentile, the requests behind it, a
  distribution-free order-statistic interval with its ranks, whether it is certified (95 %, +-10 % by default) and
  the requests it would need; absent in results written before it.

Fields newer than this schema are accepted and kept on round trips; known fields still reject wrong types.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from slurmx.plan import server_gpus
from slurmx.store import atomic

SCHEMA_VERSION = 1
# The request error rate over which a point is invalid when its recipe sets none (and for results written before
# result.json recorded the one the node gated with).
DEFAULT_ERROR_THRESHOLD = 0.10


class _Strict(BaseModel):
    # open to fields a newer InferenceX writes (kept on dump); the known ones stay typed
    model_config = ConfigDict(extra="allow")


class _Sparse(_Strict):
    """An object InferenceX writes with only the figures it has: a field left unset is absent, not null."""

    @model_serializer(mode="wrap")
    def _present(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}


class Stats(_Sparse):
    """Six statistics of one per-request quantity; all absent ({}) when there were no samples."""

    mean: float | None = None
    p50: float | None = None
    p75: float | None = None
    p90: float | None = None
    p95: float | None = None
    std: float | None = None


class QpsStats(Stats):
    window_seconds: float | None = None
    samples: int | None = None


class Latency(_Strict):
    ttft: Stats = Field(default_factory=Stats)
    e2el: Stats = Field(default_factory=Stats)
    itl: Stats = Field(default_factory=Stats)
    tpot: Stats = Field(default_factory=Stats)
    intvty: Stats = Field(default_factory=Stats)
    e2e_norm_intvty: Stats = Field(default_factory=Stats)
    full_response_itl: Stats = Field(default_factory=Stats)
    full_response_intvty: Stats = Field(default_factory=Stats)


class TokenStats(_Strict):
    input: Stats = Field(default_factory=Stats)
    output_actual: Stats = Field(default_factory=Stats)
    output_expected: Stats = Field(default_factory=Stats)


class Rate(_Strict):
    tokens_per_second: float


class PerGpu(_Sparse):
    total_tput_tps: float | None = None
    output_tput_tps: float | None = None
    input_tput_tps: float | None = None


class Throughput(_Sparse):
    input: Rate | None = None
    output: Rate | None = None
    total: Rate | None = None
    full_response_output_token_throughput_per_user: Stats | None = None
    duration_seconds: float | None = None
    per_gpu: PerGpu = Field(default_factory=PerGpu)


class RequestCache(_Strict):
    theoretical_cache_hit_rate: float | None = None


class RequestMetrics(_Sparse):
    qps: QpsStats = Field(default_factory=QpsStats)
    latency: Latency = Field(default_factory=Latency)
    tokens: TokenStats = Field(default_factory=TokenStats)
    throughput: Throughput = Field(default_factory=Throughput)
    cache: RequestCache = Field(default_factory=RequestCache)
    stability: dict[str, Any] | None = None  # some InferenceX versions; not computed by slurmx


class RequestAccounting(_Strict):
    records_total: int = 0
    records_profiled: int = 0
    records_dropped_total: int = 0
    records_warmup_dropped: int = 0
    records_error_dropped: int = 0
    error_categories: dict[str, int] = Field(default_factory=dict)


class ServerCache(_Strict):
    gpu_cache_hit_rate: float | None = None
    cpu_cache_hit_rate: float | None = None
    external_cache_hit_rate: float | None = None
    overall_cache_hit_rate: float | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    external_prefix_cache_hits: float | None = None
    external_prefix_cache_queries: float | None = None
    cached_tokens_by_source: dict[str, float] = Field(default_factory=dict)
    frontend_cache_hit_rate: float | None = None
    router_kv_hit_rate: float | None = None
    router_shared_cache_hit_rate: float | None = None
    frontend_cached_tokens: float | None = None
    frontend_input_tokens: float | None = None


class KvCache(_Strict):
    gpu_usage_pct: float | None = None
    gpu_total_tokens: int | None = None
    cpu_usage_pct: float | None = None
    cpu_used_tokens: float | None = None
    cpu_total_tokens: float | None = None


class KvOffload(_Strict):
    bytes_gpu_to_cpu: float | None = None
    bytes_cpu_to_gpu: float | None = None
    time_gpu_to_cpu: float | None = None
    time_cpu_to_gpu: float | None = None
    bandwidth_gpu_to_cpu_bytes_per_second: float | None = None
    bandwidth_cpu_to_gpu_bytes_per_second: float | None = None


class PromptBySource(_Strict):
    gpu_cache_hit: float | None = None
    cpu_or_external_cache_hit: float | None = None
    computed: float | None = None
    raw: dict[str, float] = Field(default_factory=dict)


class ServerTokens(_Strict):
    prompt_total: int | None = None
    generation_total: int | None = None
    requests_completed: int | None = None
    prompt_by_source: PromptBySource = Field(default_factory=PromptBySource)


class ServerMetrics(_Strict):
    present: bool = False
    adapter: str = "none"
    metric_count: int = 0
    cache: ServerCache = Field(default_factory=ServerCache)
    kv_cache: KvCache = Field(default_factory=KvCache)
    kv_offload: KvOffload = Field(default_factory=KvOffload)
    tokens: ServerTokens = Field(default_factory=ServerTokens)
    sources: list[dict[str, Any]] = Field(default_factory=list)


class ComponentMeta(_Sparse):
    """InferenceX's {name, version} metadata of a router or KV-offload backend (version optional for the latter:
    absent when unknown, as InferenceX writes it)."""

    name: str
    version: str | None = None


MetricsSource = Literal["scrape-delta", "aiperf-export", "none"]


class ArmEvidence(_Strict):
    """What shows the arm did what it claims, over the replay window, from the engine and from the tier.

    Token figures are the engine's (vLLM's prompt tokens by source); `tier` holds the backend's own
    counters (for LMCache: lookup-hit tokens, chunks stored and read, L1 usage)."""

    arm: str  # the KV-offload backend the point claims ("none" when it does not offload)
    expected_connector: str | None = None  # the kv_connector that arm puts on the engine
    engine_argv_seen: bool = False  # engine_connector was read from the argv that ran
    engine_connector: str | None = None  # the kv_connector found in the engine argv that ran
    prompt_tokens: float | None = None
    local_hit_tokens: float | None = None  # served by the engine's own KV pool
    tier_tokens: float | None = None  # received by the engine from the external tier
    computed_tokens: float | None = None  # recomputed (prefill)
    tier_hit_rate: float | None = None  # tier_tokens / prompt_tokens
    tier: dict[str, float] = Field(default_factory=dict)
    tier_side_hit_tokens: float | None = None  # the tier's own count of tokens it served
    tier_side_hit_rate: float | None = None  # tier_side_hit_tokens / prompt_tokens
    tier_absent_reason: str | None = None  # why `tier` / the tier-side figure is missing (Mooncake: not collected)
    kv_pool_tokens: int | None = None
    working_set_tokens: int | None = None  # live shared prefix + the concurrent sessions' contexts
    log_failures: list[str] = Field(default_factory=list)  # "reason (file:line)"

    @property
    def exceeded_pool(self) -> bool | None:
        if self.working_set_tokens is None or self.kv_pool_tokens is None:
            return None
        return self.working_set_tokens > self.kv_pool_tokens


class EnergyMeta(_Strict):
    """The telemetry behind the power fields, and what InferenceX keeps in its validation sidecar."""

    source: str  # nvml | nvidia-smi | none
    absent_reason: str | None = None  # why a node had no GPU telemetry
    power_valid: bool = False
    reasons: list[str] = Field(default_factory=list)  # InferenceX's reason codes
    integration_method: str | None = None
    window_start_unix: float | None = None
    window_end_unix: float | None = None
    gpu_ids: list[str] = Field(default_factory=list)
    per_gpu_energy_j: dict[str, float] = Field(default_factory=dict)
    per_gpu_max_sample_gap_s: dict[str, float] = Field(default_factory=dict)
    peak_power_w: float | None = None
    counter_energy_j: float | None = None  # the driver's energy counter over the same window
    output_tokens_per_s_per_kw: float | None = None
    total_tokens_per_s_per_kw: float | None = None


class AiperfCounts(_Strict):
    """What InferenceX's validity gate reads of aiperf's aggregate (profile_export_aiperf.json, each `<name>.avg`),
    so a later judge applies its rule without the file; `unreadable`: why it could not be read (its message)."""

    request_count: float | None = None  # successful profiled requests
    error_request_count: float | None = None
    completed_request_count: float | None = None  # successes + errors, when aiperf says so itself
    unreadable: str | None = None

    def figures(self) -> tuple[float, float | None]:
        """(errors, completed) as InferenceX's gate counts them: a missing error count is 0, a missing completed
        count is successes + errors; completed is None without a success count."""
        errors = self.error_request_count or 0.0
        if self.request_count is None:
            return errors, None
        completed = self.completed_request_count
        return errors, completed if completed is not None else self.request_count + errors


class MetricsExport(_Strict):
    """What InferenceX's required-server-metrics check reads of aiperf's server-metrics export."""

    required_prefix: str | None = None  # the engine's (None: the engine requires none)
    json_nonempty: bool = False  # server_metrics_export.json exists and is not empty
    csv_nonempty: bool = False  # server_metrics_export.csv exists and is not empty
    prefix_found: bool = False  # the JSON names a metric starting with the prefix


class PercentileCertificate(_Strict):
    """One reported percentile of one metric (results/certify.py): the profiled requests behind it, its
    distribution-free interval with the ranks (1 = smallest per-request value) it ends at, the interval's exact
    coverage, whether it is certified, and the requests it would need (an estimate; None once certified)."""

    count: int
    estimate: float | None = None
    lo: float | None = None  # None: that end does not exist at this count
    hi: float | None = None
    lo_rank: int | None = None
    hi_rank: int | None = None
    coverage: float | None = None
    certified: bool = False
    need: int | None = None


class Certification(_Strict):
    """Whether the point's sample supports the percentiles it reports, per headline metric and percentile
    ("ttft" -> "p90" -> certificate); the rule and its parameters with it."""

    method: Literal["order-statistics", "loadgen"] = "order-statistics"
    confidence: float
    rel_width: float | None = None  # the order-statistics rule's +- relative width; None for LoadGen's rule
    metrics: dict[str, dict[str, PercentileCertificate]] = Field(default_factory=dict)

    def uncertified(self) -> list[tuple[str, str, PercentileCertificate]]:
        """(metric, percentile, certificate) of every percentile not certified, in the recorded order."""
        return [(m, p, c) for m, by_p in self.metrics.items() for p, c in by_p.items() if not c.certified]


class SlurmxMeta(_Strict):
    """What slurmx knows about the run and InferenceX does not; never read by InferenceX."""

    schema_version: int = SCHEMA_VERSION
    point_id: str
    config_key: str
    exp_name: str
    parallelism: str | None = None  # the point's label (TP8, DEP8, ...), as plan, status and collect show it
    sweep_id: str
    attempt: int = 1
    slurm_job_id: str | None = None
    node: str | None = None
    nodes: list[str] | None = None  # a multinode point's nodes, the head first
    requests_by_rank: dict[str, int] | None = None  # requests each data-parallel rank finished (several ranks)
    backend_version: str | None = None  # the KV-offload backend version that actually ran
    engine_version: str | None = None
    aiperf_version: str | None = None
    started_at: float | None = None  # epoch seconds, like state.json
    ended_at: float | None = None
    was_cancelled: bool = False  # aiperf's profile_export_aiperf.json `was_cancelled`
    incomplete_reason: str | None = None  # aiperf's `incomplete_reason` when it set is_complete false
    aiperf_error_count: int | None = None  # aiperf's own error count (error_summary), for cross-checking
    engine_metrics_source: MetricsSource = "none"
    image_digest: str | None = None  # from the lock, where the runtime knows it
    evidence: ArmEvidence | None = None
    energy: EnergyMeta | None = None  # GPU telemetry over the window (None: no sampler ran)
    invalid_reason: str | None = None  # set when the validity gate refused the point (the file is kept)
    invalid_rule: str | None = None  # which rule refused it (results/gate.py's RULES), with invalid_reason
    # the replay ended early (time limit, cancel, a crashed server): why, kept whatever rule refused the point,
    # so a later judge (collect, rebuild) still knows it
    partial_reason: str | None = None
    aiperf_counts: AiperfCounts | None = None  # None: written before slurmx recorded them
    metrics_export: MetricsExport | None = None  # None: written before slurmx recorded it
    labels: list[str] = Field(default_factory=list)  # e.g. "offload not exercised": valid, but say so
    repeat: int = 1  # which run of the point this is (`submit --repeats`); part of the result's identity
    repeats: int = 1  # how many runs were asked for
    repeat_mode: Literal["separate-tasks", "shared-server"] | None = None  # how the repeats ran
    failed_request_threshold: float = DEFAULT_ERROR_THRESHOLD  # the error rate the node gated with (the recipe's)
    certification: Certification | None = None  # None: written before slurmx certified percentiles
    # a point replayed until certified (`submit --until-certified`): its rounds, and what ended them; both left
    # out of result.json for a point replayed once (Result.dump)
    rounds: int | None = None
    stopped_by: Literal["certified", "budget"] | None = None


class Result(_Strict):
    # identity
    hw: str
    conc: int
    image: str
    recipe_fingerprint: str = ""
    model: str
    infmax_model_prefix: str
    framework: str
    precision: str
    spec_decoding: str = "none"
    disagg: bool = False
    scenario_type: str = "agentic-coding"
    is_multinode: bool = False
    num_gpus: int | None = None
    tp: int
    ep: int = 1
    dp_attention: str = "false"
    pp: int | None = None
    dcp_size: int | None = None
    pcp_size: int | None = None
    kv_offloading: str = "none"
    kv_offload_backend: ComponentMeta | None = None
    allocated_cpu_dram_gb: int = 0
    router: ComponentMeta | None = None
    kv_p2p_transfer: str | None = None
    dataset: dict[str, Any] | None = None
    # multinode shape (InferenceX's _gpu_shape); absent for single-node points
    prefill_num_workers: int | None = None
    prefill_tp: int | None = None
    prefill_pp: int | None = None
    prefill_dcp_size: int | None = None
    prefill_pcp_size: int | None = None
    prefill_ep: int | None = None
    prefill_dp_attention: str | None = None
    num_prefill_gpu: int | None = None
    decode_num_workers: int | None = None
    decode_tp: int | None = None
    decode_pp: int | None = None
    decode_dcp_size: int | None = None
    decode_pcp_size: int | None = None
    decode_ep: int | None = None
    decode_dp_attention: str | None = None
    num_decode_gpu: int | None = None
    prefill_hw: str | None = None
    decode_hw: str | None = None
    # request accounting
    num_requests_total: int
    num_requests_successful: int
    request_accounting: RequestAccounting = Field(default_factory=RequestAccounting)
    # metrics
    request_metrics: RequestMetrics = Field(default_factory=RequestMetrics)
    server_metrics: ServerMetrics = Field(default_factory=ServerMetrics)
    kv_cache_pool_tokens: int | None = None
    warnings: list[str] | None = None
    # power, InferenceX's names and contract; absent when no telemetry ran
    power_metric_schema_version: int | None = None
    power_valid: int | None = None
    avg_power_w: float | None = None
    avg_total_gpu_power_w: float | None = None
    total_gpu_energy_j: float | None = None
    joules_per_successful_query: float | None = None
    joules_per_input_token: float | None = None
    joules_per_output_token: float | None = None
    joules_per_total_token: float | None = None
    # slurmx's own, under one key
    slurmx: SlurmxMeta | None = None

    @property
    def counts(self) -> AiperfCounts:
        """aiperf's aggregate counts InferenceX's gate reads: as recorded; else (a file written before slurmx
        recorded them, or an InferenceX aggregate) the per-record counts, whose errors include warmup's."""
        recorded = self.slurmx.aiperf_counts if self.slurmx is not None else None
        return recorded if recorded is not None else self._record_counts()

    def _record_counts(self) -> AiperfCounts:
        errors = float(self.request_accounting.records_error_dropped)
        return AiperfCounts(request_count=float(self.num_requests_successful), error_request_count=errors)

    @property
    def error_rate(self) -> float:
        """InferenceX's error rate (the gate's): errors over completed profiled requests (0 when none completed);
        the per-record counts where aiperf's aggregate did not say."""
        errors, completed = self.counts.figures()
        if completed is None:
            errors, completed = self._record_counts().figures()
        return errors / completed if completed else 0.0

    @property
    def gpus(self) -> int:
        if self.num_gpus:
            return self.num_gpus
        return server_gpus(self.tp, self.pp or 1, self.pcp_size or 1)

    @property
    def backend_name(self) -> str:
        return self.kv_offload_backend.name if self.kv_offload_backend else "none"

    def dump(self) -> dict[str, Any]:
        """result.json's content: optional identity InferenceX writes only when it applies is left out
        when unset (e.g. the multinode fields of a single-node point); every metric key stays. A float that is not
        finite is null, in every field: JSON has no Infinity or NaN (pydantic's JSON mode nulls them only in
        fields typed Any, and json.dumps would write the bare words)."""
        data: dict[str, Any] = atomic.finite(self.model_dump(mode="json"))
        for key in _OMIT_WHEN_NONE:
            if data.get(key) is None:
                data.pop(key, None)
        for key in _SLURMX_OMIT_WHEN_NONE:
            if isinstance(data.get("slurmx"), dict) and data["slurmx"].get(key) is None:
                data["slurmx"].pop(key, None)
        return data

    def inferencex(self) -> dict[str, Any]:
        """The object InferenceX itself would write: dump() without the `slurmx` key, its figures as InferenceX
        writes them (five decimals; result.json keeps them whole). Its power step adds the power fields to the
        written aggregate afterwards, at their own precision (energy.power_fields), so they stay as they are."""
        data = self.dump()
        data.pop("slurmx", None)
        return {key: value if key in POWER_FIELDS else _as_written(value) for key, value in data.items()}


def _as_written(value: Any) -> Any:
    """A figure as InferenceX's aggregate writes it: every finite float to 5 decimals, and one that rounds to a
    whole number of 1 or more as that integer (2.0 -> 2, 0.0 stays 0.0); ints, strings, None untouched."""
    if isinstance(value, dict):
        return {key: _as_written(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_written(item) for item in value]
    if not isinstance(value, float) or not math.isfinite(value):
        return value
    short = round(value, 5)
    return int(short) if short.is_integer() and abs(short) >= 1 else short


POWER_FIELDS = (
    "power_metric_schema_version",
    "power_valid",
    "avg_power_w",
    "avg_total_gpu_power_w",
    "total_gpu_energy_j",
    "joules_per_successful_query",
    "joules_per_input_token",
    "joules_per_output_token",
    "joules_per_total_token",
)
# The slurmx block's keys of a point replayed until certified, absent from any other point's result.json
_SLURMX_OMIT_WHEN_NONE = ("rounds", "stopped_by")
# Keys InferenceX writes only when they apply; all others are always present (possibly null).
_OMIT_WHEN_NONE = (
    "router",
    "kv_p2p_transfer",
    "dataset",
    "warnings",
    "num_gpus",
    "pp",
    "dcp_size",
    "pcp_size",
    *(
        f"{side}_{name}"
        for side in ("prefill", "decode")
        for name in ("num_workers", "tp", "pp", "dcp_size", "pcp_size", "ep", "dp_attention", "hw")
    ),
    "num_prefill_gpu",
    "num_decode_gpu",
    *POWER_FIELDS,
)
