"""Accounting rows as the local Slurm 22.05 printed them (tests/data/sacct, captured with
`sacct -n -P -X --format JobID,State,NodeList,Elapsed,ExitCode,Reason`) to the states status reads."""

from __future__ import annotations

from pathlib import Path

from slurmx.slurm.accounting import parse_sacct, task_of

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
