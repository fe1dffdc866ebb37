"""Submit a sweep as one Slurm array through submitit, with the ledger written around sbatch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import submitit
from submitit.slurm.slurm import _make_sbatch_string

from slurmx.results.tree import SweepDir
from slurmx.slurm.request import SlurmRequest


@dataclass
class ArrayPlan:
    """One array: task i runs the points of groups[i] (one point, or one shared server's points)."""

    sweep: SweepDir
    request: SlurmRequest
    job_name: str
    groups: list[list[str]]
    array_parallelism: int
    signal_delay_s: int
    setup: list[str] = field(default_factory=list)


def executor_for(plan: ArrayPlan) -> submitit.SlurmExecutor:
    executor = submitit.SlurmExecutor(folder=plan.sweep.submitit, max_num_timeout=0)
    executor.update_parameters(**slurm_parameters(plan))
    return executor


def slurm_parameters(plan: ArrayPlan) -> dict[str, Any]:
    request = plan.request
    params: dict[str, Any] = {
        "job_name": plan.job_name,
        "partition": request.partition,
        "gres": request.gres,
        "mem": request.mem,
        "time": request.time_limit_min,
        "nodes": 1,
        "ntasks_per_node": 1,
        "array_parallelism": plan.array_parallelism,
        "signal_delay_s": plan.signal_delay_s,
        "stderr_to_stdout": True,
        "setup": plan.setup,
    }
    optional = {
        "constraint": request.constraint,
        "account": request.account,
        "qos": request.qos,
        "cpus_per_task": request.cpus_per_task,
        "exclusive": True if request.exclusive else None,
    }
    params.update({k: v for k, v in optional.items() if v is not None})
    return params


def render_sbatch(plan: ArrayPlan) -> str:
    """The sbatch script submitit would send, for --dry-run and golden tests."""
    command = f"{submitit.SlurmExecutor(folder=plan.sweep.submitit).python} -u -m submitit.core._submit {plan.sweep.submitit}"
    return _make_sbatch_string(
        command=command, folder=plan.sweep.submitit, map_count=len(plan.groups), **slurm_parameters(plan)
    )


def submit_array(plan: ArrayPlan) -> list[str]:
    """One sbatch call for the whole array; returns the task job ids ("<array>_<i>") in order."""
    from slurmx.node.entry import run_job  # the function the array tasks run

    executor = executor_for(plan)
    with executor.batch():
        jobs = [executor.submit(run_job, str(plan.sweep.path), group) for group in plan.groups]
    return [job.job_id for job in jobs]


def array_id(task_ids: list[str]) -> str | None:
    return task_ids[0].split("_")[0] if task_ids else None
