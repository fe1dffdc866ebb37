"""Job states for many jobs in one call: sacct when accounting answers, squeue otherwise."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from slurmx.slurm.commands import SlurmUnavailable, run_slurm

NODE_FAILURES = frozenset({"NODE_FAIL", "BOOT_FAIL"})  # the node, not the job, ended it
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "CONFIGURING", "COMPLETING"})


@dataclass(frozen=True)
class JobInfo:
    job_id: str  # "<array>_<task>" or "<job>"
    state: str  # Slurm's base state word: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    node: str | None
    elapsed: str | None
    exit_code: str | None
    reason: str | None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


def still_active(job: JobInfo | None, point_ended: bool) -> bool:
    """Whether a point's job may still run: active in Slurm (even after its point ended, e.g. waiting out
    a time limit), or not yet known to accounting while its point has not ended."""
    return job.active if job is not None else not point_ended


@dataclass
class Query:
    """Result of one batched query, with how it was answered (for status and benchmarks)."""

    jobs: dict[str, JobInfo]
    source: str  # "sacct" or "squeue"
    calls: int


def _expand_ids(job_id: str) -> list[str]:
    """'12_[2-4,7%2]' -> ['12_2', '12_3', '12_4', '12_7']; plain ids unchanged."""
    match = re.fullmatch(r"(\d+)_\[([^\]]+)\]", job_id)
    if not match:
        return [job_id]
    base, spec = match.group(1), match.group(2).split("%")[0]
    ids: list[str] = []
    for part in spec.split(","):
        if "-" in part:
            low, high = part.split("-")
            ids.extend(f"{base}_{i}" for i in range(int(low), int(high) + 1))
        elif part:
            ids.append(f"{base}_{part}")
    return ids


def _none(value: str) -> str | None:
    return None if value in ("", "None", "None assigned", "(null)", "Unknown") else value


SACCT_FIELDS = "JobID,State,NodeList,Elapsed,ExitCode,Reason"


def parse_sacct(out: str) -> dict[str, JobInfo]:
    """`sacct -n -P -X --format SACCT_FIELDS` lines to job states, one per job id and array task."""
    jobs: dict[str, JobInfo] = {}
    ranged: dict[str, JobInfo] = {}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) < 6:
            continue
        raw_id, state, node, elapsed, exit_code, reason = parts[:6]
        # A task's own row wins over the array's '<id>_[a-b]' row, which still spans started tasks.
        target = ranged if "[" in raw_id else jobs
        for job_id in _expand_ids(raw_id):
            target[job_id] = JobInfo(
                job_id=job_id,
                state=state.split()[0] if state else "UNKNOWN",
                node=_none(node),
                elapsed=_none(elapsed),
                exit_code=_none(exit_code),
                reason=_none(reason),
            )
    return {**ranged, **jobs}


def task_of(jobs: dict[str, JobInfo], job_id: str) -> JobInfo | None:
    """A job's or an array task's state. An array cancelled while tasks were pending can lose its range in
    accounting ('317|CANCELLED by 0', seen on 22.05): that bare row speaks for every task never split off."""
    job = jobs.get(job_id)
    base, _, task = job_id.partition("_")
    if job is None and task and base in jobs:
        return replace(jobs[base], job_id=job_id)
    return job


def sacct_argv(job_ids: list[str]) -> list[str]:
    return ["sacct", "-n", "-P", "-X", "--format", SACCT_FIELDS, "-j", ",".join(job_ids)]


SQUEUE_FORMAT = "%i|%T|%N|%M|%r"  # the fields of SACCT_FIELDS squeue knows: id, state, nodes, elapsed, reason


def squeue_argv(job_ids: list[str]) -> list[str]:
    return ["squeue", "-h", "-r", "-o", SQUEUE_FORMAT, "-j", ",".join(job_ids)]


def parse_squeue(out: str) -> dict[str, JobInfo]:
    """`squeue -h -o SQUEUE_FORMAT` lines to job states (no exit code: squeue lists only jobs not ended)."""
    jobs: dict[str, JobInfo] = {}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) < 5:
            continue
        for job_id in _expand_ids(parts[0]):
            jobs[job_id] = JobInfo(job_id, parts[1], _none(parts[2]), _none(parts[3]), None, _none(parts[4]))
    return jobs


def query_sacct(job_ids: list[str]) -> dict[str, JobInfo]:
    return parse_sacct(run_slurm(sacct_argv(job_ids)).stdout)


def query_squeue(job_ids: list[str]) -> dict[str, JobInfo]:
    # check=False: squeue exits 1 when every id has left the queue ("Invalid job id specified")
    return parse_squeue(run_slurm(squeue_argv(job_ids), check=False).stdout)


def query_jobs(job_ids: list[str]) -> Query:
    """States of `job_ids` (array ids or task ids) in one call; squeue if accounting is down."""
    ids = sorted({j.split("_")[0] for j in job_ids})
    if not ids:
        return Query({}, "none", 0)
    try:
        jobs = query_sacct(ids)
    except SlurmUnavailable:
        return Query(query_squeue(ids), "squeue", 1)
    jobs |= {j: task for j in job_ids if (task := task_of(jobs, j))}
    missing = [j for j in job_ids if j not in jobs]
    if not missing:
        return Query(jobs, "sacct", 1)
    # Accounting lags sbatch by a moment: ask the queue about jobs it has not recorded yet.
    recent = query_squeue(sorted({j.split("_")[0] for j in missing}))
    return Query({**recent, **jobs}, "sacct+squeue", 2)
