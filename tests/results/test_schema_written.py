"""results/schema.py's methods: the figures as InferenceX writes them (Result.inferencex() against InferenceX's own
round_floats, imported in-process from the fixture tree), what result.json leaves out when unset, sparse objects,
the error rate and GPU count read back from a written result, and the small properties collect and the gate read;
every expected value worked by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurmx.results.aggregate import write_result
from slurmx.results.schema import (
    AiperfCounts,
    ArmEvidence,
    Certification,
    ComponentMeta,
    PercentileCertificate,
    PerGpu,
    RequestAccounting,
    Result,
    SlurmxMeta,
    Stats,
)
from tests.helpers.inferencex_aggregation import module

FIGURES: list[Any] = [
    0.0, -0.0, 1.0, 2.0, 0.123456789, 0.999994, 0.999996, 1.000004, 1.499996, -1.000004, -0.999996, 12345.678901,
    1e-7, -2.5, 3, True, None, "1.5", 99999.999996, 0.5, 1e20,
]  # fmt: skip


def _result(**fields: Any) -> Result:
    base: dict[str, Any] = {
        "hw": "h200",
        "conc": 4,
        "image": "i",
        "model": "m",
        "infmax_model_prefix": "p",
        "framework": "vllm",
        "precision": "fp8",
        "tp": 2,
        "num_requests_total": 10,
        "num_requests_successful": 8,
    }
    return Result(**{**base, **fields})


def test_the_inferencex_object_rounds_as_inferencexs_round_floats() -> None:
    round_floats = module("aggregation_common").round_floats
    nested = {"a": FIGURES, "b": {"c": FIGURES[:5], "d": [[0.1234567, 2.0000001]]}}
    result = _result(dataset=nested, avg_power_w=0.123456789, kv_p2p_transfer="nixl")
    written = result.inferencex()
    theirs = round_floats(nested)
    assert repr(written["dataset"]) == repr(theirs)  # repr: 1 and 1.0, 0.0 and -0.0 told apart
    assert written["avg_power_w"] == 0.123456789  # the power step's own precision, not rounded again
    assert "slurmx" not in written and written["kv_p2p_transfer"] == "nixl"


def test_result_json_leaves_out_what_inferencex_writes_only_when_it_applies() -> None:
    data = _result(slurmx=SlurmxMeta(point_id="p", config_key="k", exp_name="e", sweep_id="s")).dump()
    for key in (
        "router",
        "kv_p2p_transfer",
        "dataset",
        "warnings",
        "num_gpus",
        "pp",
        "dcp_size",
        "pcp_size",
        "prefill_num_workers",
        "decode_hw",
        "num_prefill_gpu",
        "num_decode_gpu",
        "power_valid",
        "avg_power_w",
        "joules_per_total_token",
        "power_metric_schema_version",
    ):
        assert key not in data, key
    for key in ("kv_offload_backend", "kv_cache_pool_tokens", "recipe_fingerprint", "ep", "dp_attention"):
        assert key in data, key  # always written, null or not
    assert data["kv_offload_backend"] is None and data["dp_attention"] == "false"
    assert "rounds" not in data["slurmx"] and "stopped_by" not in data["slurmx"]
    assert data["slurmx"]["invalid_reason"] is None  # the slurmx block keeps its other nulls
    kept = _result(
        pp=2,
        num_gpus=4,
        power_valid=0,
        warnings=["w"],
        slurmx=SlurmxMeta(point_id="p", config_key="k", exp_name="e", sweep_id="s", rounds=3, stopped_by="budget"),
    ).dump()
    assert (kept["pp"], kept["num_gpus"], kept["power_valid"], kept["warnings"]) == (2, 4, 0, ["w"])
    assert (kept["slurmx"]["rounds"], kept["slurmx"]["stopped_by"]) == (3, "budget")
    assert _result().dump()["slurmx"] is None  # a result without the block (an InferenceX aggregate read back)


def test_sparse_objects_write_only_the_figures_they_have() -> None:
    assert Stats().model_dump() == {} and Stats(p50=0.0).model_dump() == {"p50": 0.0}
    assert PerGpu(total_tput_tps=3.0).model_dump() == {"total_tput_tps": 3.0}
    assert ComponentMeta(name="lmcache").model_dump() == {"name": "lmcache"}
    assert ComponentMeta(name="lmcache", version="0.3").model_dump() == {"name": "lmcache", "version": "0.3"}


@pytest.mark.parametrize(
    ("counts", "accounting", "successful", "rate"),
    [
        # aiperf's counts: 2 errors of 8 completed
        (AiperfCounts(request_count=6, error_request_count=2, completed_request_count=8), None, 6, 2 / 8),
        # no completed count: 6 + 2
        (AiperfCounts(request_count=6, error_request_count=2), None, 6, 2 / 8),
        # no error count: none
        (AiperfCounts(request_count=6), None, 6, 0.0),
        # no success count in the aggregate: the records' 3 errors of 5 + 3
        (AiperfCounts(error_request_count=9), RequestAccounting(records_error_dropped=3), 5, 3 / 8),
        # nothing recorded (an InferenceX aggregate): the records' 1 error of 4 + 1
        (None, RequestAccounting(records_error_dropped=1), 4, 1 / 5),
        # nothing completed at all
        (AiperfCounts(request_count=0, error_request_count=0), None, 0, 0.0),
    ],
)
def test_the_error_rate_of_a_written_result(
    counts: AiperfCounts | None, accounting: RequestAccounting | None, successful: int, rate: float
) -> None:
    meta = SlurmxMeta(point_id="p", config_key="k", exp_name="e", sweep_id="s", aiperf_counts=counts)
    result = _result(
        slurmx=meta, num_requests_successful=successful, request_accounting=accounting or RequestAccounting()
    )
    assert result.error_rate == pytest.approx(rate, abs=0.0)
    assert _result(num_requests_successful=3, request_accounting=RequestAccounting(records_error_dropped=1)).counts == (
        AiperfCounts(request_count=3.0, error_request_count=1.0)
    )


def test_figures_as_inferencexs_gate_counts_them() -> None:
    assert AiperfCounts(request_count=5, error_request_count=1).figures() == (1.0, 6.0)
    assert AiperfCounts(request_count=5, completed_request_count=9).figures() == (0.0, 9.0)
    assert AiperfCounts(error_request_count=4).figures() == (4.0, None)
    assert AiperfCounts().figures() == (0.0, None)


def test_gpus_and_backend_name_of_a_written_result() -> None:
    assert _result(num_gpus=6).gpus == 6
    assert _result(tp=2, pp=3, pcp_size=2).gpus == 12  # 2 x 3 x 2 without a recorded count
    assert _result(tp=4).gpus == 4 and _result(tp=4, num_gpus=0).gpus == 4
    assert _result().backend_name == "none"
    assert _result(kv_offload_backend=ComponentMeta(name="mooncake")).backend_name == "mooncake"


def test_exceeded_pool_needs_both_figures() -> None:
    assert ArmEvidence(arm="lmcache", working_set_tokens=2177, kv_pool_tokens=2176).exceeded_pool is True
    assert ArmEvidence(arm="lmcache", working_set_tokens=2176, kv_pool_tokens=2176).exceeded_pool is False
    assert ArmEvidence(arm="lmcache", working_set_tokens=10).exceeded_pool is None
    assert ArmEvidence(arm="lmcache", kv_pool_tokens=10).exceeded_pool is None


def test_uncertified_lists_every_percentile_not_certified_in_order() -> None:
    yes, no = PercentileCertificate(count=9, certified=True), PercentileCertificate(count=9, need=40)
    cert = Certification(confidence=0.95, metrics={"ttft": {"p50": yes, "p90": no}, "e2el": {"p50": no, "p99": no}})
    assert cert.uncertified() == [("ttft", "p90", no), ("e2el", "p50", no), ("e2el", "p99", no)]
    assert Certification(confidence=0.95).uncertified() == []


def test_result_json_writes_foreign_non_finite_figures_as_null() -> None:
    """A figure slurmx keeps as it found it (aiperf's dataset block) is written as JSON writes it: json.dumps would
    write Infinity and NaN, which strict JSON readers refuse; the JSON dump writes null."""
    data = _result(dataset={"x": float("nan"), "y": [float("-inf"), 1.5]}).dump()
    assert data["dataset"] == {"x": None, "y": [None, 1.5]}
    assert json.loads(json.dumps(data, allow_nan=False)) == data


def _refuse(constant: str) -> Any:
    raise ValueError(f"not JSON: {constant}")


def test_result_json_holds_no_non_finite_figure_in_any_field(tmp_path: Path) -> None:
    """A float field (the power figures, a statistic, slurmx's own) holding inf or NaN is written null, as a field
    typed Any is: the file parses with a strict JSON reader (one that refuses Infinity and NaN)."""
    meta = SlurmxMeta(point_id="p", config_key="k", exp_name="e", sweep_id="s", ended_at=float("inf"))
    result = _result(
        avg_power_w=float("inf"),
        joules_per_total_token=float("-inf"),
        ttft=Stats(mean=float("nan"), p50=2.5),
        dataset={"x": float("nan")},
        slurmx=meta,
    )
    path = tmp_path / "result.json"
    write_result(path, result)
    data = json.loads(path.read_text(), parse_constant=_refuse)
    # no figure: absent, as a power field is without telemetry (power_valid says why)
    assert "avg_power_w" not in data and "joules_per_total_token" not in data
    assert data["ttft"] == {"mean": None, "p50": 2.5}
    assert data["dataset"] == {"x": None}
    assert data["slurmx"]["ended_at"] is None
    assert json.loads(json.dumps(result.inferencex()), parse_constant=_refuse)["ttft"] == {"mean": None, "p50": 2.5}
