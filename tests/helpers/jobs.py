"""Leave the shared local cluster as a test found it: no job of a finished test still running."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from slurmx.store.state import read_state
from slurmx.store.tree import ResultsTree


def _job_ids(results: Path) -> set[str]:
    states = (read_state(path) for path in results.rglob("state.json"))
    return {state.job_id.split("_")[0] for state in states if state and state.job_id}


def wait_left_queue(job_ids: set[str], timeout_s: float = 90) -> set[str]:
    """Wait until squeue lists none of `job_ids` (not even completing: its batch step has exited); return
    those still listed."""
    listed = set(job_ids)
    deadline = time.monotonic() + timeout_s
    while listed:
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i", "-j", ",".join(sorted(job_ids))], capture_output=True, text=True, check=False
        ).stdout.split()
        listed = {job.split("_")[0] for job in out}
        if not listed or time.monotonic() > deadline:
            break
        time.sleep(1)
    return listed


def cancel_and_drain(results: Path, cancel: Callable[[str], object], timeout_s: float = 90) -> None:
    """Cancel every sweep of `results` and wait until squeue lists none of its jobs (a job still tearing
    down holds its GPUs and its job name, which the next test may count on)."""
    for sweep in ResultsTree(results).sweeps():
        cancel(sweep.config_key)
    if ids := _job_ids(results):
        wait_left_queue(ids, timeout_s)
