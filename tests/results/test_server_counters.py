"""results/server_metrics.py's counters from /metrics text scraped before and after a replay, worked by hand: the
KV tier's servers (deltas summed over servers, gauges at their maximum over the scrapes and aiperf's export, the
export when a scrape is missing or does not parse), counter resets, `# TYPE` counters without `_total`, the
requests of each data-parallel rank in rank order, the host tier's share of the prompt without a split by origin,
and the pool size read from the engine's log lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurmx import engines
from slurmx.engines import sglang
from slurmx.results.requests import ArtifactError
from slurmx.results.server_metrics import (
    _contains,
    counters_from_scrapes,
    engine_counters,
    kv_pool_tokens,
    metrics_export,
    requests_by_rank,
    server_metrics_from,
    tier_counters,
)

EXPORT: dict[str, Any] = {
    "metrics": {
        "lmcache:hit_tokens": {"type": "counter", "series": [{"labels": {}, "stats": {"total": 999.0}}]},
        "lmcache:l1_usage": {"type": "gauge", "series": [{"labels": {}, "stats": {"max": 0.9, "avg": 0.5}}]},
        "lmcache:keys": {"type": "gauge", "series": [{"labels": {}, "stats": {"max": 10.0}}]},
    }
}
BEFORE_A = "lmcache:hit_tokens_total 100\nlmcache:stored_total 5\nlmcache:keys 7\n"
AFTER_A = "lmcache:hit_tokens_total 160\nlmcache:stored_total 9\nlmcache:keys 12\nlmcache:l1_usage 0.2\n"
BEFORE_B = "# TYPE lmcache:hit_tokens counter\nlmcache:hit_tokens 40\n"
AFTER_B = "# TYPE lmcache:hit_tokens counter\nlmcache:hit_tokens 15\nlmcache:keys 30\nlmcache:l1_usage_bucket 4\n"


def test_the_tiers_servers_scraped_around_the_replay() -> None:
    counters = tier_counters(EXPORT, [(BEFORE_A, AFTER_A), (BEFORE_B, AFTER_B)])
    # server A: 160 - 100 = 60; server B restarted (15 < 40): 15 from zero. stored: 9 - 5 on A only
    assert counters.delta == {"lmcache:hit_tokens": 75.0, "lmcache:stored": 4.0}
    # keys: A's 12 and B's 30 after, the export's 10 over the window: 30; l1 usage: the export's 0.9 beats 0.2
    assert counters.gauge_max == {"lmcache:keys": 30.0, "lmcache:l1_usage": 0.9}
    assert counters.names == {
        "lmcache:hit_tokens",
        "lmcache:stored",
        "lmcache:keys",
        "lmcache:l1_usage",
        "lmcache:l1_usage_bucket",
    }


@pytest.mark.parametrize(
    "scrapes",
    [
        [],
        [(BEFORE_A, None)],
        [(BEFORE_A, AFTER_A), (None, AFTER_B)],
        [(BEFORE_A, AFTER_A), (BEFORE_B, 'lmcache:keys{a="1 2\n')],
    ],
    ids=["no tier", "an after scrape missing", "a before scrape missing", "a scrape that does not parse"],
)
def test_without_every_scrape_the_tier_is_read_from_aiperfs_export(
    scrapes: list[tuple[str | None, str | None]],
) -> None:
    counters = tier_counters(EXPORT, scrapes)
    assert counters.delta == {"lmcache:hit_tokens": 999.0}
    assert counters.gauge_max == {"lmcache:l1_usage": 0.9, "lmcache:keys": 10.0}


def test_a_scraped_window_counts_counter_families_and_skips_histogram_parts() -> None:
    before = 'm_total{engine="0"} 2\nfam_nums_ 5\nh_sum 1\n'
    after = (
        "# TYPE fam_nums_ counter\n"
        'm_total{engine="0"} 7\nm_total{engine="1"} 3\nfam_nums_ 11\n'
        "h_bucket 1\nh_sum 2\nh_count 3\nh_created 4\ng 0.25\ng 0.75\n"
    )
    counters = counters_from_scrapes(before, after, rank_label="engine")
    assert counters.delta == {"m": 8.0, "fam_nums_": 6.0}  # (7 - 2) + (3 - 0); 11 - 5
    assert counters.by_engine == {"m": {"0": 5.0, "1": 3.0}}
    assert counters.gauge_max == {"g": 0.75} and counters.gauge_sum == {"g": 1.0}
    assert counters.names == {"m", "fam_nums_", "h_bucket", "h_sum", "h_count", "h_created", "g"}


def test_requests_by_rank_are_in_rank_order_whatever_order_the_scrape_lists_them() -> None:
    line = 'vllm:request_success_total{{engine="{e}",finished_reason="stop"}} {n}\n'
    after = line.format(e=10, n=3) + line.format(e=2, n=5.4) + line.format(e=0, n=1)
    counters, _ = engine_counters({}, "", after)
    assert list((requests_by_rank(counters) or {}).items()) == [("0", 1), ("2", 5), ("10", 3)]
    # a rank that is not a number sorts first, as rank 0 would
    named = line.format(e=3, n=1) + line.format(e="head", n=2)
    assert list(requests_by_rank(engine_counters({}, "", named)[0]) or {}) == ["head", "3"]
    sg = 'sglang:num_requests_total{dp_rank="1"} 4\nsglang:num_requests_total{dp_rank="0"} 6\n'
    by_rank = requests_by_rank(engine_counters({}, "", sg, sglang.METRICS)[0], sglang.METRICS)
    assert list((by_rank or {}).items()) == [("0", 6), ("1", 4)]


def test_the_host_tiers_share_of_the_prompt_without_a_split_by_origin() -> None:
    # vLLM 0.32's cached tokens by tier with no prompt_tokens_by_source: host 300 of 1000 prompt tokens is the CPU rate
    after = (
        "vllm:prompt_tokens_total 1000\n"
        'vllm:prompt_tokens_cached_by_source_total{source="host"} 300\n'
        'vllm:prompt_tokens_cached_by_source_total{source="device"} 200\n'
        "vllm:prefix_cache_hits_total 50\nvllm:prefix_cache_queries_total 400\n"
    )
    counters, source = engine_counters({}, "", after)
    cache = server_metrics_from([], counters).cache
    assert source == "scrape-delta"
    assert cache.cpu_cache_hit_rate == pytest.approx(0.3)
    assert cache.gpu_cache_hit_rate == cache.overall_cache_hit_rate == pytest.approx(50 / 400)
    assert cache.cached_tokens_by_source == {"host": 300.0, "device": 200.0}
    assert cache.external_cache_hit_rate is None  # no external counters
    no_prompt = server_metrics_from(
        [], engine_counters({}, "", after.replace("vllm:prompt_tokens_total 1000\n", ""))[0]
    )
    assert no_prompt.cache.cpu_cache_hit_rate is None


def test_the_pool_size_is_the_last_line_of_each_engine_core_summed(tmp_path: Path) -> None:
    one = tmp_path / "node0.log"
    one.write_text(
        "(EngineCore_DP0 pid=11) INFO GPU KV cache size: 1,000 tokens\n"
        "(EngineCore_DP1 pid=12) INFO GPU KV cache size: 2,000 tokens\n"
        "(EngineCore_DP0 pid=11) INFO GPU KV cache size: 1,500 tokens\n"  # the later line of one core wins
        "INFO KV cache size: no number here\n"
    )
    two = tmp_path / "node1.log"
    two.write_text("INFO CPU KV cache size: 700 tokens\n")  # no core tag: an engine core of its own, on its own node
    assert kv_pool_tokens([tmp_path / "absent.log", one, two]) == 1500 + 2000 + 700
    assert kv_pool_tokens([tmp_path / "absent.log"]) is None
    assert kv_pool_tokens([]) is None
    sg = tmp_path / "sglang.log"
    sg.write_text(
        "[2026 DP0 TP0 EP0] max_total_num_tokens=4096, chunked_prefill_size=8192\n"
        "[2026 DP1 TP0 EP0] max_total_num_tokens=4096, chunked_prefill_size=8192\n"
        "[2026 TP1] max_total_num_tokens=9, chunked_prefill_size=8192\n"  # untagged beside tagged lines: not a pool
        "[2026 DP0 TP0 EP0] KV Cache is allocated. #tokens: 77, K size: 1 GB\n"  # the pool's own line: not read
    )
    assert kv_pool_tokens([sg], sglang.KV_POOL_LOG) == 4096 + 4096


def test_the_export_check_reads_both_files_and_the_prefix(tmp_path: Path) -> None:
    names = engines.default().metrics
    assert metrics_export(tmp_path, names).model_dump() == {
        "required_prefix": "vllm:",
        "json_nonempty": False,
        "csv_nonempty": False,
        "prefix_found": False,
    }
    (tmp_path / "server_metrics_export.json").write_text('{"metrics": {"sglang:x": {}}}')
    (tmp_path / "server_metrics_export.csv").write_text("")
    found = metrics_export(tmp_path, names)
    assert (found.json_nonempty, found.csv_nonempty, found.prefix_found) == (True, False, False)
    (tmp_path / "server_metrics_export.json").write_text('{"metrics": {"x": 1, "vllm:prompt_tokens": {}}}')
    (tmp_path / "server_metrics_export.csv").write_text("a,b\n")
    found = metrics_export(tmp_path, names)
    assert (found.json_nonempty, found.csv_nonempty, found.prefix_found) == (True, True, True)


def test_the_prefix_is_found_across_the_chunks_the_export_is_read_in(tmp_path: Path) -> None:
    """The export can be GiBs, so it is scanned in chunks; the needle found wherever chunk boundaries cut it, also
    with chunks shorter than the needle."""
    path = tmp_path / "export.json"
    needle = b'"vllm:'
    for at in range(0, 12):
        path.write_bytes(b"x" * at + needle + b"y" * 5)
        for chunk in range(1, 12):
            assert _contains(path, needle, chunk), (at, chunk)
        path.write_bytes(b"x" * at + needle[:-1] + b"y" + needle[1:])
        assert not any(_contains(path, needle, chunk) for chunk in range(1, 12)), at
    path.write_bytes(b"abc")
    assert _contains(path, b"c", 1) and not _contains(path, b"d", 1)
    assert _contains(path, b"bc", 1) and _contains(path, b"ab", 2) and not _contains(path, b"ac", 1)
    path.write_bytes(b"")
    assert not _contains(path, needle)


def test_an_engine_scrape_that_does_not_parse_is_an_artifact_error() -> None:
    with pytest.raises(ArtifactError) as caught:
        engine_counters({}, "ok 1\n", 'ok 2\nbad{x="1" 3\n')
    assert str(caught.value).startswith("the engine's /metrics scrape does not parse: line 2: ")


def test_corners_of_the_engine_counters(tmp_path: Path) -> None:
    # one scrape of the two missing: aiperf's export, or nothing
    assert engine_counters({}, None, "vllm:prompt_tokens_total 5\n")[1] == "none"
    assert engine_counters({}, "vllm:prompt_tokens_total 5\n", None)[1] == "none"
    # no generation counter and no records: no total, not 0
    tokens = server_metrics_from([], engine_counters({}, "", "vllm:prompt_tokens_total 5\n")[0]).tokens
    assert (tokens.prompt_total, tokens.generation_total, tokens.requests_completed) == (5, None, 0)
    # a log with bytes that are not UTF-8 is still read
    log = tmp_path / "engine.log"
    log.write_bytes(b"\xff\xfe junk\n(EngineCore_DP0 pid=1) INFO GPU KV cache size: 2,048 tokens\n")
    assert kv_pool_tokens([log]) == 2048
    # a one-byte export file is not empty
    (tmp_path / "server_metrics_export.json").write_bytes(b"{")
    assert metrics_export(tmp_path, engines.default().metrics).json_nonempty
