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
    assert gate.check(result) == "request error rate 20.0% (20/100) is over the threshold 10%"


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
