"""The stage recorder across a Slurm requeue: the earlier attempt's files kept aside, the new attempt started clean
and the requeue named; and how a signal's end is recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmx.node.recorder import StageRecorder
from slurmx.store.ledger import record_job_id
from slurmx.store.state import PointState, read_state, update_state
from slurmx.store.tree import AIPERF, LOGS, RESULT_JSON, PointDir


@pytest.fixture
def point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PointDir:
    for name in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURMD_NODENAME", "node05")
    p = PointDir(tmp_path / "abc123")
    p.path.mkdir()
    return p


def test_the_first_start_records_node_and_job(point: PointDir) -> None:
    rec = StageRecorder(point)
    rec.started()
    state = read_state(point.state_json)
    assert state is not None
    assert (state.node, state.job_id, state.attempt, state.restarts, state.stage) == ("node05", "77", 1, 0, "preflight")
    assert state.started_at is not None and state.requeues == [] and not rec.ended


def test_a_requeue_keeps_the_earlier_attempts_files_and_starts_clean(
    point: PointDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = StageRecorder(point)
    first.started()
    first.stage("replay")
    (point.path / LOGS).mkdir()
    (point.path / LOGS / "engine.log").write_text("attempt 1\n")
    (point.path / RESULT_JSON).symlink_to(point.path / "missing")  # a dangling link is moved too
    (point.path / "point.json").write_text("{}")  # not an attempt file: stays
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # Slurm requeued the job (node failure)
    second = StageRecorder(point)
    second.started()
    state = read_state(point.state_json)
    assert state is not None
    assert (state.attempt, state.restarts, state.stage, state.ended_by) == (2, 1, "preflight", None)
    assert state.requeues == ["attempt 1 requeued by Slurm (restart 1): stage replay"]
    kept = point.attempt(1)
    assert (kept / LOGS / "engine.log").read_text() == "attempt 1\n" and (kept / RESULT_JSON).is_symlink()
    assert not (point.path / LOGS).exists() and not (point.path / AIPERF).exists() and not (kept / AIPERF).exists()
    assert (point.path / "point.json").exists()
    began = first.state.started_at
    assert began is not None and state.started_at is not None and state.started_at > began  # this attempt's start


def test_a_requeue_names_the_reason_the_attempt_gave(point: PointDir, monkeypatch: pytest.MonkeyPatch) -> None:
    first = StageRecorder(point)
    first.started()
    first.stage("failed", "engine exited with code 1")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    StageRecorder(point).started()
    state = read_state(point.state_json)
    assert state is not None and state.requeues == [
        "attempt 1 requeued by Slurm (restart 2): engine exited with code 1"
    ]
    assert state.reason is None and state.ended_at is None  # the new attempt has not ended


def test_the_same_restart_count_is_no_new_attempt(point: PointDir, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    StageRecorder(point).started()
    StageRecorder(point).started()  # the same attempt's body again (its second point of a group)
    state = read_state(point.state_json)
    assert state is not None and (state.attempt, state.restarts) == (2, 1)


def test_a_signal_end_is_recorded_with_its_name(point: PointDir) -> None:
    rec = StageRecorder(point)
    rec.started()
    rec.ended_by("SIGTERM", "interrupted by SIGTERM")
    state = read_state(point.state_json)
    assert state is not None and (state.stage, state.ended_by, state.reason) == (
        "cancelled",
        "SIGTERM",
        "interrupted by SIGTERM",
    )
    assert rec.ended and state.ended_at is not None


def test_the_body_takes_what_submit_wrote_meanwhile(point: PointDir, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID")  # the body does not know its job id (a local run)
    body = StageRecorder(point)
    body.started()
    record_job_id(point, "12")  # submit records the id sbatch answered, after the body began
    body.stage("replay")
    assert body.state.job_id == "12" and body.state.stage == "replay"
    state = read_state(point.state_json)
    assert state is not None and (state.job_id, state.stage) == ("12", "replay")


def test_a_body_of_another_job_on_the_same_attempt_writes_nothing(point: PointDir) -> None:
    old = StageRecorder(point)
    old.started()  # job 77

    # the same attempt now belongs to job 78 (a resubmit that kept the attempt, as state.json shows it)
    def other_job(current: PointState | None) -> PointState:
        assert current is not None
        return current.model_copy(update={"job_id": "78"})

    update_state(point.state_json, other_job)
    old.stage("failed", "late")
    state = read_state(point.state_json)
    assert state is not None and (state.job_id, state.stage, state.reason) == ("78", "preflight", None)
    assert old.state.stage == "failed"  # the old body still knows how it ended


def test_a_requeue_after_a_signal_starts_an_attempt_not_ended(point: PointDir, monkeypatch: pytest.MonkeyPatch) -> None:
    first = StageRecorder(point)
    first.started()
    first.ended_by("SIGTERM", "interrupted by SIGTERM")  # Slurm's preemption signal, then its requeue
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    StageRecorder(point).started()
    state = read_state(point.state_json)
    assert state is not None and (state.attempt, state.ended_by, state.ended_at, state.stage) == (
        2,
        None,
        None,
        "preflight",
    )
    assert state.requeues == ["attempt 1 requeued by Slurm (restart 1): interrupted by SIGTERM"]
