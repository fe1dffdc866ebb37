"""How status words a point: the body's record against Slurm's, on states as sacct prints them."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmx.slurm.accounting import JobInfo, parse_sacct, task_of
from slurmx.status import label, node_of
from slurmx.store.state import PointState

DATA = Path(__file__).parent / "data" / "sacct"


def job(state: str, reason: str | None = None) -> JobInfo:
    return JobInfo("7_1", state, "node01", "00:01:00", "0:0", reason)


def at(stage: str, reason: str | None = None, job_id: str | None = "7_1") -> PointState:
    return PointState(point_id="p", stage=stage, job_id=job_id, reason=reason)  # type: ignore[arg-type]  # a Stage literal


@pytest.mark.parametrize(
    ("stage", "slurm", "expected"),
    [
        ("replay", "RUNNING", "running"),
        ("queued", "PENDING", "pending"),
        ("done", "RUNNING", "completed"),  # a server group's point ends while its job runs on
        ("done", "CANCELLED", "completed"),
        ("failed", "RUNNING", "failed"),
        ("failed", "CANCELLED", "failed"),  # failed first, then its group's job was cancelled
        ("cancelled", "FAILED", "cancelled"),  # torn down on scancel's signal, then exited non-zero
        ("cancelled", "TIMEOUT", "timeout"),  # the time limit's signal: Slurm's word is the better one
        ("failed", "OUT_OF_MEMORY", "out of memory"),
        ("replay", "NODE_FAIL", "node failure"),
        ("replay", "COMPLETED", "failed"),  # the job ended without the body recording an end
        ("queued", "CANCELLED", "cancelled"),
    ],
)
def test_the_body_record_and_slurm_state_give_one_word(stage: str, slurm: str, expected: str) -> None:
    word, _ = label(at(stage, "engine exited with code 1"), job(slurm, "Resources"))
    assert word == expected


def test_reasons_say_where_they_come_from() -> None:
    assert label(at("queued"), job("PENDING", "Resources")) == ("pending", "Resources")
    assert label(at("replay"), job("COMPLETED"))[1] == "job ended while the point was at stage replay"
    assert label(at("queued"), job("CANCELLED"))[1] == "the job ended (CANCELLED) before its body started"
    assert label(at("failed", "engine exited with code 1"), job("CANCELLED")) == ("failed", "engine exited with code 1")
    assert label(None, None) == ("not submitted", None)
    assert label(at("queued", job_id=None), None) == ("unsubmitted", None)
    assert label(at("queued"), None) == ("unknown", "job 7_1 is not known to Slurm")


def test_tasks_of_an_array_cancelled_while_pending_read_cancelled() -> None:
    # The real rows of the last CI failure: tasks 2 and 3 never started and had no row of their own.
    jobs = parse_sacct((DATA / "cancelled-pending-array.txt").read_text())
    task = task_of(jobs, "317_2")
    assert label(at("queued", job_id="317_2"), task)[0] == "cancelled"


def test_a_requeued_row_does_not_name_the_node_of_the_new_attempt() -> None:
    moved = PointState(point_id="p", stage="replay", job_id="7_1", node="node02", attempt=2)
    assert node_of(moved, job("REQUEUED")) == "node02"  # the row still names node01, the old attempt's
    assert node_of(moved, job("RUNNING")) == "node01"  # accounting's node list, once it has the restart
    assert node_of(moved, None) == "node02"
