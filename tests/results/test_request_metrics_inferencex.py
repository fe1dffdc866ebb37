"""results/requests.py against InferenceX's own request aggregation (utils/agentic/aggregation/request_metrics.py,
imported in-process from the fixture tree): the same records, the same figures to 1e-12, on record sets chosen
for the corners of each statistic (one request, equal end times, ends on window edges, latencies of 0 or
negative, values missing or written as text, records without times, full-response ITL on some only) and on a
seeded random replay long enough for many QPS windows. Compared unrounded: the differential test of
test_gate_inferencex_differential.py compares InferenceX's rounded aggregate at 1e-4."""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
from typing import Any

import pytest

from slurmx.results.requests import (
    PROFILE_JSONL,
    ArtifactError,
    _load_json,
    aiperf_counts,
    compute_request_metrics,
    load_records,
    percentile,
)
from tests.helpers.inferencex_aggregation import module

S = 1_000_000_000


def _record(
    start_s: float | None, end_s: float | None, **metrics: Any
) -> dict[str, Any]:  # a metric given as None is left out
    meta: dict[str, Any] = {"benchmark_phase": "profiling"}
    if start_s is not None:
        meta["request_start_ns"] = int(start_s * S)
    if end_s is not None:
        meta["request_end_ns"] = int(end_s * S)
    return {
        "metadata": meta,
        "metrics": {k: {"value": v, "unit": "x"} for k, v in metrics.items() if v is not None},
        "error": None,
    }


def _full(
    start: float, end: float, isl: int, osl: int, ttft: float, e2e: float, itl: float, **more: Any
) -> dict[str, Any]:
    return _record(
        start,
        end,
        input_sequence_length=isl,
        output_sequence_length=osl,
        time_to_first_token=ttft,
        request_latency=e2e,
        inter_token_latency=itl,
        **more,
    )


def _random_replay(seed: int, n: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    t = 100.0
    for _ in range(n):
        t += rng.expovariate(4.0)
        e2e = rng.uniform(50.0, 4000.0)
        out.append(
            _full(
                t,
                t + e2e / 1000.0,
                rng.randint(1, 30_000),
                rng.randint(1, 900),
                rng.uniform(1.0, 900.0),
                e2e,
                rng.uniform(1.0, 80.0),
                full_response_inter_token_latency=rng.uniform(1.0, 90.0),
            )
        )
    return out


CASES: dict[str, list[dict[str, Any]]] = {
    "none": [],
    "one request": [_full(10.0, 11.5, 300, 20, 40.0, 1500.0, 12.5)],
    "two on one end time": [
        _full(10.0, 12.0, 300, 20, 40.0, 2000.0, 12.5),
        _full(11.0, 12.0, 100, 10, 30.0, 1000.0, 9.0),
    ],
    "ends on window edges": [
        _full(10.0 + i * 0.25, 11.0 + i * 0.5, 100 + i, 10 + i, 10.0 + i, 900.0 + i * 7, 5.0 + i) for i in range(9)
    ],
    "ends within one window": [_full(10.0, 10.1 + i * 0.2, 50, 5, 10.0, 100.0, 10.0) for i in range(4)],
    "zero and negative latencies dropped": [
        _full(10.0, 11.0, 100, 10, 0.0, 1000.0, -3.0),
        _full(10.5, 12.0, 120, 0, 25.0, 0.0, 0.0),
        _full(11.0, 13.5, 140, 12, -1.0, 2500.0, 7.0),
        _full(11.5, 14.0, 160, 14, 33.0, 2500.0, 9.0),
    ],
    "two ends under a second apart": [
        _full(10.0, 10.5, 10, 1, 5.0, 500.0, 1.0),
        _full(10.2, 10.9, 20, 2, 6.0, 700.0, 2.0),
    ],
    "two ends a window and a half apart": [
        _full(9.0, 10.0, 10, 1, 5.0, 1000.0, 1.0),
        _full(10.2, 11.5, 20, 2, 6.0, 1300.0, 2.0),
    ],
    "first two ends equal": [
        _full(9.0, 10.0, 10, 1, 5.0, 1000.0, 1.0),
        _full(9.5, 10.0, 20, 2, 6.0, 500.0, 2.0),
        _full(10.0, 11.5, 30, 3, 7.0, 1500.0, 3.0),
        _full(10.5, 12.7, 40, 4, 8.0, 2200.0, 4.0),
    ],
    "one instant": [_full(10.0, 10.0, 100, 10, 5.0, 50.0, 1.0), _full(10.0, 10.0, 200, 20, 6.0, 60.0, 2.0)],
    "latencies under a millisecond": [
        _full(10.0, 10.0005, 100, 10, 0.25, 0.5, 0.05),
        _full(10.2, 10.2009, 120, 3, 0.75, 0.9, 0.3),
        _full(10.4, 10.4012, 140, 2, 0.5, 1.2, 0.6),
    ],
    "values missing or text": [
        _record(10.0, 11.0, input_sequence_length=100, request_latency="1000.5", time_to_first_token="20"),
        _record(10.2, 11.7, output_sequence_length=30, inter_token_latency=8.0, request_latency=None),
        _record(
            10.4,
            12.9,
            input_sequence_length=80,
            output_sequence_length=12,
            request_latency=2400.0,
            time_to_first_token="n/a",
            inter_token_latency=None,
        ),
        {"metadata": {"benchmark_phase": "profiling"}, "error": None},
    ],
    "times missing on some": [
        _full(10.0, None, 100, 10, 20.0, 1000.0, 5.0),
        _full(None, 13.0, 100, 10, 20.0, 1000.0, 5.0),
        _full(11.0, 12.2, 100, 10, 20.0, 1000.0, 5.0),
        _full(12.5, 14.75, 100, 10, 20.0, 1000.0, 5.0),
    ],
    "no start at all": [_full(None, 10.0 + i, 10, 1, 5.0, 10.0, 1.0) for i in range(3)],
    "full-response ITL on some": [
        _full(10.0, 11.0, 100, 10, 20.0, 1000.0, 5.0, full_response_inter_token_latency=6.0),
        _full(10.5, 12.0, 100, 10, 20.0, 1000.0, 5.0),
        _full(11.0, 13.0, 100, 10, 20.0, 1000.0, 5.0, full_response_inter_token_latency=11.0),
        _full(11.5, 14.0, 100, 10, 20.0, 1000.0, 5.0, full_response_inter_token_latency=0.0),
    ],
    "random replay": _random_replay(26, 400),
}
AGGREGATES: dict[str, dict[str, Any]] = {
    "none": {},
    "sum and count": {"theoretical_prefix_cache_hit": {"sum": 37, "count": 50, "avg": 12.0, "unit": "%"}},
    "zero count, avg in percent": {"theoretical_prefix_cache_hit": {"sum": 3, "count": 0, "avg": 62.5, "unit": " % "}},
    "a count of one": {"theoretical_prefix_cache_hit": {"sum": 0.5, "count": 1, "avg": 90.0, "unit": "%"}},
    "avg as a fraction": {"theoretical_prefix_cache_hit": {"avg": 0.625, "unit": "ratio"}},
    "avg without unit": {"theoretical_prefix_cache_hit": {"avg": 0.25}},
    "no avg": {"theoretical_prefix_cache_hit": {"sum": 4}},
    "not an object": {"theoretical_prefix_cache_hit": 0.5},
}


def _close(theirs: Any, mine: Any, where: str = "") -> list[str]:
    """Where `mine` differs from `theirs`, to 1e-12 relative; InferenceX's empty objects are slurmx's absent ones."""
    if isinstance(theirs, dict) or isinstance(mine, dict):
        theirs, mine = theirs or {}, mine or {}
        return [d for k in sorted(set(theirs) | set(mine)) for d in _close(theirs.get(k), mine.get(k), f"{where}.{k}")]
    numbers = isinstance(theirs, (int, float)) and isinstance(mine, (int, float))
    if isinstance(theirs, float) or isinstance(mine, float):
        if numbers and math.isclose(theirs, mine, rel_tol=1e-12, abs_tol=1e-15):
            return []
    elif theirs == mine:
        return []
    return [f"{where}: slurmx {mine!r}, InferenceX {theirs!r}"]


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_request_metrics_are_inferencexs(case: str) -> None:
    theirs = module("request_metrics").compute_request_metrics(CASES[case], {})[1]
    mine = compute_request_metrics(CASES[case], {}).model_dump()
    assert _close(theirs, mine) == []


@pytest.mark.parametrize("aggregate", AGGREGATES, ids=list(AGGREGATES))
def test_theoretical_cache_hit_rate_is_inferencexs(aggregate: str) -> None:
    records = CASES["one request"]
    theirs = module("request_metrics").compute_request_metrics(records, AGGREGATES[aggregate])[1]["cache"]
    mine = compute_request_metrics(records, AGGREGATES[aggregate]).cache.model_dump()
    assert _close(theirs, mine) == []


def test_the_accounting_of_records_read_from_disk_is_inferencexs(tmp_path: Any) -> None:
    lines = [
        _full(10.0, 11.0, 100, 10, 20.0, 1000.0, 5.0),
        {**_full(10.5, 12.0, 100, 10, 20.0, 1000.0, 5.0), "metadata": {"benchmark_phase": "warmup"}},
        {**_full(11.0, 12.5, 100, 10, 20.0, 1000.0, 5.0), "error": {"type": "ReadTimeout"}},
        {**_full(11.0, 12.5, 100, 10, 20.0, 1000.0, 5.0), "error": "ConnectionError: refused", "metadata": {}},
        {**_full(11.1, 12.6, 100, 10, 20.0, 1000.0, 5.0), "error": {"message": "ClientError: 503: unavailable"}},
        {
            **_full(11.2, 12.8, 100, 10, 20.0, 1000.0, 5.0),
            "error": {"status": 429},
            "metadata": {"benchmark_phase": "warmup"},
        },
        {**_full(11.4, 13.0, 100, 10, 20.0, 1000.0, 5.0), "metadata": {}},  # no phase: profiling
        {**_full(11.6, 13.2, 100, 10, 20.0, 1000.0, 5.0), "error": {"type": "ReadTimeout", "message": "m"}},
    ]
    path = tmp_path / PROFILE_JSONL
    text = "\n".join(json.dumps(line) for line in lines)
    path.write_text(text.replace("\n", "\n\n  \n", 1) + "\n\n")  # blank lines amid the records and after them
    theirs_records, theirs = module("request_metrics").load_records_with_accounting(path)
    mine_records, mine = load_records(path)
    assert mine_records == theirs_records
    assert mine.model_dump() == theirs


AGGREGATE_FILES = {
    "absent": None,
    "a list": "[1, 2]",
    "not JSON": "{'request_count': 5}",
    "a count not an object": '{"request_count": 5}',
    "an average as text": '{"request_count": {"avg": "5"}}',
    "an average that is a bool": '{"request_count": {"avg": true}}',
    "a negative average": '{"request_count": {"avg": 4}, "error_request_count": {"avg": -1}}',
    "an infinite average": '{"request_count": {"avg": 4}, "completed_request_count": {"avg": Infinity}}',
    "NaN": '{"request_count": {"avg": NaN}}',
    "counts": '{"request_count": {"avg": 6}, "error_request_count": {"avg": 2.0}, "completed_request_count": {"avg": 8}}',
    "null averages": '{"request_count": {"avg": 6, "max": 9}, "error_request_count": {"avg": null}, "x": 1}',
    "no success count": '{"error_request_count": {"avg": 1}, "completed_request_count": null}',
    "zeros": '{"request_count": {"avg": 0}, "error_request_count": {"avg": 0}}',
}


@pytest.mark.parametrize("case", AGGREGATE_FILES, ids=list(AGGREGATE_FILES))
def test_aiperfs_counts_are_read_as_inferencexs_validator_reads_them(tmp_path: Any, case: str) -> None:
    """aiperf_counts against validate_agentic_result.py: an aggregate it cannot read is slurmx's `unreadable`, word
    for word; one it reads gives each count its _metric_avg gives."""
    validator = module("validate_agentic_result", "validation")
    path = tmp_path / "profile_export_aiperf.json"
    text = AGGREGATE_FILES[case]
    if text is not None:
        path.write_text(text)
    mine = aiperf_counts(path)
    with contextlib.redirect_stdout(io.StringIO()):  # its success line
        theirs = validator.validate_result(tmp_path, 1.0)
    if mine.unreadable is not None:
        assert theirs == [mine.unreadable]
        assert (mine.request_count, mine.error_request_count, mine.completed_request_count) == (None, None, None)
        return
    aggregate = json.loads(path.read_text())
    for name in ("request_count", "error_request_count", "completed_request_count"):
        assert getattr(mine, name) == validator._metric_avg(aggregate, name), name
    assert not any(error.startswith(("failed to read", str(path))) for error in theirs)


def test_percentiles_interpolate_as_inferencexs() -> None:
    theirs = module("aggregation_common").percentile
    for values in ([], [3.0], [2.0, 1.0], [5.0, 1.0, 4.0, 4.0, 9.5], [float(v) for v in range(100)]):
        for p in (0, 1, 25, 50, 75, 90, 95, 99, 99.9, 100):
            assert percentile(values, p) == theirs(values, p), (values, p)


def test_aiperfs_profile_is_read_as_a_json_object(tmp_path: Any) -> None:
    path = tmp_path / "profile_export_aiperf.json"
    assert _load_json(path) == {}
    path.write_text("[1, 2]")
    assert _load_json(path) == {}
    path.write_text('{"a": 1}')
    assert _load_json(path) == {"a": 1}
    path.write_text("{'a': 1}")
    with pytest.raises(ArtifactError) as caught:
        _load_json(path)
    assert str(caught.value) == f"{path}: not JSON (Expecting property name enclosed in double quotes)"
