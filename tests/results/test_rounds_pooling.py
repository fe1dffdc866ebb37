"""results/rounds.py's pooling of a point's rounds, each rule on hand-made rounds whose sums are countable: aiperf's
profile (first start, last end, any cancel, the first incomplete reason, the error summaries, the theoretical hits
summed only when every round has them), the counts (unknown when a round lacks one, unreadable when a round is),
the request accounting, the exports' series side by side, and read_artifacts on rounds on disk: QPS over each round's
own windows and throughput over each round's own span."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurmx import engines
from slurmx.engines import sglang
from slurmx.results.requests import compute_request_metrics
from slurmx.results.rounds import (
    pooled_accounting,
    pooled_counts,
    pooled_export,
    pooled_profile,
    read_artifacts,
)
from slurmx.results.schema import AiperfCounts, RequestAccounting

NAMES = engines.default().metrics


def test_the_pooled_profile_spans_every_round() -> None:
    first = {
        "start_time": "t1",
        "end_time": "e1",
        "aiperf_version": "0.12",
        "was_cancelled": False,
        "error_summary": [{"count": 1}],
        "theoretical_prefix_cache_hit": {"sum": 3, "count": 10, "avg": 30.0},
    }
    second = {
        "start_time": "t2",
        "end_time": "e2",
        "aiperf_version": "0.13",
        "is_complete": False,
        "incomplete_reason": "time limit",
        "theoretical_prefix_cache_hit": {"sum": 5.5, "count": 20},
    }
    third = {
        "start_time": "t3",
        "end_time": "e3",
        "was_cancelled": True,
        "is_complete": False,
        "incomplete_reason": "cancelled",
        "error_summary": [{"count": 2}, {"count": 4}],
        "theoretical_prefix_cache_hit": {"sum": 1, "count": 5},
    }
    pooled = pooled_profile([first, {}, second, third])
    assert pooled == {
        "start_time": "t1",  # the first round's start
        "end_time": "e3",  # the last round's end, and the rest of the last round
        "was_cancelled": True,
        "is_complete": False,
        "incomplete_reason": "time limit",  # the first incomplete round's
        "error_summary": [{"count": 1}, {"count": 2}, {"count": 4}],
        "theoretical_prefix_cache_hit": {"sum": 9.5, "count": 35},  # 3 + 5.5 + 1 of 10 + 20 + 5
    }


def test_a_complete_uncancelled_sample_keeps_the_last_rounds_profile() -> None:
    first = {"start_time": 1.0, "was_cancelled": False, "is_complete": True, "theoretical_prefix_cache_hit": {"avg": 3}}
    last = {
        "start_time": 5.0,
        "end_time": 9.0,
        "is_complete": True,
        "theoretical_prefix_cache_hit": {"sum": 1, "count": 2},
    }
    pooled = pooled_profile([first, last])
    # one round's figure is not the sample's: without every round's sum and count the hits are dropped
    assert pooled == {"start_time": 1.0, "end_time": 9.0, "is_complete": True, "was_cancelled": False}
    assert pooled_profile([]) == {} and pooled_profile([{}, {}]) == {}
    bools = [
        {"theoretical_prefix_cache_hit": {"sum": True, "count": 2}},
        {"theoretical_prefix_cache_hit": {"sum": 1, "count": 2}},
    ]
    assert "theoretical_prefix_cache_hit" not in pooled_profile(bools)  # a bool is no count
    counts = [
        {"theoretical_prefix_cache_hit": {"sum": 1, "count": None}},
        {"theoretical_prefix_cache_hit": {"sum": 1, "count": 2}},
    ]
    assert "theoretical_prefix_cache_hit" not in pooled_profile(counts)
    lists = [{"error_summary": "n/a"}, {"x": 1}]
    assert "error_summary" not in pooled_profile(lists)


def test_the_pooled_counts_are_sums_unknown_when_a_round_lacks_one() -> None:
    a = AiperfCounts(request_count=10, error_request_count=1, completed_request_count=11)
    b = AiperfCounts(request_count=5, error_request_count=0, completed_request_count=None)
    assert pooled_counts([a, a]) == AiperfCounts(request_count=20, error_request_count=2, completed_request_count=22)
    assert pooled_counts([a, b]) == AiperfCounts(request_count=15, error_request_count=1, completed_request_count=None)
    broken = AiperfCounts(unreadable="round-2: not JSON")
    assert pooled_counts([a, broken, AiperfCounts(unreadable="other")]) == AiperfCounts(unreadable="round-2: not JSON")


def test_the_pooled_accounting_adds_every_count_and_category() -> None:
    a = RequestAccounting(
        records_total=10,
        records_profiled=7,
        records_dropped_total=3,
        records_warmup_dropped=2,
        records_error_dropped=1,
        error_categories={"ReadTimeout": 1},
    )
    b = RequestAccounting(
        records_total=6,
        records_profiled=2,
        records_dropped_total=4,
        records_warmup_dropped=1,
        records_error_dropped=3,
        error_categories={"ReadTimeout": 2, "500": 1},
    )
    assert pooled_accounting([a, b]) == RequestAccounting(
        records_total=16,
        records_profiled=9,
        records_dropped_total=7,
        records_warmup_dropped=3,
        records_error_dropped=4,
        error_categories={"ReadTimeout": 3, "500": 1},
    )


def test_the_pooled_export_puts_each_metrics_series_side_by_side() -> None:
    one = {
        "metrics": {
            "junk": 3,  # not a metric entry, and the entries after it still pooled
            "vllm:a": {"type": "counter", "unit": "x", "series": [{"stats": {"total": 1}}]},
            "vllm:b": {"type": "gauge", "series": [{"stats": {"max": 2}}]},
        }
    }
    two = {
        "metrics": {
            "vllm:a": {"type": "counter", "series": [{"stats": {"total": 4}}, {"stats": {"total": 5}}]},
            "vllm:c": {"type": "counter"},
        }
    }
    assert pooled_export([one, {}, "x", {"metrics": "n/a"}, two]) == {  # type: ignore[list-item]  # a foreign export
        "metrics": {
            "vllm:a": {
                "type": "counter",
                "unit": "x",
                "series": [{"stats": {"total": 1}}, {"stats": {"total": 4}}, {"stats": {"total": 5}}],
            },
            "vllm:b": {"type": "gauge", "series": [{"stats": {"max": 2}}]},
            "vllm:c": {"type": "counter", "series": []},
        }
    }
    assert pooled_export([{}, {"metrics": {}}]) == {}


def _round(directory: Path, ends: list[float], start: float, profile: dict[str, Any] | None = None) -> None:
    directory.mkdir(parents=True)
    records = [
        {
            "metadata": {
                "benchmark_phase": "profiling",
                "request_start_ns": int(start * 1e9),
                "request_end_ns": int(end * 1e9),
            },
            "metrics": {"input_sequence_length": {"value": 100}, "output_sequence_length": {"value": 10}},
            "error": None,
        }
        for end in ends
    ]
    (directory / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if profile is not None:
        (directory / "profile_export_aiperf.json").write_text(json.dumps(profile))


def test_rounds_on_disk_are_rated_over_their_own_windows_and_spans(tmp_path: Path) -> None:
    aiperf = tmp_path / "aiperf"
    # round 1: starts at 100 s, ends at 100.5, 101.0, 101.5, 102.0: windows [100.5, 101.5) 2, [101.5, 102.5) never
    # closes: one window of 2. round 2, an hour later: ends 3700.2, 3700.4, 3701.3, 3702.1, 3703.5 from a start at
    # 3700.0: windows [3700.2, 3701.2) 2, [3701.2, 3702.2) 2, [3702.2, 3703.2) 0.
    _round(aiperf / "round-1", [100.5, 101.0, 101.5, 102.0], 100.0, {"request_count": {"avg": 4}})
    _round(aiperf / "round-2", [3700.2, 3700.4, 3701.3, 3702.1, 3703.5], 3700.0, {"request_count": {"avg": 5}})
    (aiperf / "round-3").mkdir()  # cut before its first record
    artifacts = read_artifacts(aiperf, NAMES)
    assert artifacts.rounds == 2 and [len(part) for part in artifacts.by_round or []] == [4, 5]
    assert len(artifacts.records) == 9 and artifacts.accounting.records_total == 9
    assert artifacts.counts.request_count == 9.0
    metrics = compute_request_metrics(artifacts.records, artifacts.profile, artifacts.by_round)
    qps = metrics.qps
    assert (qps.window_seconds, qps.samples) == (1.0, 4)
    assert qps.mean == pytest.approx(1.5)  # (2 + 2 + 2 + 0) / 4
    # throughput over the rounds' own spans: 2 s + 3.5 s = 5.5 s for 900 input and 90 output tokens
    throughput = metrics.throughput
    assert throughput.duration_seconds == pytest.approx(5.5, rel=1e-12)
    assert throughput.input is not None and throughput.input.tokens_per_second == pytest.approx(900 / 5.5, rel=1e-12)
    assert throughput.total is not None and throughput.total.tokens_per_second == pytest.approx(990 / 5.5, rel=1e-12)


def test_rounds_without_an_aggregate_or_export_pool_to_nothing(tmp_path: Path) -> None:
    aiperf = tmp_path / "aiperf"
    _round(aiperf / "round-1", [10.1, 10.3], 10.0)
    _round(aiperf / "round-2", [50.2, 50.6], 50.0)
    artifacts = read_artifacts(aiperf, NAMES)
    assert artifacts.profile == {} and artifacts.server_export == {}
    # the first round without aiperf's aggregate makes the sample's counts unreadable, as InferenceX's gate reads it
    assert artifacts.counts == AiperfCounts(unreadable=f"{aiperf / 'round-1' / 'profile_export_aiperf.json'} not found")
    assert artifacts.export.required_prefix == "vllm:"
    assert not (artifacts.export.json_nonempty or artifacts.export.csv_nonempty or artifacts.export.prefix_found)


def test_a_single_round_cut_before_its_first_record_still_names_the_missing_file(tmp_path: Path) -> None:
    aiperf = tmp_path / "aiperf"
    (aiperf / "round-1").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"round-1/profile_export.jsonl: missing"):
        read_artifacts(aiperf, NAMES)


def test_a_point_certified_after_its_first_round_is_one_round(tmp_path: Path) -> None:
    aiperf = tmp_path / "aiperf"
    _round(aiperf / "round-1", [10.5, 11.0, 12.0], 10.0, {"request_count": {"avg": 3}, "start_time": 10.0})
    artifacts = read_artifacts(aiperf, NAMES)
    assert artifacts.rounds == 1 and len(artifacts.records) == 3 and artifacts.by_round == [artifacts.records]
    assert artifacts.counts.request_count == 3.0 and artifacts.profile["start_time"] == 10.0
    assert artifacts.export.required_prefix == "vllm:" and not artifacts.export.json_nonempty


def test_a_round_without_start_times_adds_no_span(tmp_path: Path) -> None:
    aiperf = tmp_path / "aiperf"
    _round(aiperf / "round-1", [100.5, 101.0, 102.0], 100.0)  # a span of 2 s
    _round(aiperf / "round-2", [200.5, 201.0], 200.0)
    lines = (aiperf / "round-2" / "profile_export.jsonl").read_text().replace('"request_start_ns": 200000000000, ', "")
    (aiperf / "round-2" / "profile_export.jsonl").write_text(lines)
    artifacts = read_artifacts(aiperf, NAMES)
    throughput = compute_request_metrics(artifacts.records, artifacts.profile, artifacts.by_round).throughput
    # 5 requests of 100 input tokens over round 1's 2 s alone
    assert throughput.duration_seconds == 2.0
    assert throughput.input is not None and throughput.input.tokens_per_second == 250.0


def test_two_rounds_the_second_cut_before_its_first_record_are_one(tmp_path: Path) -> None:
    aiperf = tmp_path / "aiperf"
    _round(aiperf / "round-1", [10.5, 11.0], 10.0)
    (aiperf / "round-2").mkdir()
    artifacts = read_artifacts(aiperf, NAMES)
    assert artifacts.rounds == 1 and len(artifacts.records) == 2


def test_the_export_check_of_rounds_asks_the_engines_own_prefix(tmp_path: Path) -> None:
    aiperf = tmp_path / "aiperf"
    for k in (1, 2):
        _round(aiperf / f"round-{k}", [10.5, 11.0], 10.0)
        (aiperf / f"round-{k}" / "server_metrics_export.json").write_text('{"metrics": {"sglang:prompt_tokens": {}}}')
        (aiperf / f"round-{k}" / "server_metrics_export.csv").write_text("a\n")
    export = read_artifacts(aiperf, sglang.METRICS).export
    assert (export.required_prefix, export.json_nonempty, export.csv_nonempty, export.prefix_found) == (
        "sglang:",
        True,
        True,
        True,
    )
    assert not read_artifacts(aiperf, NAMES).export.prefix_found  # no vllm: metric in it


def test_rounds_too_short_for_a_window_are_rated_over_their_own_spans(tmp_path: Path) -> None:
    """No round lasts a whole second: the plain rate of one round (its ends over its ends' span), for the rounds
    together over their spans summed, never over the 40 s between them (which would be 4 ends in 40.5 s)."""
    aiperf = tmp_path / "aiperf"
    _round(aiperf / "round-1", [10.1, 10.3], 10.0)  # 0.2 s
    _round(aiperf / "round-2", [50.2, 50.6, 50.8], 50.0)  # 0.6 s
    _round(aiperf / "round-3", [60.5], 60.0)  # one end: no span
    artifacts = read_artifacts(aiperf, NAMES)
    qps = compute_request_metrics(artifacts.records, artifacts.profile, artifacts.by_round).qps
    assert (qps.samples, qps.window_seconds) == (0, 1.0)
    assert qps.mean == pytest.approx(5 / 0.8, rel=1e-9)  # 2 + 3 ends over 0.2 + 0.6 s
    single = tmp_path / "single"
    _round(single / "round-1", [10.5], 10.0)
    one = read_artifacts(single, NAMES)
    assert compute_request_metrics(one.records, one.profile, one.by_round).qps.mean is None
