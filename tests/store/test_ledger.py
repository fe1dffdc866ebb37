"""The ledger's records as submit writes them and every later reader (status, the node) reads them."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from slurmx import __version__
from slurmx.errors import UserError
from slurmx.inputs import Inputs, load_inputs
from slurmx.store import ledger
from slurmx.store.state import PointState, read_state, update_state
from slurmx.store.tree import PointDir, ResultsTree, SweepDir
from slurmx.submit.resolved import resolve_points

ROOT = Path(__file__).resolve().parents[2]
KEY = "tiny-fp32-local-vllm-agentic-lmcache"
MASTER = ROOT / "configs" / "local-master.yaml"
CLUSTERS = ROOT / "configs" / "clusters.yaml"


@pytest.fixture(scope="module")
def inputs() -> Inputs:
    return load_inputs([MASTER], CLUSTERS, [KEY])


def _job_recorded_by_the_task(point: PointDir, job_id: str) -> None:
    def started(state: PointState | None) -> PointState:
        assert state is not None
        return state.model_copy(update={"job_id": job_id})

    update_state(point.state_json, started)


def _sweep(tmp_path: Path) -> SweepDir:
    return ResultsTree(tmp_path).sweep(KEY, "s1")


def test_a_new_sweep_records_provenance_and_every_point(inputs: Inputs, tmp_path: Path) -> None:
    points = inputs.key_points(KEY)
    profile = inputs.submittable_profile(points[0])
    before = time.time()
    record = ledger.new_sweep(_sweep(tmp_path), points, [MASTER], CLUSTERS, profile)
    assert (record.slurmx_version, record.config_key, record.sweep_id) == (__version__, KEY, "s1")
    assert before <= record.created_at <= time.time()
    assert record.config_files == {str(MASTER.resolve()): hashlib.sha256(MASTER.read_bytes()).hexdigest()}
    assert record.clusters_file == {str(CLUSTERS.resolve()): hashlib.sha256(CLUSTERS.read_bytes()).hexdigest()}
    assert (record.cluster_label, record.cluster_profile) == ("cluster:local", profile)
    assert record.point_ids == [p.point_id for p in points] and len(record.point_ids) == 8  # four arms x conc 2, 4
    assert record.submissions == []


def test_an_existing_sweep_json_is_read_back_not_replaced(inputs: Inputs, tmp_path: Path) -> None:
    points = inputs.key_points(KEY)
    sweep = _sweep(tmp_path)
    first = ledger.new_sweep(sweep, points, [MASTER], CLUSTERS, inputs.submittable_profile(points[0]))
    first.submissions.append(ledger.Submission(at=1.0, array_job_id="77", sbatch_calls=1))
    ledger.write_sweep(sweep, first)
    again = ledger.new_sweep(sweep, points[:1], [], CLUSTERS, inputs.submittable_profile(points[0]))
    assert again == first == ledger.read_sweep(sweep)


def test_each_queueing_is_the_next_attempt_with_its_submit_time(inputs: Inputs, tmp_path: Path) -> None:
    item = resolve_points(inputs.key_points(KEY)[:1], inputs)[0]
    point = _sweep(tmp_path).point(item.point.point_id)
    before = time.time()
    first = ledger.queue_point(point, item.record("s1"))
    assert (first.attempt, first.stage, first.job_id) == (1, "queued", None)
    assert first.submitted_at is not None and before <= first.submitted_at <= time.time()
    _job_recorded_by_the_task(point, "5_0")
    second = ledger.queue_point(point, item.record("s1"))
    assert (second.attempt, second.stage, second.job_id) == (2, "queued", None)  # a new attempt, no old job id
    assert ledger.read_point(point) == item.record("s1")


def test_the_job_id_from_sbatch_never_overwrites_the_one_the_job_recorded(inputs: Inputs, tmp_path: Path) -> None:
    item = resolve_points(inputs.key_points(KEY)[:1], inputs)[0]
    point = _sweep(tmp_path).point(item.point.point_id)
    ledger.queue_point(point, item.record("s1"))
    ledger.record_job_id(point, "100_0")
    assert (state := read_state(point.state_json)) is not None and state.job_id == "100_0"
    _job_recorded_by_the_task(point, "100_3")
    ledger.record_job_id(point, "100_0")  # sbatch returned after the task had started and recorded itself
    assert (state := read_state(point.state_json)) is not None and state.job_id == "100_3"
    point.state_json.unlink()
    with pytest.raises(AssertionError, match="vanished between queue and sbatch"):
        ledger.record_job_id(point, "100_0")


def test_a_record_of_another_shape_is_one_line_naming_the_file_and_field(inputs: Inputs, tmp_path: Path) -> None:
    points = inputs.key_points(KEY)
    sweep = _sweep(tmp_path)
    ledger.write_sweep(
        sweep, ledger.new_sweep(sweep, points, [MASTER], CLUSTERS, inputs.submittable_profile(points[0]))
    )
    data = json.loads(sweep.sweep_json.read_text())
    data["cluster_profile"]["gpus-per-node"] = 0  # written by alias, as InferenceX spells it
    sweep.sweep_json.write_text(json.dumps(data))
    with pytest.raises(UserError) as caught:
        ledger.read_sweep(sweep)
    assert str(caught.value) == (
        f"{sweep.sweep_json}: not a Sweep of this slurmx (cluster_profile.gpus-per-node: Input should be greater "
        "than 0); resubmit with --force"
    )
    del data["slurmx_version"]  # two errors: the first one in field order is named
    sweep.sweep_json.write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"\(slurmx_version: Field required\); resubmit with --force$"):
        ledger.read_sweep(sweep)


def test_point_json_round_trips_and_an_older_file_with_a_labels_block_still_reads(
    inputs: Inputs, tmp_path: Path
) -> None:
    item = resolve_points(inputs.key_points(KEY)[:1], inputs)[0]
    point = _sweep(tmp_path).point(item.point.point_id)
    ledger.queue_point(point, item.record("s1"))
    written = json.loads(point.point_json.read_text())
    assert "labels" not in written  # the point's own properties are its names now
    assert (written["point"]["point_id"], written["point"]["exp_name"]) == (item.point.point_id, item.point.exp_name)
    assert ledger.read_point(point) == item.record("s1")
    # point.json as slurmx wrote it before the labels went: the copies of the point's names are ignored.
    written["labels"] = {"exp_name": "stale", "parallelism": "TP99", "gpus": 99, "backend": "x", "total_cpu_dram_gb": 1}
    point.point_json.write_text(json.dumps(written))
    back = ledger.read_point(point)
    assert back == item.record("s1") and back.point.parallelism == item.point.parallelism != "TP99"
