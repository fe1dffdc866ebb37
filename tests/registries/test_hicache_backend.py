"""HiCache, SGLang's host tier: its per-rank size from the point's budget as the scripts' shell arithmetic gives it,
the knobs import reads back from captured sizes, the engine flags it becomes, and its evidence."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurmx import backends, engines
from slurmx.backends.base import ArmProblem
from slurmx.backends.hicache import HiCacheArm, pool_size_gb
from tests.helpers.points import point_from_row

HICACHE = backends.get("hicache")
ROW = {"image": "lmsysorg/sglang:v0.5.16", "model": "org/m", "model-prefix": "m", "precision": "fp8",
       "framework": "sglang", "runner": "cluster:b300-nv", "conc": 32, "tp": 2, "kv-offloading": "dram",
       "kv-offload-backend": {"name": "hicache"}, "total-cpu-dram-gb": 599}  # fmt: skip


def bash_size(budget: int, tp: int) -> int:
    """qwen3.5_fp8_b300_sglang_mtp.sh:53-59 as bash evaluates it: $(((budget - TP) * 15 / TP / 31)), left to right."""
    return (budget - tp) * 15 // tp // 31


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_the_share_of_the_budget_is_the_scripts_arithmetic(tp: int) -> None:
    arm = HiCacheArm(reserve_gb_per_rank=1, pool_share=[15, 31])
    for budget in range(tp + 70, 3000, 37):
        point = point_from_row({**ROW, "tp": tp, "total-cpu-dram-gb": budget})
        assert HICACHE.spec(arm, point).size_gb == bash_size(budget, tp), (budget, tp)


def test_the_spec_becomes_sglangs_flags_and_its_host_memory() -> None:
    point = point_from_row(ROW)
    spec = HICACHE.spec(HiCacheArm(reserve_gb_per_rank=1, pool_share=[15, 31]), point)
    assert (spec.size_gb, spec.ranks) == (144, 2)  # (599 - 2) x 15 // 2 // 31
    assert spec.host_memory_bytes() == 144 * 2 * 10**9
    offload = HICACHE.offload(spec, {}, "sglang")
    assert offload is not None
    flags, _ = engines.get("sglang").offload_args(offload)
    assert flags == ["--enable-hierarchical-cache", "--hicache-size", "144"]
    ratio = HICACHE.spec(HiCacheArm(ratio=0.75), point)
    assert ratio.size_gb is None and HICACHE.offload(ratio, {}, "sglang").settings == {"hicache-ratio": 0.75}  # type: ignore[union-attr]  # offload of a spec is never None
    assert HICACHE.spec(HiCacheArm(size_gb=270), point).size_gb == 270


def test_a_budget_that_leaves_no_whole_gb_is_refused() -> None:
    point = point_from_row({**ROW, "total-cpu-dram-gb": 3})
    with pytest.raises(ArmProblem, match="no whole GB per rank"):
        HICACHE.spec(HiCacheArm(reserve_gb_per_rank=1, pool_share=[15, 31]), point)


def test_only_sglang_serves_it() -> None:
    assert HICACHE.refusal(engines.get("sglang")) is None
    assert "SGLang's own host tier" in (HICACHE.refusal(engines.default()) or "")


def test_import_reads_the_share_and_reserve_back_from_the_points_and_probes() -> None:
    """Captured sizes at the key's budget and at the probes' (other budgets, half the TP) pin one rule down."""
    first = point_from_row({**ROW, "tp": 4, "total-cpu-dram-gb": 1199})
    points = [first, *HICACHE.probes(first)]
    assert len({p.total_cpu_dram_gb for p in points}) > 5 and {p.tp for p in points} == {4, 2}
    configs = [{"kv_connector": "hicache", "hicache-size": bash_size(p.total_cpu_dram_gb, p.tp)} for p in points]
    knobs = HICACHE.knobs_from_connector(configs, points)
    assert knobs == {"reserve-gb-per-rank": 1, "pool-share": [15, 31]}
    halves = [{"kv_connector": "hicache", "hicache-size": p.total_cpu_dram_gb // p.tp // 2} for p in points]
    assert HICACHE.knobs_from_connector(halves, points) == {"pool-share": [1, 2]}  # qwen3.5_fp8_h200_mtp.sh:79
    fixed = [{"kv_connector": "hicache", "hicache-size": 270} for _ in points]
    assert HICACHE.knobs_from_connector(fixed, points) == {"size-gb": 270}
    ratios = [{"kv_connector": "hicache", "hicache-ratio": 0.75} for _ in points]
    assert HICACHE.knobs_from_connector(ratios, points) == {"ratio": 0.75}
    odd = [{"kv_connector": "hicache", "hicache-size": 7 + i % 3} for i, _ in enumerate(points)]
    with pytest.raises(ValueError, match="follows no"):
        HICACHE.knobs_from_connector(odd, points)
    with pytest.raises(ValueError, match="no --enable-hierarchical-cache"):
        HICACHE.knobs_from_connector([], points)


def test_the_rule_read_back_sizes_every_point_as_captured() -> None:
    first = point_from_row({**ROW, "total-cpu-dram-gb": 2399, "tp": 8})
    points = [first, *HICACHE.probes(first), replace(first, total_cpu_dram_gb=100)]
    configs = [{"kv_connector": "hicache", "hicache-size": bash_size(p.total_cpu_dram_gb, p.tp)} for p in points]
    knobs = HiCacheArm.model_validate(HICACHE.knobs_from_connector(configs, points))
    assert [HICACHE.spec(knobs, p).size_gb for p in points] == [c["hicache-size"] for c in configs]
    assert pool_size_gb(100, 8, 1, [15, 31]) == bash_size(100, 8)


def test_the_tier_reading_holds_the_host_pool_gauges_and_says_why_no_hit_figure() -> None:
    reading = HICACHE.tier_reading(
        {}, {"sglang:hicache_host_used_tokens": 5.0, "sglang:hicache_host_total_tokens": 9.0}
    )
    assert reading.counters == {"host_used_tokens": 5.0, "host_total_tokens": 9.0}
    assert reading.hit_tokens is None and reading.absent and 'cache_source="host"' in reading.absent
    assert HICACHE.tier_reading({}, {}).absent == "no sglang:hicache_host_* gauge in the replay's metrics export"


def test_a_ratio_with_fixed_sizes_at_some_concurrencies_is_read_back_and_rebuilt() -> None:
    """glm5.2_fp4_b200_sglang_mtp.sh:133-167: --hicache-ratio 0.75, except --hicache-size 270 at conc 12 and 16."""
    points = [point_from_row({**ROW, "tp": 8, "conc": c}) for c in (1, 4, 8, 12, 16)]
    configs = [
        {"kv_connector": "hicache", **({"hicache-size": 270} if p.conc in (12, 16) else {"hicache-ratio": 0.75})}
        for p in points
    ]
    knobs = HICACHE.knobs_from_connector(configs, points)
    assert knobs == {"ratio": 0.75, "size-gb-at-conc": {12: 270, 16: 270}}
    arm = HiCacheArm.model_validate(knobs)
    rebuilt = [HICACHE.offload(HICACHE.spec(arm, p), {}, "sglang") for p in points]
    assert [o.settings if o else None for o in rebuilt] == [{k: v for k, v in c.items() if k != "kv_connector"}
                                                           for c in configs]  # fmt: skip
    two_sizes = [*configs, {"kv_connector": "hicache", "hicache-size": 200}]  # conc 12 again, at another size
    with pytest.raises(ValueError, match="no one whole GB per concurrency"):
        HICACHE.knobs_from_connector(two_sizes, [*points, points[3]])
