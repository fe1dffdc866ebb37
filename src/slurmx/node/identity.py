"""Who this process is on the node: the Slurm node name, the job id, its restart count, the env marker.

Only stdlib: the GPU sampler and hygiene use it on machines that lack slurmx's dependencies.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

# Every process a job starts carries SLURMX_JOB_MARKER=<job_marker()>: the net that finds what group signals miss.
MARKER_ENV = "SLURMX_JOB_MARKER"


def node_name(env: Mapping[str, str] | None = None) -> str:
    """The Slurm node this runs on (several fake nodes share one host on the local cluster), else the short host."""
    env = os.environ if env is None else env
    return env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def slurm_job_id() -> str | None:
    """`<array>_<task>` for an array task, else the plain job id; None outside Slurm."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID")


def marker_prefix(job_id: str | None) -> str:
    """What every attempt's marker of one job starts with: a requeue's leftovers are found by it."""
    return f"{job_id or 'local'}-"


def job_marker() -> str:
    """Unique per job and attempt: every process the job starts carries it in its env."""
    return f"{marker_prefix(slurm_job_id())}{os.getpid()}"


def restart_count() -> int:
    """How often Slurm requeued this job (node failure, preemption, scontrol requeue)."""
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    except ValueError:
        return 0
