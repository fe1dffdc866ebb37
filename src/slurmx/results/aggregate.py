"""aiperf artifacts (+ engine /metrics scraped before and after the replay) -> one Result: the assembly.
The request figures come from results/requests.py, the server figures from results/server_metrics.py.

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
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from slurmx import engines
from slurmx.config.master import WorkerSpec
from slurmx.engines import Engine
from slurmx.plan import Point
from slurmx.results import certify, energy, gate
from slurmx.results.evidence import ArmInputs, build_evidence
from slurmx.results.requests import PROFILE_JSON as PROFILE_JSON
from slurmx.results.requests import PROFILE_JSONL as PROFILE_JSONL
from slurmx.results.requests import SERVER_METRICS_JSON as SERVER_METRICS_JSON
from slurmx.results.requests import ArtifactError as ArtifactError
from slurmx.results.requests import _error_category as _error_category
from slurmx.results.requests import _load_json as _load_json
from slurmx.results.requests import _qps as _qps
from slurmx.results.requests import _theoretical_hit_rate as _theoretical_hit_rate
from slurmx.results.requests import certification, compute_request_metrics
from slurmx.results.requests import load_records as load_records
from slurmx.results.rounds import read_artifacts
from slurmx.results.schema import (
    DEFAULT_ERROR_THRESHOLD,
    ComponentMeta,
    EnergyMeta,
    MetricsSource,
    PerGpu,
    Result,
    SlurmxMeta,
)
from slurmx.results.server_metrics import (
    _warnings,
    export_sources,
    server_metrics_from,
    tier_counters,
)
from slurmx.results.server_metrics import compute_server_metrics as compute_server_metrics
from slurmx.results.server_metrics import engine_counters as engine_counters
from slurmx.results.server_metrics import kv_pool_tokens as kv_pool_tokens
from slurmx.results.server_metrics import requests_by_rank as requests_by_rank
from slurmx.store import atomic

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
class RunFacts:
    """What only the node knows of a run, beside its artifacts: the versions that ran (from the lock), the
    error threshold it gates with (the recipe's), which repeat it is, and why the replay ended early."""

    failed_request_threshold: float = DEFAULT_ERROR_THRESHOLD
    engine_version: str | None = None
    backend_version: str | None = None
    image_digest: str | None = None
    repeat: int = 1
    repeats: int = 1
    repeat_mode: Literal["separate-tasks", "shared-server"] | None = None
    partial_reason: str | None = None  # the replay ended early (time limit, cancel, a crashed server): why
    stopped_by: Literal["certified", "budget"] | None = None  # what ended a point replayed until certified

    @classmethod
    def of(cls, meta: SlurmxMeta) -> RunFacts:
        """The facts a written result recorded (what `slurmx rebuild` carries over)."""
        recorded = {name: getattr(meta, name) for name in _RECORDED if name != "partial_reason"}
        return cls(**recorded, partial_reason=gate.partial_reason(meta))


# RunFacts' fields, each recorded in SlurmxMeta under the same name
_RECORDED = tuple(f.name for f in fields(RunFacts))


@dataclass(frozen=True)
class ReplayWindow:
    """When the replay ran, and the engine's /metrics text scraped right before and right after it."""

    started_at: float | None = None
    ended_at: float | None = None
    engine_metrics_before: str | None = None
    engine_metrics_after: str | None = None
    # (before, after) of each of the KV tier's /metrics URLs, in the backend's order
    tier_metrics: tuple[tuple[str | None, str | None], ...] = ()


def build_result(
    point: Point,
    artifact_dir: Path,
    *,
    run: RunMeta,
    window: ReplayWindow | None = None,
    engine_logs: Sequence[Path] = (),
    arm: ArmInputs | None = None,
    telemetry_dir: Path | None = None,
    facts: RunFacts | None = None,
    policy: certify.Policy | None = None,
) -> Result:
    """One point's replay, finished: its aggregate (identity fields are the point's InferenceX row), what the
    node knows of the run (`facts`), and the gate's verdict. The node and `slurmx rebuild` both build here.

    `engine_logs` are the engine's logs (one per node of a multinode engine), for the KV-cache pool size
    (kv_cache_pool_tokens); `arm` is what
    the job body knows of how the arm ran (engine argv, logs, working set), for the arm's evidence; `policy` how its
    percentiles are certified (results/certify.py; 95 % and +-10 % by default)."""
    window = window or ReplayWindow()
    engine = engine_of(point)
    artifact_dir = Path(artifact_dir)
    # aiperf/ itself, or the pooled rounds of a point replayed until certified (results/rounds.py)
    artifacts = read_artifacts(artifact_dir, engine.metrics)
    records, accounting, profile = artifacts.records, artifacts.accounting, artifacts.profile
    server_export = artifacts.server_export

    gpus = _multinode_gpus(point) if point.multinode else point.gpus
    request_metrics = compute_request_metrics(records, profile, artifacts.by_round)
    totals = request_metrics.throughput
    if totals.total is not None and gpus > 0:
        request_metrics.throughput.per_gpu = PerGpu(
            total_tput_tps=totals.total.tokens_per_second / gpus,
            output_tput_tps=totals.output.tokens_per_second / gpus if totals.output else 0.0,
            input_tput_tps=totals.input.tokens_per_second / gpus if totals.input else 0.0,
        )

    names = engine.metrics
    counters, source = engine_counters(server_export, window.engine_metrics_before, window.engine_metrics_after, names)
    server_metrics = server_metrics_from(records, counters, names)
    server_metrics.sources = export_sources(server_export, names)
    if engine_logs:
        # attention DP as the point runs it (InferenceX's TRT-LLM scripts: enable_attention_dp: $DP_ATTENTION)
        attention_dp = point.tp if point.dp_attn else 1
        server_metrics.kv_cache.gpu_total_tokens = kv_pool_tokens(engine_logs, engine.kv_pool_log, attention_dp)
    meta = _slurmx_meta(point, profile, run, window, source)
    meta.requests_by_rank = requests_by_rank(counters, names)
    meta.certification = certification(records, policy)  # the same records the percentiles come from
    # what InferenceX's gate and its required-metrics check read, so any later judge can apply them
    meta.aiperf_counts = artifacts.counts
    meta.metrics_export = artifacts.export
    meta.rounds = artifacts.rounds
    tier = tier_counters(server_export, window.tier_metrics, names.rank_label)
    meta.evidence = build_evidence(
        point.backend_name, server_metrics, tier.delta, tier.gauge_max, arm or ArmInputs(), engine
    )
    backend = point.kv_offload_backend
    dataset = (profile.get("metadata") or {}).get("dataset") if isinstance(profile, dict) else None
    assert not point.concs, "a result is of one concurrency"
    facts = facts or RunFacts()
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
            # the recipe's pin, else the version the lock recorded on the node (facts: meta has none yet)
            ComponentMeta(name=backend.name, version=backend.version or facts.backend_version) if backend else None
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
    return gate.judged(_with_facts(result, facts))


def _with_facts(result: Result, facts: RunFacts) -> Result:
    meta = result.slurmx
    assert meta is not None
    for name in _RECORDED:  # the partial reason too: InferenceX's rules still come first, the gate reads it after
        setattr(meta, name, getattr(facts, name))
    return result


def engine_of(point: Point) -> Engine:
    """The engine whose declared metric names and log lines the point's artifacts carry: its framework's,
    or the default engine's for a framework slurmx does not serve (an InferenceX row aggregated for parity)."""
    return engines.REGISTRY.get(point.engine) or engines.default()


def _worker_gpus(worker: WorkerSpec) -> int:
    return worker.num_worker * worker.tp * worker.pp * worker.pcp_size


def _multinode_gpus(point: Point) -> int:
    assert point.prefill is not None and point.decode is not None
    return _worker_gpus(point.prefill) + _worker_gpus(point.decode)


def _set_worker_shape(result: Result, point: Point) -> None:
    """InferenceX's multinode fields: each side's workers and parallelism, the GPUs of each side, and each
    side's hardware when the workers name it."""
    assert point.prefill is not None and point.decode is not None
    for side, worker in (("prefill", point.prefill), ("decode", point.decode)):
        setattr(result, f"{side}_num_workers", worker.num_worker)
        for name in ("tp", "pp", "dcp_size", "pcp_size", "ep"):
            setattr(result, f"{side}_{name}", getattr(worker, name))
        setattr(result, f"{side}_dp_attention", "true" if worker.dp_attn else "false")
        setattr(result, f"num_{side}_gpu", _worker_gpus(worker))
    if _worker_gpus(point.decode) <= 0:
        # an aggregated config (decode num-worker 0): no decode side, so its parallelism counts for nothing
        for name, value in (("tp", 0), ("ep", 0), ("pp", 1), ("dcp_size", 1), ("pcp_size", 1)):
            setattr(result, f"decode_{name}", value)
    # InferenceX's identity of a disaggregated point: both sides' TP, the wider EP, DP attention on either side
    result.tp = point.prefill.tp + (result.decode_tp or 0)
    result.ep = max(point.prefill.ep, result.decode_ep or 0)
    result.dp_attention = "true" if point.prefill.dp_attn or point.decode.dp_attn else "false"
    if point.prefill.hardware:  # heterogeneous workers: both sides name theirs (config/master.py checks the pair)
        result.prefill_hw, result.decode_hw = point.prefill.hardware, point.decode.hardware


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
