"""The job body's stage records against a newer attempt: a body still tearing down after a cancel must
not end the attempt that `submit --only-failed` queued meanwhile."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmx.node.recorder import StageRecorder
from slurmx.store.ledger import record_job_id
from slurmx.store.state import PointState, read_state, update_state
from slurmx.store.tree import PointDir


def _queued_again(point: PointDir, job_id: str | None) -> None:
    """What submit writes for the next attempt: a fresh queued state, then the new job's id after sbatch."""
    update_state(
        point.state_json,
        lambda s: PointState(point_id=point.point_id, attempt=(s.attempt + 1 if s else 1)).advance("queued"),
    )
    if job_id:
        record_job_id(point, job_id)


@pytest.mark.parametrize("new_job", [None, "8_0"])  # before and after sbatch answered
def test_an_old_body_cannot_end_the_next_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_job: str | None
) -> None:
    point = PointDir(tmp_path / "abc123")
    point.path.mkdir()
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    old = StageRecorder(point)
    old.started()
    old.stage("replay")
    _queued_again(point, new_job)
    old.ended_by("SIGTERM", "interrupted by SIGTERM")  # the old job's teardown ends after the rerun was queued
    state = read_state(point.state_json)
    assert state is not None and (state.attempt, state.stage, state.job_id) == (2, "queued", new_job)
    assert old.state.stage == "cancelled" and old.ended  # the old body still knows how it ended


def test_the_body_of_the_current_attempt_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    point = PointDir(tmp_path / "abc123")
    point.path.mkdir()
    _queued_again(point, None)
    monkeypatch.setenv("SLURM_JOB_ID", "9")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    body = StageRecorder(point)
    body.started()  # before submit recorded the id: the body records its own
    record_job_id(point, "9")
    body.stage("done")
    state = read_state(point.state_json)
    assert state is not None and (state.attempt, state.stage, state.job_id) == (1, "done", "9")
