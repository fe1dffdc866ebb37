"""The gate applies InferenceX's rule first (issue 23): its error rate over aiperf's aggregate, zero completed
requests, the engine's required server-metric prefix; then slurmx's own rules, each refusal named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmx import engines
from slurmx.results import gate
from slurmx.results.aggregate import RunFacts, RunMeta, build_result
from slurmx.results.requests import aiperf_counts
from slurmx.results.schema import Result
from tests.helpers.inferencex_results import POINT
from tests.helpers.points import point_from_row
from tests.helpers.synthetic import make_result

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLE = DATA / "aiperf" / "lmcache-replay"
CASES = yaml.safe_load((DATA / "inferencex" / "validate_agentic_result_cases.yaml").read_text())


def _record(phase: str, error: bool, index: int) -> dict[str, Any]:
    start = 1_000_000_000 + index * 10_000_000
    return {
        "metadata": {"benchmark_phase": phase, "request_start_ns": start, "request_end_ns": start + 500_000_000},
        "metrics": {"input_sequence_length": {"value": 100}, "output_sequence_length": {"value": 20},
                    "request_latency": {"value": 500.0}, "inter_token_latency": {"value": 20.0}},
        "error": {"type": "HTTPStatusError", "message": "500"} if error else None,
    }  # fmt: skip


def _artifacts(tmp: Path, kinds: list[tuple[str, bool]], aggregate: Any, export: bool = True) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    records = [_record(phase, error, i) for i, (phase, error) in enumerate(kinds)]
    (tmp / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if aggregate is not None:
        (tmp / "profile_export_aiperf.json").write_text(json.dumps(aggregate))
    if export:
        for name in ("server_metrics_export.json", "server_metrics_export.csv"):
            shutil.copy(SAMPLE / name, tmp / name)
    return tmp


def _build(artifacts: Path) -> Result:
    return build_result(point_from_row(POINT), artifacts, run=RunMeta(sweep_id="s"))


def test_the_issues_reproduction_is_invalid_with_inferencexs_message_and_figures(tmp_path: Path) -> None:
    """100 warmup records, 90 good and 12 failed profiling requests; aiperf's aggregate counts the profiled ones."""
    kinds = [("warmup", False)] * 100 + [("profiling", False)] * 90 + [("profiling", True)] * 12
    aggregate = {
        "request_count": {"avg": 90},
        "error_request_count": {"avg": 12},
        "completed_request_count": {"avg": 102},
    }
    result = _build(_artifacts(tmp_path, kinds, aggregate))
    assert result.request_accounting.records_total == 202  # the old rule's 12/202 = 5.9 %, valid
    assert result.error_rate == pytest.approx(12 / 102)
    assert gate.judge(result) == gate.Refusal(
        gate.INFERENCEX_ERROR_RATE,
        "aiperf request error rate exceeded the benchmark limit: 12/102 = 11.765% > 10.000%",
    )
    # the same figures from the records alone (a result.json written before the counts were recorded)
    assert result.slurmx is not None
    result.slurmx.aiperf_counts = None
    refusal = gate.judge(result)
    assert refusal is not None and refusal.reason.endswith("12/102 = 11.765% > 10.000%")


def test_warmup_errors_do_not_count_against_a_point(tmp_path: Path) -> None:
    kinds = [("warmup", True)] * 30 + [("profiling", False)] * 20
    aggregate = {"request_count": {"avg": 20}, "completed_request_count": {"avg": 20}}
    assert gate.judge(_build(_artifacts(tmp_path, kinds, aggregate))) is None


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["upstream"] for c in CASES["cases"]])
def test_inferencexs_own_validation_cases_pass_through_slurmx(tmp_path: Path, case: dict[str, Any]) -> None:
    path = _artifacts(tmp_path, [("profiling", False)], case["aggregate"], export=False) / "profile_export_aiperf.json"
    refusal = gate.inferencex_rule(aiperf_counts(path), CASES["threshold"])
    if "errors_end_with" in case:
        assert refusal is not None and refusal.reason.endswith(case["errors_end_with"])
    else:
        assert ([refusal.reason] if refusal is not None else []) == case["errors"]


def test_zero_completed_requests_and_an_unreadable_aggregate_are_inferencexs_refusals(tmp_path: Path) -> None:
    zero = _build(_artifacts(tmp_path / "a", [("warmup", False)], {"request_count": {"avg": 0}}))
    assert gate.judge(zero) == gate.Refusal(gate.INFERENCEX_ZERO_COMPLETED, "aiperf completed zero requests")
    missing = _build(_artifacts(tmp_path / "b", [("profiling", False)], {"benchmark_duration": {"avg": 1}}))
    assert gate.judge(missing) == gate.Refusal(gate.INFERENCEX_AGGREGATE, "request_count.avg is missing")
    bad = _build(_artifacts(tmp_path / "c", [("profiling", False)], {"request_count": {"avg": True}}))
    refusal = gate.judge(bad)
    assert refusal is not None and refusal.reason.endswith(": request_count.avg must be numeric")


def test_the_export_must_hold_the_engines_required_prefix(tmp_path: Path) -> None:
    assert engines.default().metrics.required_prefix == "vllm:"
    ok = {"request_count": {"avg": 1}}
    no_csv = _artifacts(tmp_path / "a", [("profiling", False)], ok)
    (no_csv / "server_metrics_export.csv").unlink()
    refusal = gate.judge(_build(no_csv))
    assert (
        refusal is not None and refusal.rule == gate.INFERENCEX_SERVER_METRICS and "missing or empty" in refusal.reason
    )
    router_only = _artifacts(tmp_path / "b", [("profiling", False)], ok)
    (router_only / "server_metrics_export.json").write_text(json.dumps({"metrics": {"router:requests": {}}}))
    assert gate.judge(_build(router_only)) == gate.Refusal(
        gate.INFERENCEX_SERVER_METRICS, "server_metrics_export.json contains no metric with required prefix 'vllm:'"
    )
    assert gate.judge(_build(_artifacts(tmp_path / "c", [("profiling", False)], ok))) is None


def test_slurmxs_own_rules_come_after_inferencexs_and_are_named() -> None:
    assert gate.judge(make_result(point_id="p", was_cancelled=True)) == gate.Refusal(
        gate.SLURMX_CANCELLED, "the replay was cancelled before it finished (aiperf was_cancelled)"
    )
    both = make_result(point_id="p", requests=50, errors=50, was_cancelled=True)
    refusal = gate.judge(both)
    assert refusal is not None and refusal.rule == gate.INFERENCEX_ERROR_RATE
    partial = make_result(point_id="p")
    assert partial.slurmx is not None
    partial.slurmx.invalid_reason = "partial replay: time limit"  # a file written before invalid_rule existed
    assert gate.judge(partial) == gate.Refusal(gate.SLURMX_PARTIAL, "partial replay: time limit")
    assert gate.judge(make_result(point_id="p", requests=3), min_requests=5) == gate.Refusal(
        gate.SLURMX_MIN_REQUESTS, "3 completed request(s), fewer than the minimum 5"
    )
    assert set(gate.RULES) >= {gate.SLURMX_ARM_MISMATCH, gate.SLURMX_BACKEND_LOG, gate.SLURMX_NOT_ENGAGED}


def test_a_partial_replay_stays_partial_under_an_inferencex_refusal_and_through_a_rebuild(tmp_path: Path) -> None:
    """InferenceX's rule refuses first and names the verdict; that the replay ended early is a fact of its own,
    written beside it, so a later judge (collect, rebuild) still sees the point as partial."""
    kinds = [("profiling", False)] * 10 + [("profiling", True)] * 10
    aggregate = {"request_count": {"avg": 10}, "error_request_count": {"avg": 10}}
    facts = RunFacts(failed_request_threshold=0.2, repeat=2, repeats=3, partial_reason="time limit near (SIGUSR2)")
    result = build_result(point_from_row(POINT), _artifacts(tmp_path, kinds, aggregate), run=RunMeta("s"), facts=facts)
    assert result.slurmx is not None
    assert result.slurmx.invalid_rule == gate.INFERENCEX_ERROR_RATE  # InferenceX's rule names the verdict
    assert result.slurmx.partial_reason == "time limit near (SIGUSR2)"
    again = RunFacts.of(Result.model_validate_json(result.model_dump_json()).slurmx)  # type: ignore[arg-type]
    assert again == facts  # what a rebuild carries over: threshold, repeat and the early end
    # were the counts fine, the partial replay is what refuses it
    result.slurmx.aiperf_counts = None
    result.request_accounting.records_error_dropped = 0
    assert gate.judge(result, max_error_rate=1.0) == gate.partial("time limit near (SIGUSR2)")
