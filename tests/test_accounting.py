"""Accounting rows as the local Slurm 22.05 printed them (tests/data/sacct, captured with
`sacct -n -P -X --format JobID,State,NodeList,Elapsed,ExitCode,Reason`) to the states status reads."""

from __future__ import annotations

from pathlib import Path

from slurmx.slurm.accounting import parse_sacct, task_of
from slurmx.status import label
from slurmx.store.state import PointState

DATA = Path(__file__).parent / "data" / "sacct"


def test_an_array_cancelled_with_tasks_pending_speaks_for_them_by_its_bare_id() -> None:
    # Tasks 2 and 3 of array 317 never started; cancelling the array left a row '317' with no range.
    jobs = parse_sacct((DATA / "cancelled-pending-array.txt").read_text())
    for task in ("317_2", "317_3"):
        job = task_of(jobs, task)
        assert job is not None and (job.job_id, job.state, job.active) == (task, "CANCELLED", False)
    assert task_of(jobs, "317_0") == jobs["317_0"] and jobs["317_0"].state == "FAILED"
    assert task_of(jobs, "317_1") is not None and jobs["317_1"].node == "node02"
    # Another array's tasks are not covered by it.
    assert task_of(jobs, "318_2") is None and task_of(jobs, "312_5") is None


def test_a_cancelled_pending_range_expands_to_its_tasks() -> None:
    jobs = parse_sacct((DATA / "cancelled-pending-range.txt").read_text())
    assert {j: jobs[j].state for j in ("169_0", "169_1", "169_2", "169_3")} == dict.fromkeys(
        ("169_0", "169_1", "169_2", "169_3"), "CANCELLED"
    )
    assert jobs["169_2"].node is None and jobs["169_0"].node == "node01"


# A throttled array (sbatch --array=0-7%2) as sacct -X prints it while tasks wait for the throttle: the pending
# tasks share one row, their range and the throttle after '%'.
THROTTLED = """\
12_0|COMPLETED|node01|00:00:09|0:0|None
12_1|RUNNING|node02|00:00:04|0:0|None
12_[2-4,7%2]|PENDING|None assigned|00:00:00|0:0|JobArrayTaskLimit
13_[2-4%2]|PENDING|None assigned|00:00:00|0:0|JobArrayTaskLimit
14_[1,10-12,20%3]|PENDING|None assigned|00:00:00|0:0|JobArrayTaskLimit
"""


def test_throttled_ranges_expand_to_their_tasks_and_read_pending_in_status() -> None:
    jobs = parse_sacct(THROTTLED)
    assert sorted(j for j in jobs if j.startswith("12_")) == ["12_0", "12_1", "12_2", "12_3", "12_4", "12_7"]
    assert sorted(j for j in jobs if j.startswith("13_")) == ["13_2", "13_3", "13_4"]
    assert sorted(j for j in jobs if j.startswith("14_")) == ["14_1", "14_10", "14_11", "14_12", "14_20"]
    for task in ("12_2", "12_7", "13_4", "14_10", "14_20"):
        info = task_of(jobs, task)
        assert info is not None and (info.job_id, info.state, info.node, info.reason) == (
            task, "PENDING", None, "JobArrayTaskLimit"
        )  # fmt: skip
        assert label(PointState(point_id="p", stage="queued", job_id=task), info) == ("pending", "JobArrayTaskLimit")
    # what the range leaves out is not a task of it: 12_5, 12_6 and 12_8 are not in the array's pending row
    assert [task_of(jobs, t) for t in ("12_5", "12_6", "12_8", "13_1", "13_5", "14_2", "14_13")] == [None] * 7


def test_a_task_split_off_a_throttled_range_reads_its_own_row() -> None:
    # The throttle let task 2 start: its own row follows the range's (sacct prints the range as what is left).
    jobs = parse_sacct(THROTTLED + "12_2|RUNNING|node01|00:00:01|0:0|None\n")
    assert (jobs["12_2"].state, jobs["12_2"].node) == ("RUNNING", "node01")
    # and before it, as sacct may order them
    jobs = parse_sacct("12_2|RUNNING|node01|00:00:01|0:0|None\n" + THROTTLED)
    assert (jobs["12_2"].state, jobs["12_2"].node) == ("RUNNING", "node01")
    assert jobs["12_3"].state == "PENDING"
