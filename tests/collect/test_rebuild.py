"""`slurmx rebuild` on a real sweep ledger (the local key's point.json files) whose points kept the real aiperf
artifacts of tests/data/aiperf/lmcache-replay: the result.json files written with another verdict change,
exactly those, the previous files stay beside them, and a second run changes nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from slurmx.cli import main
from slurmx.collect import collect as col
from slurmx.collect.rebuild import rebuilt
from slurmx.inputs import load_inputs
from slurmx.results.aggregate import write_result
from slurmx.results.schema import Result
from slurmx.store import ledger
from slurmx.store.tree import PointDir, ResultsTree, SweepDir
from slurmx.submit.resolved import resolve_points
from tests.helpers.strict_json import strict

KEY = "tiny-fp32-local-vllm-agentic-lmcache"
SAMPLE = Path(__file__).resolve().parents[1] / "data" / "aiperf" / "lmcache-replay"
ARTIFACTS = (
    "profile_export.jsonl",
    "profile_export_aiperf.json",
    "server_metrics_export.json",
    "server_metrics_export.csv",
)  # what aiperf writes (InferenceX's gate reads both exports)


def _sweep(root: Path) -> SweepDir:
    """What submit writes before sbatch, then each point's aiperf artifacts and its result.json as today's
    code builds it."""
    inputs = load_inputs(None, None, [KEY])
    resolved = resolve_points(inputs.points, inputs)
    sweep = ResultsTree(root).sweep(KEY, ledger.sweep_id_for(KEY, inputs.points))
    ledger.write_sweep(
        sweep, ledger.new_sweep(sweep, inputs.points, inputs.masters.files, inputs.clusters.path, resolved[0].profile)
    )
    for item in resolved:
        point = sweep.point(item.point.point_id)
        ledger.queue_point(point, item.record(sweep.sweep_id))
        point.aiperf.mkdir(parents=True)
        for name in ARTIFACTS:
            shutil.copy(SAMPLE / name, point.aiperf / name)
        stub = Result.model_validate_json(json.dumps(_stub(item.point.point_id, sweep.sweep_id)))
        write_result(point.result_json, rebuilt(point, stub))
    return sweep


def _stub(point_id: str, sweep_id: str) -> dict[str, object]:
    """The least result a rebuild starts from: the run's identity only."""
    return {
        "hw": "x", "conc": 1, "image": "x", "model": "x", "infmax_model_prefix": "x", "framework": "vllm",
        "precision": "x", "num_gpus": 1, "tp": 1, "ep": 1, "dp_attention": "false", "kv_offloading": "none",
        "num_requests_total": 0, "num_requests_successful": 0,
        "slurmx": {"point_id": point_id, "config_key": KEY, "exp_name": "x", "sweep_id": sweep_id,
                   "started_at": 1796056640.0, "ended_at": 1796056661.0},
    }  # fmt: skip


def _edit(point: PointDir, edit: dict[str, object]) -> None:
    data = json.loads(point.result_json.read_text())
    for dotted, value in edit.items():
        *parents, leaf = dotted.split(".")
        node = data
        for p in parents:
            node = node[p]
        node[leaf] = value
    point.result_json.write_text(json.dumps(data))


def _rebuild(capsys: pytest.CaptureFixture[str], root: Path, *argv: str) -> dict[str, dict[str, object]]:
    assert main(["rebuild", "--results", str(root), "--json", *argv]) == 0
    out = json.loads(capsys.readouterr().out)
    return {Path(p["path"]).parent.name: p for p in out["points"]}


def test_rebuild_changes_exactly_the_points_whose_verdict_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "results"
    sweep = _sweep(root)
    points = sorted(sweep.points(), key=lambda p: p.point_id)
    assert len(points) >= 3
    first = {p.point_id: p.result_json.read_text() for p in points}
    # an old gate refused a point today's code accepts; an old aggregation passed a point whose kept records
    # hold failed requests (5 of 17: today's gate refuses it)
    refused, passed, *same = points
    _edit(refused, {"slurmx.invalid_reason": "request error rate 12.0% (12/100) is over the threshold 10%"})
    records = (passed.aiperf / "profile_export.jsonl").read_text().splitlines()
    failed = [{**json.loads(line), "error": {"type": "HTTPStatusError", "code": 500}} for line in records[:5]]
    (passed.aiperf / "profile_export.jsonl").write_text("\n".join([*records, *map(json.dumps, failed)]) + "\n")
    aggregate = json.loads((passed.aiperf / "profile_export_aiperf.json").read_text())
    aggregate["error_request_count"] = {"unit": "requests", "avg": 5.0}  # aiperf's own count of those failures
    (passed.aiperf / "profile_export_aiperf.json").write_text(json.dumps(aggregate))
    passed_data = json.loads(passed.result_json.read_text())
    assert col.collect([sweep]).rows
    # the file states the old verdict (collect re-judges the figures a file records with today's gate; only a
    # rebuild recomputes the figures from the kept artifacts)
    assert json.loads(refused.result_json.read_text())["slurmx"]["invalid_reason"].startswith("request error rate")

    dry = _rebuild(capsys, root, KEY, "--dry-run")
    assert {k for k, v in dry.items() if v["status"] == "changed"} == {refused.point_id, passed.point_id}
    assert not list(refused.path.glob("result.json.*.prev"))  # a dry run writes nothing

    outcome = _rebuild(capsys, root, KEY)
    assert {k for k, v in outcome.items() if v["status"] == "changed"} == {refused.point_id, passed.point_id}
    assert outcome[refused.point_id]["old_valid"] is False and outcome[refused.point_id]["new_valid"] is True
    assert outcome[passed.point_id]["old_valid"] is True and outcome[passed.point_id]["new_valid"] is False
    assert "request error rate" in str(outcome[passed.point_id]["new_reason"])
    assert all(outcome[p.point_id]["status"] == "unchanged" for p in same)
    assert refused.result_json.read_text() == first[refused.point_id]  # today's code, as it first built it
    assert json.loads(refused.result_json.read_text())["slurmx"]["invalid_reason"] is None
    (kept,) = passed.path.glob("result.json.*.prev")
    assert json.loads(kept.read_text()) == passed_data  # the previous file, whole, beside the new one
    after = {r.point_id: r for r in col.collect([sweep]).rows}
    assert after[refused.point_id].valid and not after[passed.point_id].valid
    assert len(after) == len(points)  # .prev files are not results
    summary = json.loads(sweep.summary_json.read_text())
    assert {r["point_id"]: r["valid"] for r in summary["rows"]} == {k: v.valid for k, v in after.items()}

    again = _rebuild(capsys, root, KEY)
    assert {v["status"] for v in again.values()} == {"unchanged"}
    assert main(["rebuild", "--results", str(root), KEY]) == 0
    assert "changed 0 of" in capsys.readouterr().out and len(list(passed.path.glob("result.json.*.prev"))) == 1


def test_rebuild_one_point_and_a_point_without_artifacts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "results"
    sweep = _sweep(root)
    one, other, *_ = sorted(sweep.points(), key=lambda p: p.point_id)
    _edit(one, {"slurmx.invalid_reason": "old reason"})
    _edit(other, {"slurmx.invalid_reason": "old reason"})
    shutil.rmtree(other.aiperf)
    assert set(_rebuild(capsys, root, one.point_id)) == {one.point_id}  # a POINT names that point only
    skipped = _rebuild(capsys, root, other.point_id)[other.point_id]
    assert skipped["status"] == "skipped" and "profile_export" in str(skipped["why"])
    assert json.loads(other.result_json.read_text())["slurmx"]["invalid_reason"] == "old reason"  # left as it was
    assert main(["rebuild", "--results", str(root), "nosuchkey"]) == 2


def test_a_result_that_never_recorded_its_threshold_is_rebuilt_with_the_recipes(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path / "results")
    point = sorted(sweep.points(), key=lambda p: p.point_id)[0]
    record = json.loads(point.point_json.read_text())
    record["serving"]["replay"]["failed-request-threshold"] = 0.37  # the recipe the node gated with
    point.point_json.write_text(json.dumps(record))
    old = Result.model_validate_json(json.dumps(_stub(point.point_id, sweep.sweep_id)))  # no threshold recorded
    assert old.slurmx is not None and "failed_request_threshold" not in old.slurmx.model_fields_set
    new = rebuilt(point, old)
    assert new.slurmx is not None and new.slurmx.failed_request_threshold == 0.37
    recorded = old.model_copy(deep=True)
    assert recorded.slurmx is not None
    recorded.slurmx.failed_request_threshold = 0.2  # a threshold the file recorded wins
    built = rebuilt(point, recorded)
    assert built.slurmx is not None and built.slurmx.failed_request_threshold == 0.2


def test_a_rebuild_certifies_by_the_rule_the_result_recorded(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path / "results")
    point = sorted(sweep.points(), key=lambda p: p.point_id)[0]
    old = Result.model_validate_json(json.dumps(_stub(point.point_id, sweep.sweep_id)))
    default = rebuilt(point, old)  # written before certification: the default rule
    assert default.slurmx is not None and default.slurmx.certification is not None
    assert (default.slurmx.certification.method, default.slurmx.certification.confidence) == ("order-statistics", 0.95)
    recorded = default.model_copy(deep=True)
    assert recorded.slurmx is not None and recorded.slurmx.certification is not None
    recorded.slurmx.certification.method, recorded.slurmx.certification.confidence = "loadgen", 0.99
    again = rebuilt(point, recorded)
    assert again.slurmx is not None and again.slurmx.certification is not None
    cert = again.slurmx.certification
    assert (cert.method, cert.confidence, cert.rel_width) == ("loadgen", 0.99, None)
    # LoadGen's p90 floor is 64 queries; the sample's 12 fall short
    assert cert.metrics["ttft"]["p90"].need == 64 and not cert.metrics["ttft"]["p90"].certified


def test_a_point_replayed_in_rounds_rebuilds_from_every_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--until-certified` kept aiperf/round-<k>/: the rebuild pools them again and keeps what ended the rounds
    (the node's decision, which no artifact holds)."""
    root = tmp_path / "results"
    sweep = _sweep(root)
    point = sorted(sweep.points(), key=lambda p: p.point_id)[0]
    second = SAMPLE.parent / "tier-overflow" / "none"
    point.aiperf_round(1).mkdir()
    for name in ARTIFACTS:
        (point.aiperf / name).rename(point.aiperf_round(1) / name)
    shutil.copytree(second, point.aiperf_round(2), ignore=shutil.ignore_patterns("*.txt", "*.log", "trace.jsonl"))
    stub = _stub(point.point_id, sweep.sweep_id)
    stub["slurmx"] = {**stub["slurmx"], "stopped_by": "certified"}  # type: ignore[dict-item]
    write_result(point.result_json, Result.model_validate_json(json.dumps(stub)))
    outcome = _rebuild(capsys, root, point.point_id)[point.point_id]
    assert outcome["status"] == "changed"
    data = json.loads(point.result_json.read_text())
    records = [
        json.loads(line)
        for source in (SAMPLE, second)
        for line in (source / "profile_export.jsonl").read_text().splitlines()
    ]
    profiled = [r for r in records if r["metadata"]["benchmark_phase"] == "profiling" and not r.get("error")]
    assert data["num_requests_successful"] == len(profiled) == 36
    assert (data["slurmx"]["rounds"], data["slurmx"]["stopped_by"]) == (2, "certified")
    assert data["slurmx"]["certification"]["metrics"]["ttft"]["p90"]["count"] == 36
    assert _rebuild(capsys, root, point.point_id)[point.point_id]["status"] == "unchanged"


def test_rebuild_json_is_json_when_an_old_file_holds_infinity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An older slurmx wrote a headline that is not finite as `Infinity` (Python's json): the outcome printed names it
    null and parses with a strict parser; the rebuilt headline is today's figure."""
    root = tmp_path / "results"
    sweep = _sweep(root)
    point = sorted(sweep.points(), key=lambda p: p.point_id)[0]
    today = json.loads(point.result_json.read_text())["request_metrics"]["latency"]["e2e_norm_intvty"]["p90"]
    _edit(point, {"request_metrics.latency.e2e_norm_intvty.p90": float("inf")})
    assert "Infinity" in point.result_json.read_text()
    capsys.readouterr()
    assert main(["rebuild", "--results", str(root), "--json", "--dry-run", point.point_id]) == 0
    (outcome,) = strict(capsys.readouterr().out)["points"]
    assert outcome["status"] == "changed"
    assert (outcome["old_headline"], outcome["new_headline"]) == (None, today)
