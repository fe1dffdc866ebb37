"""Each rule of the validity gate on its own and in order (issue 26): InferenceX's error-rate rule on a grid of
aiperf aggregates judged by InferenceX's own validate_agentic_result.py, the server-metrics rule's three answers
as benchmark_lib.sh words them, slurmx's rules one over another, the arm checks with every reason written out by
hand, the labels, and `judged` writing the verdict with the threshold the result records."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from slurmx.results import gate
from slurmx.results.requests import aiperf_counts
from slurmx.results.schema import AiperfCounts, ArmEvidence, MetricsExport, Rate, Result, SlurmxMeta, Stats
from tests.helpers.inferencex_results import REPO
from tests.helpers.synthetic import make_result

VALIDATOR = REPO / "utils" / "agentic" / "validation" / "validate_agentic_result.py"


def inferencex_validator() -> ModuleType:
    """InferenceX's validate_agentic_result.py from the fixture tree (stdlib only), loaded as an oracle."""
    if not VALIDATOR.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"InferenceX's validate_agentic_result.py not found at {VALIDATOR} (set SLURMX_FIXTURES)")
        pytest.skip(f"InferenceX's validate_agentic_result.py not found at {VALIDATOR}")
    spec = importlib.util.spec_from_file_location("ix_validate_agentic_result", VALIDATOR)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- InferenceX's rule against its own code

SUCCESSES = (None, 0, 1, 9, 90, 100)
ERRORS = (None, 0, 1, 10, 11, 12)
COMPLETED = (None, 0, 100, 101, 110)
THRESHOLDS = (0.0, 0.05, 0.1, 1.0)


def _aggregate(successes: int | None, errors: int | None, completed: int | None) -> dict[str, Any]:
    counts = {"request_count": successes, "error_request_count": errors, "completed_request_count": completed}
    return {name: {"avg": value} for name, value in counts.items() if value is not None}


def test_the_error_rate_rule_answers_as_inferencexs_validator_on_a_grid_of_aggregates(tmp_path: Path) -> None:
    """Every combination of success, error and completed counts (each possibly missing), at four thresholds:
    the refusal and its message equal the errors InferenceX's validate_result returns for the same file."""
    ix = inferencex_validator()
    path = tmp_path / "profile_export_aiperf.json"
    seen: set[str] = set()
    for successes, errors, completed in itertools.product(SUCCESSES, ERRORS, COMPLETED):
        path.write_text(json.dumps(_aggregate(successes, errors, completed)))
        counts = aiperf_counts(path)
        for threshold in THRESHOLDS:
            with contextlib.redirect_stdout(io.StringIO()):  # its success line
                theirs = ix.validate_result(tmp_path, threshold)
            refusal = gate.inferencex_rule(counts, threshold)
            ours = [refusal.reason] if refusal is not None else []
            assert ours == theirs, (successes, errors, completed, threshold)
            if refusal is not None:
                seen.add(refusal.rule)
    # the grid reaches each of the rule's refusals, so each comparison above meant something
    assert seen == {gate.INFERENCEX_AGGREGATE, gate.INFERENCEX_ZERO_COMPLETED, gate.INFERENCEX_ERROR_RATE}


def test_the_error_rate_limit_is_inclusive_and_its_message_is_worked_by_hand() -> None:
    # 10 errors of 100 completed at 10 %: exactly the limit, valid (InferenceX: "inclusive")
    assert gate.inferencex_rule(AiperfCounts(request_count=90, error_request_count=10), 0.10) is None
    # 11 of 101: 10.891 %; aiperf's own completed count wins over successes + errors (90 + 11 = 101 here too)
    assert gate.inferencex_rule(AiperfCounts(request_count=90, error_request_count=11), 0.10) == gate.Refusal(
        gate.INFERENCEX_ERROR_RATE,
        "aiperf request error rate exceeded the benchmark limit: 11/101 = 10.891% > 10.000%",
    )
    # aiperf says 110 completed (it counted cancelled ones too): 11/110 = 10 %, valid
    aiperf_total = AiperfCounts(request_count=90, error_request_count=11, completed_request_count=110)
    assert gate.inferencex_rule(aiperf_total, 0.10) is None
    # no error count is zero errors, whatever the threshold
    assert gate.inferencex_rule(AiperfCounts(request_count=5), 0.0) is None
    # one error in one completed request at a zero threshold
    assert gate.inferencex_rule(AiperfCounts(request_count=0, error_request_count=1), 0.0) == gate.Refusal(
        gate.INFERENCEX_ERROR_RATE, "aiperf request error rate exceeded the benchmark limit: 1/1 = 100.000% > 0.000%"
    )
    assert gate.inferencex_rule(AiperfCounts(request_count=0, error_request_count=0), 0.10) == gate.Refusal(
        gate.INFERENCEX_ZERO_COMPLETED, "aiperf completed zero requests"
    )
    assert gate.inferencex_rule(AiperfCounts(error_request_count=3), 0.10) == gate.Refusal(
        gate.INFERENCEX_AGGREGATE, "request_count.avg is missing"
    )
    assert gate.inferencex_rule(AiperfCounts(request_count=9, unreadable="x.json not found"), 0.10) == gate.Refusal(
        gate.INFERENCEX_AGGREGATE, "x.json not found"
    )


# ---------------------------------------------------------------- the server-metrics rule


def test_the_server_metrics_rule_refuses_either_file_missing_and_a_missing_prefix_in_benchmark_libs_words() -> None:
    missing = gate.Refusal(
        gate.INFERENCEX_SERVER_METRICS, "required AIPerf server metrics artifacts are missing or empty"
    )
    assert gate.server_metrics_rule(MetricsExport(required_prefix="vllm:", csv_nonempty=True, prefix_found=True)) == (
        missing
    )
    assert gate.server_metrics_rule(MetricsExport(required_prefix="vllm:", json_nonempty=True, prefix_found=True)) == (
        missing
    )
    assert gate.server_metrics_rule(
        MetricsExport(required_prefix="sglang:", json_nonempty=True, csv_nonempty=True)
    ) == (
        gate.Refusal(
            gate.INFERENCEX_SERVER_METRICS,
            "server_metrics_export.json contains no metric with required prefix 'sglang:'",
        )
    )
    whole = MetricsExport(required_prefix="vllm:", json_nonempty=True, csv_nonempty=True, prefix_found=True)
    assert gate.server_metrics_rule(whole) is None
    # no required prefix (benchmark_lib.sh's opt-in left off): nothing is checked, not even that the files exist
    assert gate.server_metrics_rule(MetricsExport(required_prefix=None)) is None
    assert gate.server_metrics_rule(MetricsExport(required_prefix="")) is None


def _with_export(result: Result, export: MetricsExport | None) -> Result:
    assert result.slurmx is not None
    result.slurmx.metrics_export = export
    return result


def test_judge_checks_the_export_after_the_error_rate_and_only_where_it_was_recorded() -> None:
    empty = MetricsExport(required_prefix="vllm:")
    # a recorded, empty export refuses an otherwise valid result
    assert gate.judge(_with_export(make_result(point_id="p"), empty)) == gate.Refusal(
        gate.INFERENCEX_SERVER_METRICS, "required AIPerf server metrics artifacts are missing or empty"
    )
    # the error rate is judged first: 50 of 100 failed
    refusal = gate.judge(_with_export(make_result(point_id="p", requests=50, errors=50), empty))
    assert refusal is not None and refusal.rule == gate.INFERENCEX_ERROR_RATE
    # a result written before the export was recorded is not refused for it
    assert gate.judge(_with_export(make_result(point_id="p"), None)) is None
    # the export's refusal comes before slurmx's own rules (a cancelled replay here)
    cancelled = _with_export(make_result(point_id="p", was_cancelled=True), empty)
    refusal = gate.judge(cancelled)
    assert refusal is not None and refusal.rule == gate.INFERENCEX_SERVER_METRICS


def test_judge_and_check_pass_their_limits_on() -> None:
    result = make_result(point_id="p", requests=85, errors=15)  # 15 %
    assert gate.judge(result, max_error_rate=0.15) is None
    assert gate.check(result, max_error_rate=0.15) is None
    refusal = gate.judge(result, max_error_rate=0.149)
    assert refusal is not None and refusal.reason.endswith("15/100 = 15.000% > 14.900%")
    assert gate.check(make_result(point_id="p", requests=4), min_requests=5) == (
        "4 completed request(s), fewer than the minimum 5"
    )
    assert gate.judge(make_result(point_id="p", requests=4), min_requests=4) is None


# ---------------------------------------------------------------- slurmx's rules, one over another


def test_slurmxs_rules_refuse_in_their_order() -> None:
    """Each case holds its rule's fault and every later rule's: the earliest rule names the verdict."""
    result = make_result(point_id="p", requests=2, was_cancelled=True)
    meta = result.slurmx
    assert meta is not None
    result.request_metrics.throughput.output = None
    result.request_metrics.tokens.output_actual = Stats(mean=0.0)
    meta.incomplete_reason = "benchmark duration reached"
    meta.evidence = ArmEvidence(arm="lmcache", expected_connector="LMCacheMPConnector", engine_argv_seen=True)
    meta.partial_reason = "time limit near (SIGUSR2)\nsecond line"
    expected = [
        (gate.SLURMX_PARTIAL, "partial replay: time limit near (SIGUSR2)"),
        (gate.SLURMX_CANCELLED, "the replay was cancelled before it finished (aiperf was_cancelled)"),
        (gate.SLURMX_INCOMPLETE, "aiperf marked the replay incomplete: benchmark duration reached"),
        (gate.SLURMX_MIN_REQUESTS, "2 completed request(s), fewer than the minimum 3"),
        (gate.SLURMX_ZERO_OUTPUT, "zero output tokens: the engine answered nothing"),
        (
            gate.SLURMX_ARM_MISMATCH,
            "arm mismatch: the lmcache arm's engine ran without its connector LMCacheMPConnector",
        ),
    ]
    fixes = [
        lambda: setattr(meta, "partial_reason", None),
        lambda: setattr(meta, "was_cancelled", False),
        lambda: setattr(meta, "incomplete_reason", None),
        lambda: None,  # min_requests drops to 1 below
        lambda: setattr(result.request_metrics.tokens, "output_actual", Stats(mean=3.0)),
    ]
    for step, (rule, reason) in enumerate(expected):
        assert gate.judge(result, min_requests=3 if step <= 3 else 1) == gate.Refusal(rule, reason), step
        if step < len(fixes):
            fixes[step]()
    meta.evidence = meta.evidence.model_copy(update={"engine_connector": "LMCacheMPConnector"})
    assert gate.judge(result) is None


def test_a_result_without_a_slurmx_block_is_judged_by_the_rules_that_need_none() -> None:
    """An InferenceX aggregate read back carries no slurmx block: only the counts and the output decide."""
    plain = make_result(point_id="p")
    plain.slurmx = None
    assert gate.judge(plain) is None and gate.labels(plain) == []
    assert gate.threshold_of(plain) == 0.10  # InferenceX's --failed-request-threshold 0.10
    silent = make_result(point_id="p")
    silent.slurmx = None
    silent.request_metrics.throughput.output = None
    silent.request_metrics.tokens.output_actual = Stats(mean=0.0)
    assert gate.check(silent) == "zero output tokens: the engine answered nothing"
    few = make_result(point_id="p", requests=2)
    few.slurmx = None
    assert gate.check(few, min_requests=3) == "2 completed request(s), fewer than the minimum 3"


def test_threshold_of_is_the_one_the_node_recorded() -> None:
    result = make_result(point_id="p")
    assert result.slurmx is not None
    result.slurmx.failed_request_threshold = 0.25
    assert gate.threshold_of(result) == 0.25


def test_output_tokens_missing_everywhere_is_zero_output() -> None:
    """Neither an output rate nor a mean output length: nothing shows the engine answered."""
    result = make_result(point_id="p", requests=4)
    result.request_metrics.throughput.output = None
    result.request_metrics.tokens.output_actual = Stats()
    assert gate.check(result) == "zero output tokens: the engine answered nothing"
    # a mean of one token a request over four requests is output
    result.request_metrics.tokens.output_actual = Stats(mean=1.0)
    assert gate.check(result) is None
    # an output rate of 1 tok/s with no mean length is output too
    result.request_metrics.tokens.output_actual = Stats()
    result.request_metrics.throughput.output = Rate(tokens_per_second=1.0)
    assert gate.check(result) is None
    # a mean output length over no successful request is no output (5 errors, every one allowed here)
    failed = make_result(point_id="p", requests=0, errors=5)
    failed.request_metrics.throughput.output = None
    failed.request_metrics.tokens.output_actual = Stats(mean=3.0)
    assert gate.check(failed, max_error_rate=1.0, min_requests=0) == "zero output tokens: the engine answered nothing"


# ---------------------------------------------------------------- partial replays, recorded or legacy


def _meta_with(*, partial: str | None = None, reason: str | None = None, rule: str | None = None) -> SlurmxMeta:
    result = make_result(point_id="p")
    assert result.slurmx is not None
    result.slurmx.partial_reason, result.slurmx.invalid_reason, result.slurmx.invalid_rule = partial, reason, rule
    return result.slurmx


def test_partial_reason_is_the_recorded_fact_else_the_verdict_that_said_so() -> None:
    recorded = _meta_with(
        partial="node died", reason="aiperf completed zero requests", rule=gate.INFERENCEX_ZERO_COMPLETED
    )
    assert gate.partial_reason(recorded) == "node died"
    # a file judged partial by rule, before the fact had a field of its own
    assert gate.partial_reason(_meta_with(reason="partial replay: scancel", rule=gate.SLURMX_PARTIAL)) == "scancel"
    assert gate.partial_reason(_meta_with(reason="server crashed", rule=gate.SLURMX_PARTIAL)) == "server crashed"
    # a file from before invalid_rule existed: the reason's own prefix says so
    assert gate.partial_reason(_meta_with(reason="partial replay: time limit")) == "time limit"
    # another rule's verdict is not a partial replay, whatever its words
    assert gate.partial_reason(_meta_with(reason="partial replay: x", rule=gate.INFERENCEX_ERROR_RATE)) is None
    assert gate.partial_reason(_meta_with(reason="aiperf completed zero requests")) is None
    assert gate.partial_reason(_meta_with(rule=gate.SLURMX_PARTIAL)) is None  # a rule without its reason
    assert gate.partial_reason(_meta_with()) is None


def test_partial_keeps_the_first_line_of_its_reason() -> None:
    assert gate.partial("server exited 137\nTraceback (most recent call last):") == gate.Refusal(
        gate.SLURMX_PARTIAL, "partial replay: server exited 137"
    )


# ---------------------------------------------------------------- the arm checks


def _evidence(**fields: Any) -> ArmEvidence:
    base: dict[str, Any] = {"arm": "lmcache", "expected_connector": "LMCacheMPConnector", "engine_argv_seen": True,
                            "engine_connector": "LMCacheMPConnector", "tier_tokens": 512.0,
                            "working_set_tokens": 4763, "kv_pool_tokens": 2176}  # fmt: skip
    return ArmEvidence(**(base | fields))


def test_the_arm_checks_name_what_ran_in_words_written_by_hand() -> None:
    assert gate.arm_refusal(_evidence()) is None
    assert gate.arm_refusal(_evidence(engine_connector=None)) == gate.Refusal(
        gate.SLURMX_ARM_MISMATCH, "arm mismatch: the lmcache arm's engine ran without its connector LMCacheMPConnector"
    )
    assert gate.arm_refusal(_evidence(engine_connector="OffloadingConnector")) == gate.Refusal(
        gate.SLURMX_ARM_MISMATCH,
        "arm mismatch: the lmcache arm's engine ran with connector OffloadingConnector, not LMCacheMPConnector",
    )
    none_arm = _evidence(arm="none", expected_connector=None, tier_tokens=0.0)
    assert gate.arm_refusal(none_arm) == gate.Refusal(
        gate.SLURMX_ARM_MISMATCH, "arm mismatch: the none arm's engine ran with connector LMCacheMPConnector, not none"
    )
    assert (
        gate.check_arm(none_arm)
        == "arm mismatch: the none arm's engine ran with connector LMCacheMPConnector, not none"
    )
    # the none arm with no connector, over an overflowing working set and no tier: what the none arm is
    assert gate.arm_refusal(none_arm.model_copy(update={"engine_connector": None})) is None


def test_an_argv_not_seen_or_an_arm_without_a_connector_of_its_own_is_not_a_mismatch() -> None:
    # the job body did not record the engine argv: nothing to compare
    assert gate.arm_refusal(_evidence(engine_argv_seen=False, engine_connector=None)) is None
    # a backend whose connector is not on the engine argv (expected None): whatever the argv carries
    assert gate.arm_refusal(_evidence(arm="hicache", expected_connector=None, engine_connector="X")) is None
    assert gate.check_arm(_evidence(arm="hicache", expected_connector=None, engine_connector=None)) is None


def test_a_backend_log_failure_refuses_with_its_first_line_after_a_mismatch() -> None:
    failures = ["LMCache fell back to torch ops (lmcache.log:12)", "server restarted (lmcache.1.log:40)"]
    assert gate.arm_refusal(_evidence(log_failures=failures)) == gate.Refusal(
        gate.SLURMX_BACKEND_LOG, "backend log: LMCache fell back to torch ops (lmcache.log:12)"
    )
    refusal = gate.arm_refusal(_evidence(log_failures=failures, engine_connector=None))
    assert refusal is not None and refusal.rule == gate.SLURMX_ARM_MISMATCH
    # the log's failure comes before an offload tier that served nothing
    refusal = gate.arm_refusal(_evidence(log_failures=failures, tier_tokens=0.0))
    assert refusal is not None and refusal.rule == gate.SLURMX_BACKEND_LOG


def test_an_offload_tier_that_served_nothing_over_an_overflowing_working_set_is_not_engaged() -> None:
    words = (
        "offload tier not engaged: the engine received 0 tokens from lmcache over a replay whose working set "
        "(4763 tokens) exceeded its KV pool (2176 tokens)"
    )
    assert gate.arm_refusal(_evidence(tier_tokens=0.0)) == gate.Refusal(gate.SLURMX_NOT_ENGAGED, words)
    assert gate.arm_refusal(_evidence(tier_tokens=None)) == gate.Refusal(gate.SLURMX_NOT_ENGAGED, words)
    assert gate.arm_refusal(_evidence(tier_tokens=1.0)) is None  # one token from the tier is engagement
    # a working set that fits, equals, or is unknown against the pool: nothing says the tier was needed
    assert gate.arm_refusal(_evidence(tier_tokens=0.0, working_set_tokens=2176)) is None
    assert gate.arm_refusal(_evidence(tier_tokens=0.0, working_set_tokens=None)) is None
    assert gate.arm_refusal(_evidence(tier_tokens=0.0, kv_pool_tokens=None)) is None


# ---------------------------------------------------------------- labels


def _labelled(evidence: ArmEvidence | None) -> list[str]:
    result = make_result(point_id="p")
    assert result.slurmx is not None
    result.slurmx.evidence = evidence
    return gate.labels(result)


def test_only_an_offload_arm_whose_tier_served_nothing_and_was_not_needed_is_labelled_not_exercised() -> None:
    assert _labelled(_evidence(tier_tokens=0.0, working_set_tokens=1000)) == ["offload not exercised"]
    assert _labelled(_evidence(tier_tokens=None, working_set_tokens=None)) == ["offload not exercised"]
    assert _labelled(_evidence(tier_tokens=0.0)) == []  # overflowed: refused, not labelled
    assert _labelled(_evidence(tier_tokens=512.0, working_set_tokens=1000)) == []  # the tier served anyway
    none_arm = _evidence(arm="none", expected_connector=None, engine_connector=None, tier_tokens=0.0)
    assert _labelled(none_arm.model_copy(update={"working_set_tokens": 1000})) == []
    assert _labelled(None) == []


# ---------------------------------------------------------------- judged


def test_judged_writes_the_verdict_with_the_recorded_threshold_and_clears_a_stale_one() -> None:
    result = make_result(point_id="p", requests=80, errors=20)  # 20 % failed
    meta = result.slurmx
    assert meta is not None
    meta.evidence = _evidence(tier_tokens=0.0, working_set_tokens=1000)  # valid, but labelled if valid
    meta.failed_request_threshold = 0.25
    meta.invalid_rule, meta.invalid_reason = gate.INFERENCEX_ERROR_RATE, "stale verdict"
    assert gate.judged(result) is result
    after = result.slurmx
    assert after is not None
    assert (after.invalid_rule, after.invalid_reason, after.labels) == (None, None, ["offload not exercised"])
    meta.failed_request_threshold = 0.10  # the default the node gates with
    again = gate.judged(result).slurmx
    assert again is not None and again.invalid_rule == gate.INFERENCEX_ERROR_RATE
    assert again.invalid_reason == "aiperf request error rate exceeded the benchmark limit: 20/100 = 20.000% > 10.000%"
    assert again.labels == []  # a refused result carries no label


def test_judged_needs_the_slurmx_block() -> None:
    result = make_result(point_id="p")
    result.slurmx = None
    with pytest.raises(AssertionError) as refused:
        gate.judged(result)
    assert str(refused.value) == "a result slurmx judges carries its slurmx block"
