"""InferenceX's own aggregation cases pass through slurmx (issue 23): each case of
tests/data/inferencex/process_agentic_result_cases.yaml (its upstream test's inputs, as data) runs through
build_result, and what the upstream test asserts of its aggregate holds for the object slurmx writes for
InferenceX (Result.inferencex()). The file's header says how a case reads and what was not ported."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmx.results.aggregate import RunMeta, build_result
from tests.helpers.points import point_from_row

DATA = Path(__file__).resolve().parents[1] / "data" / "inferencex"
CASES = yaml.safe_load((DATA / "process_agentic_result_cases.yaml").read_text())
UPSTREAM = Path("repo-main/utils/agentic/aggregation/test_process_agentic_result.py")
KINDS = {"equal", "approx", "keys", "includes", "absent", "between", "decreasing"}


def _aggregate(tmp: Path, case: dict[str, Any]) -> dict[str, Any]:
    """The case's artifacts written as aiperf and the engine write them, and slurmx's aggregate of them."""
    artifacts = tmp / "aiperf"
    artifacts.mkdir()
    (artifacts / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in case["records"]))
    if case.get("aggregate") is not None:
        (artifacts / "profile_export_aiperf.json").write_text(json.dumps(case["aggregate"]))
    if "server_metrics" in case:
        (artifacts / "server_metrics_export.json").write_text(json.dumps(case["server_metrics"]))
    logs = [tmp / name for name in case.get("engine_logs", {})]
    for log in logs:
        log.write_text(case["engine_logs"][log.name])
    point = point_from_row({**CASES["base_point"], **case.get("point", {})})
    return build_result(point, artifacts, run=RunMeta(sweep_id="s"), engine_logs=logs).inferencex()


def _at(agg: dict[str, Any], path: str) -> Any:
    value: Any = agg
    for key in path.split(".") if path else []:
        assert isinstance(value, dict) and key in value, f"{path}: no {key!r}"
        value = value[key]
    return value


def _approx(agg: dict[str, Any], spec: Any) -> Any:
    """A number, 1 / another field (`inverse_of`), or another field over n (`of`, `over`); `rel` as pytest's."""
    if not isinstance(spec, dict):
        return pytest.approx(spec)
    value = 1 / _at(agg, spec["inverse_of"]) if "inverse_of" in spec else _at(agg, spec["of"]) / spec["over"]
    return pytest.approx(value, rel=spec.get("rel"))


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["upstream"] for c in CASES["cases"]])
def test_inferencexs_own_aggregation_cases_pass_through_slurmx(tmp_path: Path, case: dict[str, Any]) -> None:
    expect = case["expect"]
    assert expect and set(expect) <= KINDS, set(expect) - KINDS
    agg = _aggregate(tmp_path, case)
    for path, value in expect.get("equal", {}).items():
        assert _at(agg, path) == value, path
    for path, spec in expect.get("approx", {}).items():
        assert _at(agg, path) == _approx(agg, spec), path
    for path, keys in expect.get("keys", {}).items():
        assert set(_at(agg, path)) == set(keys), path
    for path, keys in expect.get("includes", {}).items():
        assert set(keys) <= set(_at(agg, path)), path
    for path, keys in expect.get("absent", {}).items():
        assert not set(keys) & set(_at(agg, path)), path
    for path, (low, high) in expect.get("between", {}).items():
        value = _at(agg, path)
        assert (low is None or low < value) and (high is None or value < high), (path, value)
    for path, keys in expect.get("decreasing", {}).items():
        values = [_at(agg, f"{path}.{key}") for key in keys]
        assert all(a > b for a, b in zip(values, values[1:])), (path, values)


def test_every_upstream_test_is_ported_or_says_why_not(fixtures: Path) -> None:
    upstream = set(re.findall(r"^def (test_\w+)\(", (fixtures / UPSTREAM).read_text(), re.MULTILINE))
    ported = {c["upstream"].split("[", 1)[0] for c in CASES["cases"]}
    assert not ported & set(CASES["not_ported"])
    assert ported | set(CASES["not_ported"]) == upstream, upstream ^ (ported | set(CASES["not_ported"]))
    assert set(CASES["left_out"]) <= ported
