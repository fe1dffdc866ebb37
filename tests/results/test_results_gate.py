"""The validity gate: zero tokens, too many errors, a cancelled replay or too few requests fail a point."""

from __future__ import annotations

from slurmx.results import gate
from slurmx.results.schema import Rate, Stats
from tests.helpers.synthetic import make_result


def test_a_normal_result_passes() -> None:
    assert gate.check(make_result(point_id="p1")) is None


def test_zero_output_tokens_is_rejected() -> None:
    result = make_result(point_id="p1")
    result.request_metrics.throughput.output = Rate(tokens_per_second=0.0)
    result.request_metrics.tokens.output_actual = Stats(mean=0.0, p50=0.0)
    reason = gate.check(result)
    assert reason is not None and "zero output tokens" in reason


def test_error_rate_over_threshold_is_rejected_with_the_numbers() -> None:
    result = make_result(point_id="p1", requests=80, errors=20)
    # InferenceX's rule and message (issue 23; validate_agentic_result.py), not slurmx's old wording
    assert gate.check(result) == "aiperf request error rate exceeded the benchmark limit: 20/100 = 20.000% > 10.000%"


def test_error_rate_at_threshold_passes_and_threshold_is_configurable() -> None:
    result = make_result(point_id="p1", requests=90, errors=10)
    assert gate.check(result) is None
    assert gate.check(result, max_error_rate=0.05) is not None


def test_cancelled_replay_is_rejected() -> None:
    reason = gate.check(make_result(point_id="p1", was_cancelled=True))
    assert reason is not None and "cancelled" in reason


def test_too_few_completed_requests_is_rejected() -> None:
    result = make_result(point_id="p1", requests=3)
    assert gate.check(result, min_requests=5) == "3 completed request(s), fewer than the minimum 5"
    assert gate.check(make_result(point_id="p1", requests=0)) is not None


def test_each_reason_is_the_exact_line_the_user_sees() -> None:
    assert gate.check(make_result(point_id="p1", was_cancelled=True)) == (
        "the replay was cancelled before it finished (aiperf was_cancelled)"
    )
    incomplete = make_result(point_id="p1")
    assert incomplete.slurmx is not None
    incomplete.slurmx.incomplete_reason = "benchmark duration reached with requests in flight"
    assert gate.check(incomplete) == (
        "aiperf marked the replay incomplete: benchmark duration reached with requests in flight"
    )
    silent = make_result(point_id="p1")
    silent.request_metrics.throughput.output = None
    silent.request_metrics.tokens.output_actual = Stats(mean=0.0, p50=0.0)
    assert gate.check(silent) == "zero output tokens: the engine answered nothing"


def test_the_minimum_request_count_is_inclusive_and_one_by_default() -> None:
    assert gate.check(make_result(point_id="p1", requests=5), min_requests=5) is None
    assert gate.check(make_result(point_id="p1", requests=1)) is None


def test_error_rate_numbers_fall_back_to_the_request_total_without_record_accounting() -> None:
    result = make_result(point_id="p1", requests=80, errors=20)
    result.request_accounting.records_total = 0
    # InferenceX's rule and message (issue 23): successes + errors, never records_total
    assert gate.check(result) == "aiperf request error rate exceeded the benchmark limit: 20/100 = 20.000% > 10.000%"


def test_output_tokens_come_from_the_records_when_the_throughput_says_none_or_zero() -> None:
    """aiperf leaves the output rate out (or 0) on some runs; the mean output length x requests decides."""
    for rate in (None, Rate(tokens_per_second=0.0)):
        result = make_result(point_id="p1", requests=4)
        result.request_metrics.throughput.output = rate
        result.request_metrics.tokens.output_actual = Stats(mean=0.5, p50=0.5)
        assert gate.check(result) is None, rate
    trickle = make_result(point_id="p1")  # any positive output rate is output, however small
    trickle.request_metrics.throughput.output = Rate(tokens_per_second=0.5)
    trickle.request_metrics.tokens.output_actual = Stats(mean=0.0, p50=0.0)
    assert gate.check(trickle) is None
    nothing_completed = make_result(point_id="p1", requests=0)
    nothing_completed.request_metrics.throughput.output = None
    nothing_completed.request_metrics.tokens.output_actual = Stats(mean=0.5, p50=0.5)
    # InferenceX's rule comes first (issue 23): zero completed requests is its own refusal
    assert gate.check(nothing_completed, min_requests=0) == "aiperf completed zero requests"
