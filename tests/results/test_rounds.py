"""A point replayed until certified: its rounds (aiperf/round-<k>/) pooled into one result, on real aiperf 0.13
exports (tests/data/aiperf: lmcache-replay's 12 requests as round 1, tier-overflow/none's 24 as round 2). Every
expected figure is read from the raw files here, never through slurmx's own readers."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest

from slurmx.node.serving_body import policy_of, rounds_stop
from slurmx.results.aggregate import RunFacts, build_result
from slurmx.results.requests import certification, certified_by_percentile
from slurmx.results.schema import Result
from slurmx.store.ledger import UntilCertified
from slurmx.store.tree import PointDir, round_dirs
from tests.helpers.points import point_from_row
from tests.results.test_results_aggregate_real import META, POINT, WINDOW

DATA = Path(__file__).resolve().parents[1] / "data" / "aiperf"
ROUNDS = (DATA / "lmcache-replay", DATA / "tier-overflow" / "none")
FILES = (
    "profile_export.jsonl",
    "profile_export_aiperf.json",
    "server_metrics_export.json",
    "server_metrics_export.csv",
)


def _rounds(point: PointDir, sources: tuple[Path, ...] = ROUNDS) -> None:
    for k, source in enumerate(sources, 1):
        target = point.aiperf_round(k)
        target.mkdir(parents=True)
        for name in FILES:
            shutil.copy(source / name, target / name)


def _raw(source: Path) -> list[dict[str, Any]]:
    """The profiled, error-free records of one export, read plainly."""
    lines = (source / "profile_export.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return [r for r in records if r["metadata"].get("benchmark_phase") == "profiling" and not r.get("error")]


def _seconds(records: list[dict[str, Any]], name: str) -> list[float]:
    return [r["metrics"][name]["value"] / 1000 for r in records if name in r["metrics"]]


def _build(point: PointDir, facts: RunFacts | None = None) -> Result:
    return build_result(point_from_row(POINT), point.aiperf, run=META, window=WINDOW, facts=facts)


@pytest.fixture
def pooled(tmp_path: Path) -> Result:
    point = PointDir(tmp_path / "point")
    _rounds(point)
    return _build(point, RunFacts(stopped_by="budget"))


def test_round_directories_are_read_in_round_order(tmp_path: Path) -> None:
    aiperf = tmp_path / "aiperf"
    for k in (10, 2, 1):
        (aiperf / f"round-{k}").mkdir(parents=True)
    (aiperf / "round-x").mkdir()
    assert [d.name for d in round_dirs(aiperf)] == ["round-1", "round-2", "round-10"]
    assert round_dirs(tmp_path / "none") == []


def test_every_figure_comes_from_the_records_of_all_rounds(pooled: Result) -> None:
    first, second = (_raw(source) for source in ROUNDS)
    both = first + second
    assert (len(first), len(second)) == (12, 24)
    assert pooled.num_requests_successful == 36 and pooled.request_accounting.records_profiled == 36
    ttft = _seconds(both, "time_to_first_token")
    e2el = _seconds(both, "request_latency")
    # linear interpolation between closest ranks is statistics' "inclusive" method
    assert pooled.request_metrics.latency.ttft.p90 == pytest.approx(
        statistics.quantiles(ttft, n=10, method="inclusive")[8]
    )
    assert pooled.request_metrics.latency.e2el.p50 == pytest.approx(statistics.median(e2el))
    assert pooled.request_metrics.latency.ttft.mean == pytest.approx(statistics.fmean(ttft))
    meta = pooled.slurmx
    assert meta is not None and (meta.rounds, meta.stopped_by) == (2, "budget")
    assert meta.certification is not None
    assert meta.certification.metrics["ttft"]["p90"].count == len(ttft) == 36
    assert meta.certification.metrics["e2el"]["p99"].count == 36


def test_throughput_counts_each_rounds_own_span_not_the_gap_between_them(pooled: Result) -> None:
    spans, out_tokens = 0.0, 0.0
    for source in ROUNDS:
        records = _raw(source)
        spans += (
            max(r["metadata"]["request_end_ns"] for r in records)
            - min(r["metadata"]["request_start_ns"] for r in records)
        ) / 1e9
        out_tokens += sum(r["metrics"]["output_sequence_length"]["value"] for r in records)
    throughput = pooled.request_metrics.throughput
    assert throughput.duration_seconds == pytest.approx(spans) and spans < 30  # the captures are hours apart
    assert throughput.output is not None and throughput.output.tokens_per_second == pytest.approx(out_tokens / spans)


def test_the_gate_and_the_server_counters_see_the_whole_sample(pooled: Result) -> None:
    counts = [json.loads((s / "profile_export_aiperf.json").read_text())["request_count"]["avg"] for s in ROUNDS]
    meta = pooled.slurmx
    assert meta is not None and meta.aiperf_counts is not None
    assert meta.aiperf_counts.request_count == sum(counts) == 36
    assert meta.metrics_export is not None and meta.metrics_export.prefix_found and meta.metrics_export.csv_nonempty
    assert meta.invalid_reason is None
    queries = 0.0
    for source in ROUNDS:
        series = json.loads((source / "server_metrics_export.json").read_text())["metrics"]["vllm:prefix_cache_queries"]
        queries += sum(s["stats"]["total"] for s in series["series"])
    assert meta.engine_metrics_source == "aiperf-export"
    assert pooled.server_metrics.cache.prefix_cache_queries == pytest.approx(queries)


def test_a_round_without_its_csv_export_fails_the_export_check(tmp_path: Path) -> None:
    point = PointDir(tmp_path / "point")
    _rounds(point)
    (point.aiperf_round(2) / "server_metrics_export.csv").unlink()
    result = _build(point)
    assert result.slurmx is not None and result.slurmx.metrics_export is not None
    assert not result.slurmx.metrics_export.csv_nonempty and result.slurmx.invalid_reason is not None


def test_a_last_round_cut_before_its_first_record_is_left_out(tmp_path: Path) -> None:
    point = PointDir(tmp_path / "point")
    _rounds(point)
    point.aiperf_round(3).mkdir()  # cancelled before aiperf wrote anything
    result = _build(point)
    assert result.slurmx is not None and result.slurmx.rounds == 2 and result.num_requests_successful == 36


def test_a_point_replayed_once_writes_no_round_keys(tmp_path: Path) -> None:
    point = PointDir(tmp_path / "point")
    shutil.copytree(ROUNDS[0], point.aiperf)
    once = _build(point).dump()
    assert "rounds" not in once["slurmx"] and "stopped_by" not in once["slurmx"]
    assert once["num_requests_successful"] == 12


def test_the_stop_waits_for_ttft_latency_and_normalized_interactivity(pooled: Result) -> None:
    cert = pooled.slurmx.certification if pooled.slurmx else None
    assert cert is not None
    by_name = certified_by_percentile(cert)
    assert set(by_name) == {"p50", "p75", "p90", "p95", "p99"}
    assert not any(by_name.values())  # 36 requests certify nothing at +-10 % here
    # the same records certified again give the same verdicts
    both = _raw(ROUNDS[0]) + _raw(ROUNDS[1])
    assert certified_by_percentile(certification(both)) == by_name

    def marked(certified: set[str]) -> dict[str, bool]:
        metrics = {
            m: {**per, "p90": per["p90"].model_copy(update={"certified": m in certified})}
            for m, per in cert.metrics.items()
        }
        return certified_by_percentile(cert.model_copy(update={"metrics": metrics}))

    assert marked({"ttft", "e2el", "e2e_norm_intvty"})["p90"]  # interactivity (1 / ITL) holds no run
    assert not marked({"ttft", "e2el", "intvty"})["p90"]
    assert not marked({"e2el", "intvty", "e2e_norm_intvty"})["p90"]
    assert marked({"ttft", "e2el", "intvty", "e2e_norm_intvty"})["p90"] and not marked(set())["p90"]
    assert certified_by_percentile(cert, ("ttft", "nosuch"))["p90"] is False


def test_a_wider_width_certifies_what_the_default_does_not() -> None:
    """`--rel-width`: the rule the node stops by and the result records."""
    both = _raw(ROUNDS[0]) + _raw(ROUNDS[1])
    ttft = sorted(_seconds(both, "time_to_first_token"))
    default, wide = certification(both), certification(both, policy_of(UNTIL_WIDE))
    assert wide.rel_width == 0.5 and default.rel_width == 0.1
    p50 = wide.metrics["ttft"]["p50"]
    assert p50.lo_rank is not None and p50.hi_rank is not None
    est = statistics.median(ttft)
    lo, hi = ttft[p50.lo_rank - 1], ttft[p50.hi_rank - 1]
    assert (est - lo) / est <= 0.5 and (hi - est) / est <= 0.5 and (hi - est) / est > 0.1
    assert p50.certified and not default.metrics["ttft"]["p50"].certified
    assert policy_of(UNTIL) is None and policy_of(None) is None


UNTIL = UntilCertified(percentiles=("p90",), max_point_minutes=10, min_duration_s=60)
UNTIL_WIDE = UntilCertified(percentiles=("p90",), max_point_minutes=10, rel_width=0.5)


@pytest.mark.parametrize(
    ("certified", "elapsed", "longest", "expected"),
    [
        ({"p90": True}, 120.0, 30.0, "certified"),
        ({"p90": True}, 59.0, 30.0, "continue"),  # certified before the minimum duration: one more round
        ({"p90": False}, 300.0, 30.0, "continue"),
        ({"p90": False}, 600.0, 30.0, "budget"),  # the budget spent
        ({"p90": False}, 580.0, 30.0, "budget"),  # one more round of 30 s would overrun it
        ({"p90": True}, 580.0, 30.0, "certified"),
        ({"p50": True}, 120.0, 30.0, "continue"),  # not the percentile asked for
    ],
)
def test_rounds_stop(certified: dict[str, bool], elapsed: float, longest: float, expected: str) -> None:
    assert rounds_stop(certified, UNTIL, elapsed, longest, UNTIL.max_point_minutes * 60) == expected
