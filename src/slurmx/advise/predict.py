"""Per sweep point: the prefix-cache model's predictions, the recipe constraints slurmx can check, a verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmx import engines
from slurmx.advise.cache_model import CacheOutcome, replay
from slurmx.advise.kv_geometry import KvGeometry, read_geometry
from slurmx.advise.sessions import sessions
from slurmx.config.clusters import ClusterProfile
from slurmx.errors import UserError
from slurmx.node.trace import synthetic_trace, working_set_tokens
from slurmx.plan import DRAM_CAP_MIB, Point
from slurmx.recipes.spec import ServingSpec
from slurmx.runtimes.base import expand

# An offload arm is expected to help when its tier could serve at least this share of the prompt tokens
# (tokens that missed the GPU pool but were computed earlier and still fit in the tier). Below it, the
# tier's hits are too few to repay its transfers; the local key measures 6-11 % and 31-35 % (docs/advise.md).
HELP_THRESHOLD = 0.05
RULE = f"an offload arm helps when its tier could serve >= {HELP_THRESHOLD:.0%} of the prompt tokens"


@dataclass(frozen=True)
class Advice:
    point: Point
    note: str | None = None  # why there is no prediction
    block_tokens: int = 0
    kv_pool_tokens: int | None = None  # the engine's pool, as its log line says it
    usable_pool_tokens: int | None = None  # of it, what requests can hold
    outcome: CacheOutcome | None = None
    trace_working_set_tokens: int | None = None  # node/trace.py's bound, what result.json records
    geometry: KvGeometry | None = None
    tier_capacity_tokens: int | None = None  # the point's DRAM budget in tokens (None: no geometry to size it)
    checks: list[str] = field(default_factory=list)

    @property
    def hit_rate(self) -> float | None:
        return _share(self.outcome.hit_tokens, self.outcome) if self.outcome else None

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
        if self.outcome is None:
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
            "kv-geometry": (
                {"layers": g.layers, "kv-heads": g.kv_heads, "head-dim": g.head_dim, "dtype": g.dtype}
                | {"sources": g.sources}
                if g
                else None
            ),
            "dram-budget-gb": self.point.total_cpu_dram_gb,
            "tier-capacity-tokens": self.tier_capacity_tokens,
            "recomputed-share": self.recomputed_share,
            "tier-share": self.tier_share,
            "preemptions": o.preemptions if o else None,
            "verdict": self.verdict,
            "rule": RULE,
            "checks": self.checks,
        }


def _share(part: int, outcome: CacheOutcome) -> float:
    return part / outcome.prompt_tokens if outcome.prompt_tokens else 0.0


def constraint_checks(point: Point, spec: ServingSpec, profile: ClusterProfile) -> list[str]:
    """The recipe rules slurmx has the figures for, each as one line ('ok: ...' or 'problem: ...')."""
    checks = []
    chunk = getattr(spec.backend, "chunk_size", None)
    if isinstance(chunk, int):
        ok = chunk % spec.block_size == 0
        checks.append(
            f"{'ok' if ok else 'problem'}: chunk-size {chunk} "
            f"{'is' if ok else 'is not'} a multiple of the block size {spec.block_size}"
        )
    if point.kv_offloading == "none":
        return checks
    capped = profile.available_cpu_dram_mib > DRAM_CAP_MIB
    checks.append(
        f"ok: DRAM budget {point.total_cpu_dram_gb} GB from {profile.available_cpu_dram_mib:,} MiB"
        + (
            f", capped at InferenceX's {DRAM_CAP_MIB:,} MiB"
            if capped
            else f", under InferenceX's {DRAM_CAP_MIB:,} MiB cap"
        )
    )
    return checks


def advise_point(point: Point, spec: ServingSpec, profile: ClusterProfile, kv_pool_tokens: int | None = None) -> Advice:
    """`kv_pool_tokens`: the engine's pool where the recipe does not fix it (an engine log's figure)."""
    engine = engines.get(spec.engine)
    block = spec.block_size
    checks = constraint_checks(point, spec, profile)
    if spec.replay.kind != "synthetic":
        note = "no prediction: the production trace is not modelled yet (synthetic replays only)"
        return Advice(point, note, block, checks=checks)
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
    return read_geometry(config, _flag(spec.engine_flags, "--kv-cache-dtype") or _flag(spec.engine_flags, "--dtype"))


def _flag(argv: list[str], flag: str) -> str | None:
    found = None
    for index, word in enumerate(argv[:-1]):
        if word == flag:
            found = argv[index + 1]
    return found


def refusal(point: Point, error: UserError) -> Advice:
    return Advice(point, f"no prediction: {error}")
