"""Each backend's reading of its tier's counters: a figure where the counter is in the replay's metrics, a
reason where it is not (never a silent zero, never a reason in a figure's place)."""

from __future__ import annotations

from slurmx import backends
from slurmx.backends.vllm_simple import LOAD_BLOCKS


def test_lmcache_without_its_lookup_counter_says_why_and_has_no_figure() -> None:
    reading = backends.get("lmcache").tier_reading({}, {})
    assert reading.absent == "no LMCache lookup counter in the replay's metrics export"
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
