"""Two small pieces of the aggregation checked on hand-made inputs where every step is countable:
requests per second in one-second windows, and the error category a failed request is counted under."""

from __future__ import annotations

from typing import Any

import pytest

from slurmx.results.aggregate import _error_category, _qps

S = 1_000_000_000  # ns per second


def _ended(*seconds: float) -> list[dict[str, Any]]:
    # 100 s on: a request ending at 0 ns would read as "no end time"
    return [{"metadata": {"request_end_ns": int((100 + s) * S)}} for s in seconds]


def test_qps_counts_request_ends_per_whole_one_second_window() -> None:
    # windows [0,1) [1,2) [2,3): 2, 1 and 2 ends; the end at exactly 3.0 s starts a window that never closes
    qps = _qps(_ended(2.5, 0.0, 0.5, 1.2, 2.0, 3.0))
    assert (qps.window_seconds, qps.samples) == (1.0, 3)
    assert qps.mean == pytest.approx(5 / 3)
    assert (qps.p50, qps.p90) == (2.0, 2.0)


def test_qps_boundaries_fall_into_the_next_window() -> None:
    qps = _qps(_ended(0.0, 1.0, 1.5, 2.0))  # [0,1): 1  [1,2): 2
    assert qps.samples == 2 and qps.mean == pytest.approx(1.5)


def test_qps_over_less_than_a_window_is_the_plain_rate_and_needs_two_distinct_ends() -> None:
    short = _qps(_ended(0.0, 0.25, 0.5))
    assert (short.mean, short.samples, short.window_seconds) == (6.0, 0, 1.0)
    assert _qps(_ended(0.0)).mean is None
    assert _qps(_ended(1.0, 1.0)).mean is None
    assert _qps([{"metadata": {}}, {}]).mean is None


@pytest.mark.parametrize(
    ("error", "category"),
    [
        ({"type": "HTTPStatusError", "code": 500, "message": "x: y"}, "HTTPStatusError"),
        ({"type": "", "error_type": "ReadTimeout"}, "ReadTimeout"),
        ({"code": 503, "class": "c"}, "503"),
        ({"class": "ServerDisconnected", "status": 1}, "ServerDisconnected"),
        ({"status": 429}, "429"),
        ({"message": "ConnectionError: refused\nat line 2"}, "ConnectionError"),
        ({"error": "  Overloaded: try later  "}, "Overloaded"),
        ({"message": ""}, "unknown"),
        ("RuntimeError: boom", "RuntimeError"),
        (": nothing before the colon", "unknown"),
        (None, "unknown"),
        ("x" * 200, "x" * 120),
    ],
)
def test_error_category(error: Any, category: str) -> None:
    assert _error_category(error) == category
