"""The function each Slurm array task runs: drive one or more points through their stages.

Stage changes go to each point's state.json, so `slurmx status` sees them from any shell.
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

from slurmx.results.state import PointState, Stage, read_state, write_state
from slurmx.results.tree import PointDir, SweepDir


class PointFailed(Exception):
    """A point failed for a reason that fits on one line."""


class JobFailed(Exception):
    pass


class StageRecorder:
    """Writes stage changes of one point to its state.json."""

    def __init__(self, point: PointDir) -> None:
        self.point = point
        state = read_state(point.state_json)
        self.state = state or PointState(point_id=point.point_id)

    def stage(self, stage: Stage, reason: str | None = None) -> None:
        self.state = self.state.advance(stage, reason)
        write_state(self.point.state_json, self.state)

    def started(self) -> None:
        job_id = _job_id()
        update = {"node": socket.gethostname().split(".")[0], "reason": None}
        if job_id:
            update["job_id"] = job_id
        if os.environ.get("SLURMD_NODENAME"):
            update["node"] = os.environ["SLURMD_NODENAME"]
        self.state = self.state.model_copy(update=update)
        self.stage("preflight")


def _job_id() -> str | None:
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID")


def job_marker() -> str:
    """Unique per job and attempt: every process the job starts carries it in its env."""
    return f"{_job_id() or 'local'}-{os.getpid()}"


def _take_over_signals() -> None:
    """From the first line of the job on, a signal ends the body (submitit would ignore SIGTERM)."""
    from slurmx.node.supervisor import JobInterrupted

    def interrupt(signum: int, frame: object) -> None:
        raise JobInterrupted(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2, signal.SIGHUP):
        signal.signal(signum, interrupt)


def run_job(sweep_path: str, point_ids: list[str]) -> dict[str, str]:
    """Run the points of one array task in order; raise if any failed so Slurm records FAILED."""
    _take_over_signals()
    from slurmx.node.body import run_points

    sweep = SweepDir(Path(sweep_path))
    outcomes = run_points(sweep, point_ids)
    failed = {pid: why for pid, why in outcomes.items() if why != "done"}
    if failed:
        raise JobFailed("; ".join(f"{pid}: {why}" for pid, why in failed.items()))
    return outcomes

