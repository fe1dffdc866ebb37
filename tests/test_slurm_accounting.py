"""Job states from the real output of the local cluster's sacct and squeue (tests/data/slurm, made by
tests/helpers/slurm_captures.py; tests/slurm/test_slurm_captures.py keeps them current): one throttled array,
`--array=0-5,8,10-11%2`, task 0 succeeded, task 1 exited 3, tasks 2 and 3 running, 4, 5, 8, 10 and 11 pending on
the throttle, captured before and after scancel. The figures below are read off the capture files by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmx.slurm.accounting import (
    JobInfo,
    parse_sacct,
    parse_squeue,
    query_jobs,
    query_sacct,
    query_squeue,
    still_active,
    task_of,
)
from slurmx.slurm.commands import SlurmUnavailable
from tests.helpers.slurm_captures import DATA
from tests.helpers.slurm_replay import calls, captured_job, install

SACCT_DATA = Path(__file__).parent / "data" / "sacct"
JOB = captured_job("sacct-throttled")  # the array's id in every capture of its life
PENDING = ("4", "5", "8", "10", "11")


def read(name: str) -> str:
    return (DATA / f"{name}.out").read_text()


def test_sacct_of_a_throttled_array_reads_each_task_with_its_own_figures() -> None:
    jobs = parse_sacct(read("sacct-throttled"))
    assert sorted(jobs, key=lambda j: int(j.split("_")[1])) == [f"{JOB}_{t}" for t in ("0", "1", "2", "3", *PENDING)]
    assert jobs[f"{JOB}_0"] == JobInfo(f"{JOB}_0", "COMPLETED", "node01", "00:00:00", "0:0", None)
    assert jobs[f"{JOB}_1"] == JobInfo(f"{JOB}_1", "FAILED", "node01", "00:00:00", "3:0", None)
    assert jobs[f"{JOB}_2"] == JobInfo(f"{JOB}_2", "RUNNING", "node01", "00:00:04", "0:0", "JobArrayTaskLimit")
    for task in PENDING:  # the one row '<id>_[4-5,8,10-11%2]' speaks for each of them
        assert jobs[f"{JOB}_{task}"] == JobInfo(
            f"{JOB}_{task}", "PENDING", None, "00:00:00", "0:0", "JobArrayTaskLimit"
        )
    assert [jobs[f"{JOB}_{t}"].active for t in ("0", "1", "2", "3", "4")] == [False, False, True, True, True]
    # 6, 7 and 9 are not tasks of this array, nor are other arrays' tasks
    assert [task_of(jobs, f"{JOB}_{t}") for t in ("6", "7", "9", "12")] == [None] * 4
    assert task_of(jobs, f"{int(JOB) + 1}_0") is None


def test_a_cancelled_array_reads_cancelled_without_the_by_uid() -> None:
    jobs = parse_sacct(read("sacct-cancelled"))
    # 'CANCELLED by 0': the state word alone, for every task the range and the started rows name
    assert {j: info.state for j, info in jobs.items()} == {
        f"{JOB}_0": "COMPLETED", f"{JOB}_1": "FAILED", f"{JOB}_2": "CANCELLED", f"{JOB}_3": "CANCELLED",
        **{f"{JOB}_{t}": "CANCELLED" for t in PENDING},
    }  # fmt: skip
    assert not any(info.active for info in jobs.values())
    assert jobs[f"{JOB}_3"].elapsed == "00:00:04" and jobs[f"{JOB}_8"].node is None


def test_rows_sacct_prints_without_a_figure_read_as_none() -> None:
    # Slurm's words for "nothing here" in the columns slurmx reads: 'None assigned' (NodeList of a pending job,
    # in the capture), 'None' (Reason, in the capture), '(null)' and 'Unknown' (what sacct prints for an unset
    # string and an unset time), and an empty column.
    out = "5|PENDING|(null)|Unknown||None assigned\n6||None|(null)|Unknown|\n"
    jobs = parse_sacct(out)
    assert jobs["5"] == JobInfo("5", "PENDING", None, None, None, None)
    assert jobs["6"] == JobInfo("6", "UNKNOWN", None, None, None, None)  # no state word at all
    # a value that only looks like one is kept as printed
    assert parse_sacct("7|FAILED|none|UNKNOWN|1:0|NonZeroExitCode\n")["7"] == JobInfo(
        "7", "FAILED", "none", "UNKNOWN", "1:0", "NonZeroExitCode"
    )


def test_lines_that_are_not_rows_are_skipped_not_the_rest() -> None:
    # a line of fewer than six fields (a warning sacct printed to stdout, a blank line) ends nothing
    out = "sacct: warning: something\n\n" + read("sacct-task") + "9|RUNNING|node02|00:01:00|0:0|None|extra\n"
    jobs = parse_sacct(out)
    assert set(jobs) == {f"{JOB}_2", "9"}
    assert jobs["9"] == JobInfo("9", "RUNNING", "node02", "00:01:00", "0:0", None)


def test_squeue_of_the_same_array_per_task_and_as_ranges_reads_the_same_states() -> None:
    per_task = parse_squeue(read("squeue-throttled"))
    ranges = parse_squeue(read("squeue-throttled-ranges"))  # squeue without -r prints '<id>_[4-5,8,10-11%2]'
    assert per_task == ranges
    assert sorted(per_task) == sorted(f"{JOB}_{t}" for t in ("2", "3", *PENDING))
    # squeue has no exit code; its elapsed time is M:SS and a pending task's node list is empty
    assert per_task[f"{JOB}_2"] == JobInfo(f"{JOB}_2", "RUNNING", "node01", "0:04", None, None)
    assert per_task[f"{JOB}_10"] == JobInfo(f"{JOB}_10", "PENDING", None, "0:00", None, "JobArrayTaskLimit")
    assert parse_squeue(read("squeue-gone")) == {}
    assert parse_squeue("not|a|row\n" + read("squeue-throttled")) == per_task  # a short line ends nothing


@pytest.mark.parametrize(
    ("job", "point_ended", "expected"),
    [
        (JobInfo("1_0", "RUNNING", "node01", None, None, None), True, True),  # e.g. waiting out its time limit
        (JobInfo("1_0", "PENDING", None, None, None, None), False, True),
        (JobInfo("1_0", "COMPLETED", "node01", None, None, None), False, False),  # Slurm says it ended
        (None, False, True),  # not in accounting yet, its point not ended: sbatch was a moment ago
        (None, True, False),
    ],
)
def test_still_active(job: JobInfo | None, point_ended: bool, expected: bool) -> None:
    assert still_active(job, point_ended) is expected


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir


def test_query_jobs_reads_sacct_in_one_call(standin: Path) -> None:
    install(standin, {("sacct", JOB): "sacct-throttled"})
    query = query_jobs([f"{JOB}_2", f"{JOB}_10", f"{JOB}_0"])
    assert (query.source, query.calls) == ("sacct", 1)
    assert (query.jobs[f"{JOB}_2"].state, query.jobs[f"{JOB}_10"].state) == ("RUNNING", "PENDING")
    assert calls(standin) == [
        ["sacct", "-n", "-P", "-X", "--format", "JobID,State,NodeList,Elapsed,ExitCode,Reason", "-j", JOB]
    ]
    assert query_jobs([]).source == "none" and query_jobs([]).calls == 0 and query_jobs([]).jobs == {}
    assert len(calls(standin)) == 1  # no ids, no call


def test_a_task_the_array_row_covers_is_answered_by_it(standin: Path) -> None:
    # An array cancelled while tasks 2 and 3 were pending left one bare row '317|CANCELLED by 0' (22.05,
    # tests/data/sacct): it answers for them, and no task is asked of the queue.
    install(
        standin,
        {("sacct", "317"): "cancelled-pending-array"},
        sacct_files=(SACCT_DATA / "cancelled-pending-array.txt",),
    )
    query = query_jobs(["317_2", "317_0", "317_3"])
    assert (query.source, query.calls) == ("sacct", 1)
    assert (query.jobs["317_2"].job_id, query.jobs["317_2"].state, query.jobs["317_3"].state) == (
        "317_2",
        "CANCELLED",
        "CANCELLED",
    )
    assert query.jobs["317_0"].state == "FAILED"


def test_with_accounting_down_the_queue_answers(standin: Path) -> None:
    # slurmdbd stopped (the capture's sacct exits 1: 'Problem talking to the database'); a fast test cannot
    # stop the real one, so the stand-in replays it. squeue answers for the tasks still queued.
    install(standin, {("sacct", JOB): "sacct-accounting-down", ("squeue", JOB): "squeue-throttled"})
    query = query_jobs([f"{JOB}_2", f"{JOB}_4"])
    assert (query.source, query.calls) == ("squeue", 1)
    assert query.jobs[f"{JOB}_2"] == JobInfo(f"{JOB}_2", "RUNNING", "node01", "0:04", None, None)
    assert query.jobs[f"{JOB}_4"].reason == "JobArrayTaskLimit"
    assert [argv[0] for argv in calls(standin)] == ["sacct", "squeue"]
    assert calls(standin)[1] == ["squeue", "-h", "-r", "-o", "%i|%T|%N|%M|%r", "-j", JOB]
    with pytest.raises(SlurmUnavailable, match=r"^sacct -n failed: sacct: error: Problem talking to the database"):
        query_sacct([JOB])


def test_jobs_accounting_has_not_recorded_yet_are_asked_of_the_queue(standin: Path) -> None:
    # Accounting lags sbatch by a moment, which cannot be brought about on demand: the stand-in answers the
    # throttled array with what sacct really printed for a job it had no record of (nothing), and squeue with
    # the queue's rows of it. Array 317, which accounting knows, is not asked of the queue.
    install(
        standin,
        {
            ("sacct", JOB): "sacct-absent",
            ("sacct", "317"): "cancelled-pending-array",
            ("squeue", JOB): "squeue-throttled",
        },
        sacct_files=(SACCT_DATA / "cancelled-pending-array.txt",),
    )
    query = query_jobs([f"{JOB}_2", "317_1", f"{JOB}_11"])
    assert (query.source, query.calls) == ("sacct+squeue", 2)
    assert [argv[-1] for argv in calls(standin)] == [",".join(sorted(["317", JOB])), JOB]
    assert query.jobs[f"{JOB}_2"] == JobInfo(f"{JOB}_2", "RUNNING", "node01", "0:04", None, None)  # squeue's row
    assert query.jobs[f"{JOB}_11"].state == "PENDING"
    assert query.jobs["317_1"] == JobInfo("317_1", "CANCELLED", "node02", "00:00:02", "0:0", None)  # sacct's row


def test_where_accounting_and_the_queue_both_know_a_task_accounting_wins(standin: Path) -> None:
    # Task 2 is in accounting (sacct-task, asked as '<id>_2' would be answered by the array) but task 4 is
    # not: the queue is asked, and its row of task 2 ('0:04', no exit code) does not replace sacct's.
    install(standin, {("sacct", JOB): "sacct-task", ("squeue", JOB): "squeue-throttled"})
    query = query_jobs([f"{JOB}_2", f"{JOB}_4"])
    assert (query.source, query.calls) == ("sacct+squeue", 2)
    assert query.jobs[f"{JOB}_2"] == JobInfo(f"{JOB}_2", "RUNNING", "node01", "00:00:04", "0:0", "JobArrayTaskLimit")
    assert query.jobs[f"{JOB}_4"] == JobInfo(f"{JOB}_4", "PENDING", None, "0:00", None, "JobArrayTaskLimit")


def test_squeue_of_jobs_that_left_the_queue_is_empty_not_an_error(standin: Path) -> None:
    # The real squeue exits 1 ('Invalid job id specified') when no id it is asked is known any more.
    install(
        standin,
        {
            ("squeue", "4000000"): "squeue-absent",
            ("sacct", "4000000"): "sacct-absent",
            ("squeue", JOB): "squeue-throttled",
        },
    )
    assert query_squeue(["4000000"]) == {}
    assert query_sacct(["4000000"]) == {}
    # several jobs in one call, one of them gone: the others' rows still come back
    assert sorted(query_squeue([JOB, "4000000"])) == sorted(f"{JOB}_{t}" for t in ("2", "3", *PENDING))
    assert calls(standin)[-1][-2:] == ["-j", f"{JOB},4000000"]
