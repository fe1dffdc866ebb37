"""The function each Slurm array task runs: drive one or more points through their stages.

Stage changes go to each point's state.json, so `slurmx status` sees them from any shell.
"""

from __future__ import annotations

import signal
from pathlib import Path

from slurmx.node.supervisor import JobInterrupted


class JobFailed(Exception):
    pass


def _take_over_signals() -> None:
    """From the first line of the job on, a signal ends the body (submitit would ignore SIGTERM)."""

    def interrupt(signum: int, frame: object) -> None:
        raise JobInterrupted(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2, signal.SIGHUP):
        signal.signal(signum, interrupt)


def run_job(sweep_path: str, point_ids: list[str]) -> dict[str, str]:
    """Run the points of one array task in order; raise if any failed so Slurm records FAILED."""
    _take_over_signals()
    # imported after the signals are ours: loading the body takes a moment a signal may land in
    from slurmx.node.body import run_points
    from slurmx.store.tree import SweepDir

    outcomes = run_points(SweepDir(Path(sweep_path)), point_ids)
    failed = {pid: why for pid, why in outcomes.items() if why != "done"}
    if failed:
        raise JobFailed("; ".join(f"{pid}: {why}" for pid, why in failed.items()))
    return outcomes
