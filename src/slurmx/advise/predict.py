"""Per sweep point: the prefix-cache model's predictions, the recipe constraints slurmx can check, a verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from slurmx import engines
from slurmx.advise.cache_model import CacheOutcome, replay
from slurmx.advise.kv_geometry import KvGeometry, read_geometry
from slurmx.advise.seed_models import GroupedGeometry, geometry, recorded_pool
from slurmx.advise.sessions import sessions
from slurmx.advise.standin import PRODUCTION_TIMING, UNIT, StandIn
from slurmx.config.clusters import ClusterProfile
from slurmx.engines.base import argv_value
from slurmx.errors import UserError
from slurmx.node.provision import DATASETS
from slurmx.node.trace import synthetic_trace, working_set_tokens
from slurmx.plan import DRAM_CAP_MIB, Point
from slurmx.recipes.spec import ServingSpec
from slurmx.runtimes.base import expand

# An offload arm is expected to help when its tier could serve at least this share of the prompt tokens
# (tokens that missed the GPU pool but were computed earlier and still fit in the tier). Below it, the
# tier's hits are too few to repay its transfers; the local key measures 6-11 % and 31-35 % (docs/advise.md).
HELP_THRESHOLD = 0.05
RULE = f"an offload arm helps when its tier could serve >= {HELP_THRESHOLD:.0%} of the prompt tokens"
# The GPU prefix cache has fallen off its cliff at a point whose hit rate is this far below the trace's ceiling
# (the hit rate of an unbounded pool: hits plus prompt tokens computed earlier but evicted).
CLIFF_POINTS = 0.10
CLIFF_RULE = f"cliff: GPU hit rate more than {CLIFF_POINTS * 100:.0f} points below the trace's ceiling"
DRAM_CAP_GB = DRAM_CAP_MIB * 2**20 / 1e9


@dataclass(frozen=True)
class Advice:
    point: Point
    note: str | None = None  # why there is no prediction
    block_tokens: int = 0
    kv_pool_tokens: int | None = None  # the engine's pool, as its log line says it
    usable_pool_tokens: int | None = None  # of it, what requests can hold
    outcome: CacheOutcome | None = None
    trace_working_set_tokens: int | None = None  # node/trace.py's bound, what result.json records
    geometry: KvGeometry | GroupedGeometry | None = None
    tier_capacity_tokens: int | None = None  # the point's DRAM budget in tokens (None: no geometry to size it)
    checks: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)  # the trace, geometry and pool a prediction used, named

    @property
    def hit_rate(self) -> float | None:
        if self.outcome is None or self.kv_pool_tokens is None:  # no pool: the live set only
            return None
        return _share(self.outcome.hit_tokens, self.outcome)

    @property
    def points_pool(self) -> bool:
        """Whether the prediction had a KV pool (else only the live set is known)."""
        return self.kv_pool_tokens is not None

    @property
    def ceiling(self) -> float | None:
        """The hit rate with an unbounded pool: every prompt token an earlier request had computed."""
        if self.outcome is None:
            return None
        return _share(self.outcome.hit_tokens + self.outcome.recomputed_tokens, self.outcome)

    @property
    def past_cliff(self) -> bool | None:
        hit, ceiling = self.hit_rate, self.ceiling
        return None if hit is None or ceiling is None else hit < ceiling - CLIFF_POINTS

    @property
    def recomputed_share(self) -> float | None:
        """Prompt tokens an unbounded tier could serve."""
        return _share(self.outcome.recomputed_tokens, self.outcome) if self.outcome else None

    @property
    def tier_share(self) -> float | None:
        """Prompt tokens the point's own tier (its DRAM budget) could serve: 0 for the no-offload arm."""
        if self.outcome is None:
            return None
        return 0.0 if self.point.kv_offloading == "none" else _share(self.outcome.tier_tokens, self.outcome)

    @property
    def working_set_gb(self) -> float | None:
        if self.outcome is None or self.geometry is None:
            return None
        return self.outcome.working_set_tokens * self.geometry.bytes_per_token / 1e9

    @property
    def verdict(self) -> str:
        if self.outcome is None or self.kv_pool_tokens is None:
            return "-"
        if self.point.kv_offloading == "none":
            share = self.recomputed_share or 0.0
            return "an offload arm would help" if share >= HELP_THRESHOLD else "offload would not help"
        return "helps" if (self.tier_share or 0.0) >= HELP_THRESHOLD else "no help expected"

    def as_json(self) -> dict[str, Any]:
        o, g = self.outcome, self.geometry
        return {
            "point-id": self.point.point_id,
            "config-key": self.point.config_key,
            "arm": self.point.backend_name,
            "parallelism": self.point.parallelism,
            "conc": self.point.conc,
            "note": self.note,
            "block-tokens": self.block_tokens or None,
            "kv-pool-tokens": self.kv_pool_tokens,
            "usable-pool-tokens": self.usable_pool_tokens,
            "prompt-tokens": o.prompt_tokens if o else None,
            "gpu-hit-tokens": o.hit_tokens if o else None,
            "gpu-hit-rate": self.hit_rate,
            "working-set-tokens": o.working_set_tokens if o else None,
            "trace-working-set-tokens": self.trace_working_set_tokens,
            "working-set-gb": self.working_set_gb,
            "kv-bytes-per-token": g.bytes_per_token if g else None,
            "kv-geometry": g.as_json() | {"sources": g.sources} if g else None,
            "dram-budget-gb": self.point.total_cpu_dram_gb,
            "tier-capacity-tokens": self.tier_capacity_tokens,
            "ceiling": self.ceiling,
            "past-cliff": self.past_cliff,
            "recomputed-share": self.recomputed_share,
            "tier-share": self.tier_share,
            "preemptions": o.preemptions if o else None,
            "verdict": self.verdict,
            "rule": RULE,
            "cliff-rule": CLIFF_RULE,
            "checks": self.checks,
            "inputs": self.inputs,
        }


def _share(part: int, outcome: CacheOutcome) -> float:
    return part / outcome.prompt_tokens if outcome.prompt_tokens else 0.0


def constraint_checks(
    point: Point, spec: ServingSpec, profile: ClusterProfile, grouped: GroupedGeometry | None = None
) -> list[str]:
    """The recipe rules slurmx has the figures for, each as one line ('ok: ...' or 'problem: ...')."""
    checks = []
    chunk = getattr(spec.backend, "chunk_size", None)
    if isinstance(chunk, int):
        # every KV group's page, where the model's groups are known; else the engine block size
        blocks = {g.name: g.block_tokens for g in grouped.groups} if grouped else {"engine": spec.block_size}
        bad = sorted({f"{name} {size}" for name, size in blocks.items() if chunk % size})
        sizes = ", ".join(sorted({f"{size}" for size in blocks.values()}))
        checks.append(
            f"problem: chunk-size {chunk} is not a multiple of the block size of {', '.join(bad)}"
            if bad
            else f"ok: chunk-size {chunk} is a multiple of {'every KV group' if grouped else 'the engine'}'s block "
            f"size ({sizes})"
        )
    if point.kv_offloading == "none":
        return checks
    capped = profile.available_cpu_dram_mib > DRAM_CAP_MIB
    within = point.total_cpu_dram_gb <= DRAM_CAP_GB
    l1 = getattr(spec.backend, "l1_fraction", None)
    checks.append(
        f"{'ok' if within else 'problem'}: DRAM budget {point.total_cpu_dram_gb} GB "
        f"{'<=' if within else '>'} InferenceX's cap of {DRAM_CAP_MIB:,} MiB ({DRAM_CAP_GB:,.0f} GB); from "
        f"{profile.available_cpu_dram_mib:,} MiB{' (capped)' if capped else ''} x dram-utilization "
        f"{point.dram_utilization}"
        + (f"; LMCache L1 {l1:g} x budget = {l1 * point.total_cpu_dram_gb:,.0f} GB" if isinstance(l1, float) else "")
    )
    return checks


def advise_point(point: Point, spec: ServingSpec, profile: ClusterProfile, kv_pool_tokens: int | None = None) -> Advice:
    """`kv_pool_tokens`: the engine's pool where the recipe does not fix it (an engine log's figure)."""
    engine = engines.get(spec.engine)
    block = spec.block_size
    if spec.replay.kind != "synthetic":
        return _advise_production(point, spec, profile, kv_pool_tokens)
    checks = constraint_checks(point, spec, profile)
    pool = kv_pool_tokens or engine.kv_pool_tokens(spec.engine_flags, block)
    if pool is None:
        note = "no prediction: the recipe does not fix the KV pool; give it with --kv-pool-tokens (its log's figure)"
        return Advice(point, note, block, checks=checks)
    usable_blocks = pool // block - engine.reserved_kv_blocks
    rows = synthetic_trace(spec.replay, spec.conc)  # the rows the node writes for this point
    geometry = _geometry(spec, profile)
    tier_tokens = int(point.total_cpu_dram_gb * 1e9 // geometry.bytes_per_token) if geometry is not None else None
    tier_blocks = tier_tokens // block if tier_tokens is not None else 1 << 62  # unsized: unbounded
    outcome = replay(sessions(rows, spec.replay.block_tokens), spec.conc, block, usable_blocks, tier_blocks)
    bound = working_set_tokens(rows, spec.conc, spec.replay.shared_prefix_tokens, spec.replay.output_tokens)
    if geometry is None:
        checks.append("note: no model config.json under the runtime's model-root: GB and tier size unknown")
    return Advice(point, None, block, pool, usable_blocks * block, outcome, bound, geometry, tier_tokens, checks)


def _geometry(spec: ServingSpec, profile: ClusterProfile) -> KvGeometry | None:
    root = profile.runtime.model_root if profile.runtime else None
    if root is None:
        return None
    config = Path(expand(root)) / spec.model / "config.json"
    if not config.is_file():
        return None
    return read_geometry(
        config, argv_value(spec.engine_flags, "--kv-cache-dtype") or argv_value(spec.engine_flags, "--dtype")
    )


def refusal(point: Point, error: UserError) -> Advice:
    return Advice(point, f"no prediction: {error}")


def _advise_production(point: Point, spec: ServingSpec, profile: ClusterProfile, given_pool: int | None) -> Advice:
    """A production point: the seed model's geometry, a recorded (or given) pool, the trace's stand-in."""
    grouped = geometry(spec.model, draft=spec.draft_model is not None)
    checks = constraint_checks(point, spec, profile, grouped)
    block = spec.block_size
    if not engines.get(spec.engine).lru_prefix_cache:  # SGLang's radix cache, ATOM's, TRT-LLM's: other rules
        note = f"no prediction: advise models an LRU block prefix cache; {spec.engine}'s is not modelled"
        return Advice(point, note, block, checks=checks)
    if point.multinode or point.gpus < 1:  # workers on several nodes: no one engine's pool to replay through
        note = "no prediction: multinode points (several workers' pools) are not modelled; single-node points only"
        return Advice(point, note, block, checks=checks)
    if grouped is None:
        note = f"no prediction: no KV geometry for {spec.model} (advise/seed_models.py holds the seed models')"
        return Advice(point, note, block, checks=checks)
    # the engine's own page where the model pins it (K3: 1536 whatever --block-size says)
    block = max(block, *(g.block_tokens for g in grouped.groups))
    if block % UNIT:
        return Advice(point, f"no prediction: block size {block} is not a multiple of {UNIT}", block, checks=checks)
    rank_bytes = grouped.bytes_per_token / point.dcp_size  # DCP shards each token's KV over its ranks
    inputs = [grouped.describe() + (f" / DCP {point.dcp_size}" if point.dcp_size > 1 else "")]
    inputs += [f"  {name}: {source}" for name, source in grouped.sources.items()]
    recorded = recorded_pool(spec.model, point.runner, _gpu_memory_utilization(spec.engine_flags))
    pool: int | None = given_pool
    if given_pool is not None:
        inputs.append(f"KV pool {given_pool:,} tokens/rank: --kv-pool-tokens")
    elif recorded is not None:
        pool = int(recorded.pool_bytes // rank_bytes)
        inputs.append(
            f"KV pool {pool:,} tokens/rank = {recorded.pool_bytes / 2**30:.2f} GiB / {rank_bytes:,.0f} B: "
            f"{recorded.source}"
        )
    else:
        inputs.append(
            f"KV pool: none recorded for {spec.model} on {point.runner}; give --kv-pool-tokens N (its "
            "'GPU KV cache size' log line): until then only the live set, what the pool must hold"
        )
    dp = point.tp if point.dp_attn else 1  # data-parallel attention: each rank its own pool and sessions
    lanes = math.ceil(point.conc / dp)
    standin = StandIn(DATASETS.get(spec.replay.public_dataset, spec.replay.public_dataset))
    inputs.append(f"trace: {standin.label()}")
    if dp > 1:
        inputs.append(f"{point.parallelism}: each rank its own pool and conc / {dp} lanes (the router pins a session)")
    budget = point.total_cpu_dram_gb * 1e9 * (getattr(spec.backend, "l1_fraction", None) or 1.0)
    tier_tokens = int(budget / point.gpus / rank_bytes)  # every rank stores its own copy of its KV
    if point.kv_offloading != "none":
        inputs.append(
            f"tier {tier_tokens:,} tokens/rank = DRAM budget (x L1 fraction) / {point.gpus} ranks / {rank_bytes:,.0f} B"
        )
    unit_block = block // UNIT
    replayed = standin.sessions(lanes)
    # no pool known: one that never evicts (every block the sessions ever compute)
    everything = sum(len(s[-1].prompt) // unit_block + s[-1].output_tokens + 1 for s in replayed)
    blocks = pool // block - engines.get(spec.engine).reserved_kv_blocks if pool else everything
    outcome = replay(replayed, lanes, unit_block, blocks, max(1, tier_tokens // block), PRODUCTION_TIMING)
    tokens = replace(
        outcome,
        prompt_tokens=outcome.prompt_tokens * UNIT,
        hit_tokens=outcome.hit_tokens * UNIT,
        recomputed_tokens=outcome.recomputed_tokens * UNIT,
        tier_tokens=outcome.tier_tokens * UNIT,
        working_set_tokens=outcome.working_set_tokens * UNIT,
    )
    bound = lanes * standin.last_context_tokens
    usable = blocks * block if pool else None
    return Advice(point, None, block, pool, usable, tokens, bound, grouped, tier_tokens, checks, inputs)


def _gpu_memory_utilization(argv: list[str]) -> float | None:
    value = argv_value(argv, "--gpu-memory-utilization")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
