"""Each backend's reading of its tier's counters: a figure where the counter is in the replay's metrics, a
reason where it is not (never a silent zero, never a reason in a figure's place)."""

from __future__ import annotations

from pathlib import Path

from slurmx import backends
from slurmx.backends import mooncake
from slurmx.backends.vllm_simple import LOAD_BLOCKS
from slurmx.results import prometheus
from slurmx.results.server_metrics import tier_counters

MOONCAKE_DATA = Path(__file__).parents[1] / "data" / "mooncake"  # real dumps of the local round trip (README.md)


def test_lmcache_without_its_lookup_counter_says_why_and_has_no_figure() -> None:
    reading = backends.get("lmcache").tier_reading({}, {})
    assert reading.absent == "no LMCache lookup counter in its /metrics"
    assert reading.hit_tokens is None and reading.hit_blocks is None
    reading = backends.get("lmcache").tier_reading({"lmcache_mp_lookup_hit_tokens": 1280.0}, {})
    assert (reading.hit_tokens, reading.hit_blocks, reading.absent) == (1280.0, None, None)


def test_vllm_simple_reads_the_blocks_its_connector_loaded_and_its_pool_gauges() -> None:
    simple = backends.get("vllm-simple")
    gauges = {"vllm:simple_kv_offload_used_blocks": 40.0, "vllm:simple_kv_offload_pending_store_blocks": 3.0}
    reading = simple.tier_reading({LOAD_BLOCKS: 33.0}, gauges)
    assert reading.hit_blocks == 33.0 and reading.hit_tokens is None and reading.absent is None
    assert reading.counters == {"blocks_loaded": 33.0, "used_blocks_max": 40.0, "pending_store_blocks_max": 3.0}
    absent = simple.tier_reading({}, {})
    assert absent.hit_blocks is None and absent.absent is not None and LOAD_BLOCKS in absent.absent


def _aiperf_export_values(text: str) -> tuple[dict[str, float], dict[str, float]]:
    """A /metrics dump's counters and gauges by the names aiperf exports them under: a counter by its family
    name (without `_total`; the master's `..._nums_` families have none), a gauge by its own."""
    types = [line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE ")]
    kinds = {name.removesuffix("_total") if kind == "counter" else name: kind for name, kind in types}
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    for sample in prometheus.iter_samples(text):
        family = sample.name.removesuffix("_total")
        if kinds.get(family) == "counter":
            counters[family] = counters.get(family, 0.0) + sample.value
        elif kinds.get(sample.name) == "gauge":
            gauges[sample.name] = max(gauges.get(sample.name, sample.value), sample.value)
    return counters, gauges


def test_mooncake_reads_the_blocks_its_master_served_from_the_real_round_trip() -> None:
    # a fresh master (counters from zero) after two external loads of one prompt's 10 blocks: the window's deltas
    # are the dump's counters themselves; the engine's own dump of the same moment says what it received
    deltas, gauges = _aiperf_export_values((MOONCAKE_DATA / "master_metrics.prom").read_text())
    reading = backends.get("mooncake").tier_reading(deltas, gauges)
    assert reading.absent is None and reading.hit_tokens is None
    assert reading.counters == {
        "hit_blocks": 20.0, "hit_bytes": 2621440.0, "gets": 20.0, "keys_max": 40.0, "allocated_bytes_max": 5242880.0,
    }  # fmt: skip
    engine = {s.name: s.value for s in prometheus.iter_samples((MOONCAKE_DATA / "engine_metrics.prom").read_text())}
    # blocks x the engine's block size (128) are the tokens the engine took from the external tier
    assert (
        reading.hit_blocks is not None and reading.hit_blocks * 128 == engine["vllm:external_prefix_cache_hits_total"]
    )


def test_mooncake_without_its_masters_counter_says_why_and_has_no_figure() -> None:
    # the engine's metrics alone (the master's never scraped): no store figure, a reason naming the counter
    deltas, gauges = _aiperf_export_values((MOONCAKE_DATA / "engine_metrics.prom").read_text())
    reading = backends.get("mooncake").tier_reading(deltas, gauges)
    assert reading.hit_blocks is None and reading.hit_tokens is None and reading.counters == {}
    assert reading.absent is not None and mooncake.HIT_BLOCKS in reading.absent


def test_mooncake_reads_its_masters_counters_from_slurmx_own_scrapes_of_its_metrics() -> None:
    # aiperf 0.13 never exports the master (its HEAD probe gets a stray body back: "unreachable"); the node's
    # own before/after GETs are the window. A fresh master's counters start at zero: before is empty.
    after = (MOONCAKE_DATA / "master_metrics.prom").read_text()
    tier = tier_counters({}, (("", after),))
    # a `# TYPE ... counter` family without `_total` is a counter, its delta the window's
    assert tier.delta[mooncake.HIT_BLOCKS] == 20.0 and mooncake.HIT_BLOCKS not in tier.gauge_max
    reading = backends.get("mooncake").tier_reading(tier.delta, tier.gauge_max)
    assert reading.hit_blocks == 20.0 and reading.absent is None
    half = after.replace(f"\n{mooncake.HIT_BLOCKS} 20\n", f"\n{mooncake.HIT_BLOCKS} 8\n")
    assert half != after and tier_counters({}, ((half, after),)).delta[mooncake.HIT_BLOCKS] == 12.0


def test_a_tier_scrape_missing_on_either_side_falls_back_to_aiperfs_export() -> None:
    after = (MOONCAKE_DATA / "master_metrics.prom").read_text()
    export = {"metrics": {"lmcache_mp_lookup_hit_tokens": {"type": "counter", "series": [{"stats": {"total": 64.0}}]}}}
    for scrapes in ((None, after),), (("", None),), ():
        tier = tier_counters(export, scrapes)
        assert tier.delta == {"lmcache_mp_lookup_hit_tokens": 64.0}, scrapes
