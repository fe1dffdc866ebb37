"""SGLang's HiCache: the engine's own host-memory KV tier, sized per rank from the point's DRAM budget.

InferenceX's SGLang scripts turn it on with --enable-hierarchical-cache and size its host pool per TP rank,
each by its own rule: `--hicache-size` GB derived from TOTAL_CPU_DRAM_GB (qwen3.5_fp8_b200_sglang_mtp.sh:
(budget - 1 GB per rank) x 15/31 / TP; qwen3.5_fp8_h200_mtp.sh: budget / TP / 2), a fixed size, or
`--hicache-ratio` of the device pool. The arm holds that rule as knobs; `spec` computes the size of each
point from its budget with integer GB as the scripts' shell arithmetic does. The tier's other settings
(page size, IO backend, layout, write policy) are the arm's own engine flags. No server of its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pydantic import Field, PositiveFloat, PositiveInt, field_validator

from slurmx.backends.base import GB, Arm, ArmCapture, ArmProblem, BackendSpec, BaseBackend, TierReading, backend_version
from slurmx.engines.base import Engine, KvOffload
from slurmx.plan import Point
from slurmx.process import ServerPorts

NAME = "hicache"  # the master config's kv-offload-backend name, and what the SGLang engine reads back
ENGINE = "sglang"
ENGINES = (ENGINE, "dynamo-sglang")  # SGLang itself, or as Dynamo's worker
SIZE, RATIO = "hicache-size", "hicache-ratio"  # the engine's settings (its flags without the dashes)
# the host pool's occupancy gauges SGLang exports with --enable-metrics
HOST_GAUGES = {
    "host_used_tokens": "sglang:hicache_host_used_tokens",
    "host_total_tokens": "sglang:hicache_host_total_tokens",
}
MAX_DENOMINATOR = 64  # the largest pool-share denominator import searches
MAX_RESERVE_GB = 4  # the largest per-rank reserve import searches


class HiCacheArm(Arm):
    """How the host pool is sized: `size-gb` per rank as it is, `ratio` of the device pool, or (the default)
    from the budget: (budget - reserve-gb-per-rank x TP) x pool-share / TP, rounded down to whole GB."""

    size_gb: PositiveInt | None = None
    ratio: PositiveFloat | None = None
    # a fixed size per rank at these concurrencies, whatever the rest of the arm says (glm5.2_fp4_b200_sglang_mtp.sh:
    # 270 GB at conc 12 and 16, where the working set needs the host pool the ratio would not give)
    size_gb_at_conc: dict[PositiveInt, PositiveInt] = Field(default_factory=dict)
    reserve_gb_per_rank: int = Field(default=0, ge=0)
    pool_share: list[PositiveInt] = Field(default_factory=lambda: [1, 1])  # [numerator, denominator]

    @field_validator("pool_share")
    @classmethod
    def _a_fraction(cls, value: list[int]) -> list[int]:
        if len(value) != 2 or value[0] > value[1]:
            raise ValueError("[numerator, denominator], at most 1")
        return value


class HiCacheSpec(BackendSpec):
    size_gb: int | None = None  # --hicache-size: GB of host pool per TP rank
    ratio: float | None = None  # --hicache-ratio instead
    # the TP ranks on one node: each rank's own process allocates its host pool (SGLang's HostKVCache, sized
    # --hicache-size GB, or --hicache-ratio x its device pool), so a node holds its own ranks' pools only
    ranks: int = 1

    def host_memory_bytes(self) -> int:
        # the target KV host pool of every rank on the node (a hybrid model's Mamba and a draft pool come on top)
        return (self.size_gb or 0) * GB * self.ranks


def _tp(point: Point) -> int:
    """The TP ranks that each hold a host pool: the point's, or an aggregated multinode point's worker's."""
    return point.prefill.tp if point.multinode and point.prefill is not None else point.tp


def pool_size_gb(budget_gb: int, ranks: int, reserve_gb_per_rank: int, share: Sequence[int]) -> int:
    """Each rank's host pool in whole GB: the budget less the reserve, shared out, rounded down (bash's $((...)))."""
    return max(budget_gb - reserve_gb_per_rank * ranks, 0) * share[0] // (ranks * share[1])


class HiCache(BaseBackend[HiCacheSpec]):
    name = NAME
    spec_model = HiCacheSpec
    arm_model = HiCacheArm
    connector = NAME  # what the engine's argv carries (its --enable-hierarchical-cache), read back as evidence

    def spec(self, arm: Arm, point: Point) -> HiCacheSpec:
        knobs = arm if isinstance(arm, HiCacheArm) else HiCacheArm()
        version = backend_version(point)
        if point.conc in knobs.size_gb_at_conc:
            return HiCacheSpec(
                name=self.name, version=version, size_gb=knobs.size_gb_at_conc[point.conc], ranks=_tp(point)
            )
        if knobs.ratio is not None:
            return HiCacheSpec(name=self.name, version=version, ratio=knobs.ratio, ranks=_tp(point))
        if knobs.size_gb is not None:
            size = knobs.size_gb
        else:
            size = pool_size_gb(point.total_cpu_dram_gb, _tp(point), knobs.reserve_gb_per_rank, knobs.pool_share)
        if size < 1:
            raise ArmProblem(
                ("pool-share",),
                f"{point.exp_name}: a budget of {point.total_cpu_dram_gb} GB leaves no whole GB per rank",
            )
        return HiCacheSpec(name=self.name, version=version, size_gb=size, ranks=_tp(point))

    def on_node(self, spec: HiCacheSpec, gpus: int) -> HiCacheSpec:
        # a server over several nodes (TP8 on 4-GPU nodes) has only `gpus` of its ranks, and their pools, on each
        return spec.model_copy(update={"ranks": gpus})

    def refusal(self, engine: Engine) -> str | None:
        if engine.name not in ENGINES:
            return f"kv-offload-backend {self.name} is SGLang's own host tier: engine {engine.name} has none"
        return None

    def offload(self, spec: HiCacheSpec, ports: ServerPorts, engine: str) -> KvOffload | None:
        settings: dict[str, object] = {RATIO: spec.ratio} if spec.ratio is not None else {SIZE: spec.size_gb}
        return KvOffload(NAME, settings)

    def tier_reading(self, deltas: Mapping[str, float], gauges: Mapping[str, float]) -> TierReading:
        counters = {field: gauges[name] for field, name in HOST_GAUGES.items() if name in gauges}
        if not counters:
            return TierReading(absent="no sglang:hicache_host_* gauge in the replay's metrics export")
        # the tier is the engine's own: its host hits are the engine's count (the evidence's tier_tokens), not its own
        why = 'HiCache exports no hit count of its own: its host hits are the engine\'s cached_tokens{cache_source="host"}'
        return TierReading(counters, absent=why)

    def probes(self, point: Point) -> list[Point]:
        # size = (budget - reserve x TP) x share // TP: budgets one GB apart over a cycle of the ranks and two far
        # ones narrow the shares and reserves that fit down to one; half the TP shows the division by the ranks
        ranks, budget = point.tp, point.total_cpu_dram_gb
        budgets = [budget - d for d in (*range(1, ranks + 2), 16 * ranks, 32 * ranks, budget // 2) if budget - d > 0]
        variants = [replace(point, total_cpu_dram_gb=b, exp_name="", point_id="") for b in dict.fromkeys(budgets)]
        if point.tp > 1 and point.tp % 2 == 0:
            variants.append(replace(point, tp=point.tp // 2, exp_name="", point_id=""))
        return variants

    def knobs_from_connector(
        self, configs: list[dict[str, Any]], points: list[Point], handed: Sequence[ArmCapture] = ()
    ) -> dict[str, Any]:
        """The sizing knobs that rebuild every captured --hicache-size (or --hicache-ratio): one ratio; one size
        at every budget; else the fewest-digit share and reserve of the budget that give each point's size."""
        if not configs or any(c.get("kv_connector") != NAME for c in configs):
            raise ValueError("no --enable-hierarchical-cache was captured on every point")
        by_ratio = [RATIO in c and SIZE not in c for c in configs]
        if any(by_ratio) and not all(by_ratio):  # a ratio on some concurrencies, a fixed size on the others
            sized = [(p.conc, c.get(SIZE)) for p, c, r in zip(points, configs, by_ratio, strict=True) if not r]
            at_conc = dict(sized)
            if any(not isinstance(s, int) for _, s in sized) or len(at_conc) != len(set(sized)):
                raise ValueError(f"--{SIZE} on some points is no one whole GB per concurrency")
            ratio = self.knobs_from_connector(
                [c for c, r in zip(configs, by_ratio, strict=True) if r],
                [p for p, r in zip(points, by_ratio, strict=True) if r],
            )
            return {**ratio, "size-gb-at-conc": dict(sorted(at_conc.items()))}
        ratios = {repr(c.get(RATIO)) for c in configs}
        if all(by_ratio):
            if len(ratios) > 1:
                raise ValueError(f"--{RATIO} differs between points")
            return {"ratio": configs[0][RATIO]}
        if not all(isinstance(c.get(SIZE), int) for c in configs):
            raise ValueError(f"neither --{SIZE} (whole GB) nor --{RATIO} alone on every point")
        sizes = [int(c[SIZE]) for c in configs]
        budgets = {p.total_cpu_dram_gb for p in points}
        fits = [
            (reserve, [num, den])
            for den in range(1, MAX_DENOMINATOR + 1)
            for num in range(1, den + 1)
            if math.gcd(num, den) == 1
            for reserve in range(MAX_RESERVE_GB + 1)
            if all(pool_size_gb(p.total_cpu_dram_gb, _tp(p), reserve, [num, den]) == s for p, s in zip(points, sizes))
        ]
        if fits:
            reserve, share = fits[0]
            knobs: dict[str, Any] = {}
            if reserve:
                knobs["reserve-gb-per-rank"] = reserve
            if share != [1, 1]:
                knobs["pool-share"] = share
            return knobs
        if len(set(sizes)) == 1 and len(budgets) > 1:
            return {"size-gb": sizes[0]}
        raise ValueError(f"--{SIZE} follows no (budget - reserve x TP) x share // TP and no one size")

    def fixed_knobs(self, config: dict[str, Any]) -> dict[str, Any] | None:
        """A whole-GB --hicache-size per rank, or a --hicache-ratio, as given."""
        size, ratio = config.get(SIZE), config.get(RATIO)
        if isinstance(size, int) and not isinstance(size, bool) and RATIO not in config:
            return {"size-gb": size}
        if isinstance(ratio, int | float) and not isinstance(ratio, bool) and SIZE not in config:
            return {"ratio": float(ratio)}
        return None


BACKEND = HiCache()
