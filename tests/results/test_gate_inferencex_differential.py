"""Differential test of the gate and the aggregate against InferenceX's own code (issue 23), run as an oracle
from the fixture tree (tests/helpers/inferencex_results_oracle.py): validate_agentic_result.py,
benchmark_lib.sh's validate_required_agentic_server_metrics and process_agentic_result.py's build_agg.

On generated artifact sets (hypothesis, fixed seed: warmup and profiling mixes, errors in either, zero
completed, missing or malformed aggregate counts, cancelled replays, missing or empty server-metrics exports)
and on the real aiperf artifacts of tests/data/aiperf: InferenceX refuses exactly when slurmx refuses by an
`inferencex-*` rule, with the same message; every field InferenceX writes is slurmx's too, with its value.

SLURMX_DIFF_EXAMPLES sets the example count (default 200, the fast suite's share).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from slurmx.results import gate
from tests.helpers.inferencex_results import POINT, Oracle, compare, same

DATA = Path(__file__).resolve().parents[1] / "data" / "aiperf"
EXAMPLES = int(os.environ.get("SLURMX_DIFF_EXAMPLES", "200"))


# ---------------------------------------------------------------- generated artifact sets


def _record(index: int, phase: str, error: bool, rng: st.DrawFn) -> dict[str, Any]:
    start = 1_000_000_000 + index * rng(st.integers(100_000_000, 900_000_000))
    osl = rng(st.integers(1, 400))
    return {
        "metadata": {"benchmark_phase": phase, "request_start_ns": start,
                     "request_end_ns": start + rng(st.integers(50_000_000, 5_000_000_000)), "was_cancelled": False},
        "metrics": {
            "input_sequence_length": {"value": rng(st.integers(1, 20_000)), "unit": "tokens"},
            "output_sequence_length": {"value": osl, "unit": "tokens"},
            "time_to_first_token": {"value": rng(st.floats(1.0, 3000.0)), "unit": "ms"},
            "request_latency": {"value": rng(st.floats(10.0, 60_000.0)), "unit": "ms"},
            "inter_token_latency": {"value": rng(st.floats(1.0, 200.0)), "unit": "ms"},
        },
        "error": {"type": rng(st.sampled_from(["HTTPStatusError", "ReadTimeout"])), "message": "x"} if error else None,
    }  # fmt: skip


AGGREGATES = (
    "full",
    "no-completed",
    "no-error-key",
    "missing",
    "no-request-count",
    "not-object",
    "bad-avg",
    "negative",
)
EXPORTS = ("full", "missing", "empty-object", "no-csv", "empty-csv", "no-engine-metric")


def _export(rng: st.DrawFn) -> dict[str, Any]:
    ranks = rng(st.integers(1, 3))
    series = lambda kind: [  # noqa: E731 - one series per data-parallel rank
        {"endpoint_url": "http://127.0.0.1:8000/metrics", "labels": {"engine": str(r), "model_name": "m"},
         "stats": {"total": float(rng(st.integers(0, 10**6)))} if kind == "counter" else
         {"avg": rng(st.floats(0, 1)), "max": rng(st.floats(0, 1))}}
        for r in range(ranks)
    ]  # fmt: skip
    metrics = {name: {"type": "counter", "series": series("counter")} for name in (
        "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:prefix_cache_hits", "vllm:prefix_cache_queries",
        "vllm:external_prefix_cache_hits", "vllm:external_prefix_cache_queries")}  # fmt: skip
    metrics["vllm:kv_cache_usage_perc"] = {"type": "gauge", "series": series("gauge")}
    if rng(st.booleans()):
        metrics["vllm:prompt_tokens_by_source"] = {"type": "counter", "series": [
            {"labels": {"engine": "0", "source": src}, "stats": {"total": float(rng(st.integers(0, 10**5)))}}
            for src in ("local_compute", "local_cache_hit", "external_kv_transfer")]}  # fmt: skip
    return {"metrics": metrics}


@st.composite
def artifact_set(draw: st.DrawFn) -> dict[str, Any]:
    warmup, warmup_errors = draw(st.integers(0, 12)), draw(st.integers(0, 4))
    good, errors = draw(st.integers(0, 25)), draw(st.integers(0, 8))
    kinds = [("warmup", False)] * warmup + [("warmup", True)] * warmup_errors
    kinds += [("profiling", False)] * good + [("profiling", True)] * errors
    kinds = draw(st.permutations(kinds))
    records = [_record(i, phase, error, draw) for i, (phase, error) in enumerate(kinds)]
    mode = draw(st.sampled_from(AGGREGATES))
    aggregate: Any = {"request_count": {"avg": good, "unit": "requests"},
                      "error_request_count": {"avg": errors, "unit": "requests"},
                      "completed_request_count": {"avg": good + errors, "unit": "requests"},
                      "was_cancelled": draw(st.booleans())}  # fmt: skip
    if mode == "no-completed":
        del aggregate["completed_request_count"]
    elif mode == "no-error-key":
        del aggregate["error_request_count"]
    elif mode == "no-request-count":
        del aggregate["request_count"]
    elif mode == "not-object":
        aggregate = [aggregate]
    elif mode == "bad-avg":
        aggregate[draw(st.sampled_from(["request_count", "error_request_count"]))] = {"avg": "12"}
    elif mode == "negative":
        aggregate["completed_request_count"] = {"avg": -1}
    return {"records": records, "aggregate": None if mode == "missing" else aggregate,
            "export": draw(st.sampled_from(EXPORTS)), "metrics": _export(draw)}  # fmt: skip


def _write(root: Path, case: dict[str, Any]) -> Path:
    shutil.rmtree(root, ignore_errors=True)
    artifacts = root / "aiperf_artifacts"
    artifacts.mkdir(parents=True)
    (artifacts / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in case["records"]))
    if case["aggregate"] is not None:
        (artifacts / "profile_export_aiperf.json").write_text(json.dumps(case["aggregate"]))
    export = case["export"]
    if export != "missing":
        metrics = case["metrics"] if export != "no-engine-metric" else {"metrics": {}}
        (artifacts / "server_metrics_export.json").write_text(json.dumps({} if export == "empty-object" else metrics))
        if export != "no-csv":
            (artifacts / "server_metrics_export.csv").write_text("" if export == "empty-csv" else "metric,value\n")
    return root


@seed(20261207)
@settings(
    max_examples=EXAMPLES, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)  # fmt: skip
@given(case=artifact_set())
def test_generated_artifacts_are_judged_and_aggregated_as_by_inferencex(
    oracle: Oracle, tmp_path: Path, case: dict[str, Any]
) -> None:
    compare(oracle, _write(tmp_path / "case", case))


# ---------------------------------------------------------------- real aiperf artifacts


@pytest.mark.parametrize("sample", ["lmcache-replay", "tier-overflow/none", "tier-overflow/lmcache"])
def test_real_aiperf_artifacts_are_judged_and_aggregated_as_by_inferencex(
    oracle: Oracle, tmp_path: Path, sample: str
) -> None:
    artifacts = tmp_path / "aiperf_artifacts"
    artifacts.mkdir()
    for name in ("profile_export.jsonl", "profile_export_aiperf.json", "server_metrics_export.json",
                 "server_metrics_export.csv"):  # fmt: skip
        shutil.copy(DATA / sample / name, artifacts / name)
    result, theirs = compare(oracle, tmp_path)
    assert "agg" in theirs and theirs["validation"] == [] and gate.judge(result) is None
    assert (
        result.server_metrics.sources
        and same(theirs["agg"]["server_metrics"]["sources"], result.server_metrics.sources) == []
    )


# ---------------------------------------------------------------- disaggregated points (InferenceX's multinode env)


def _worker(num: int, tp: int, ep: int = 1, dp_attn: bool = False, hardware: str | None = None) -> dict[str, Any]:
    return {"num-worker": num, "tp": tp, "ep": ep, "dp-attn": dp_attn, **({"hardware": hardware} if hardware else {})}


MULTINODE = {
    "dep-prefill": (_worker(1, 8, 8, True), _worker(2, 8)),
    "dep-decode": (_worker(2, 4), _worker(1, 8, 8, True)),
    "aggregated": (_worker(2, 8, 8, True), _worker(0, 8, 8, True)),  # decode num-worker 0: co-located
    "heterogeneous": (_worker(1, 4, hardware="h200"), _worker(1, 8, hardware="b300")),
}


@pytest.mark.parametrize("shape", sorted(MULTINODE))
def test_disaggregated_points_are_shaped_as_by_inferencex(oracle: Oracle, tmp_path: Path, shape: str) -> None:
    """tp, ep and dp_attention of a disaggregated point, each side's fields, the GPU count and per-GPU rates."""
    prefill, decode = MULTINODE[shape]
    point = {**POINT, "prefill": prefill, "decode": decode, "disagg": True, "exp-name": f"test_{shape}"}
    artifacts = tmp_path / "aiperf_artifacts"
    artifacts.mkdir()
    for name in ("profile_export.jsonl", "profile_export_aiperf.json", "server_metrics_export.json"):
        shutil.copy(DATA / "lmcache-replay" / name, artifacts / name)
    result, theirs = compare(oracle, tmp_path, point)
    assert "agg" in theirs and result.is_multinode
    assert (result.tp, result.ep, result.dp_attention) == (
        theirs["agg"]["tp"],
        theirs["agg"]["ep"],
        theirs["agg"]["dp_attention"],
    )
