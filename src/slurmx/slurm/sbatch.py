"""One Slurm array per request through submitit: its parameters, its rendered script, one sbatch call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import submitit
from submitit.slurm.slurm import _make_sbatch_string

from slurmx.slurm.request import SlurmRequest


@dataclass
class ArrayPlan:
    """One array: task i runs the points of groups[i] (one point, or one shared server's points)."""

    folder: Path  # submitit's folder: pickles and Slurm's logs
    request: SlurmRequest
    job_name: str
    groups: list[list[str]]
    array_parallelism: int
    signal_delay_s: int
    setup: list[str] = field(default_factory=list)


def slurm_parameters(plan: ArrayPlan) -> dict[str, Any]:
    request = plan.request
    params: dict[str, Any] = {
        "job_name": plan.job_name,
        "partition": request.partition,
        "gres": request.gres,
        "mem": request.mem,
        "time": request.time_limit_min,
        "nodes": request.nodes,  # one task per node: on a multinode point, each runs its node's part
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
        "exclude": ",".join(request.exclude) or None,
    }
    params.update({k: v for k, v in optional.items() if v is not None})
    extra = {"gres-flags": request.gres_flags, "sockets-per-node": request.sockets_per_node}
    if any(v is not None for v in extra.values()):
        params["additional_parameters"] = {k: v for k, v in extra.items() if v is not None}
    if request.mem_bind:
        params["srun_args"] = [f"--mem-bind={request.mem_bind}"]  # the job step's; sbatch only passes it on
    return params


def render_sbatch(plan: ArrayPlan) -> str:
    """The sbatch script submitit would send, for --dry-run, render and golden tests."""
    python = submitit.SlurmExecutor(folder=plan.folder).python
    command = f"{python} -u -m submitit.core._submit {plan.folder}"
    return _make_sbatch_string(
        command=command, folder=plan.folder, map_count=len(plan.groups), **slurm_parameters(plan)
    )


def submit_array(plan: ArrayPlan, function: Callable[[str, list[str]], object], first_arg: str) -> list[str]:
    """One sbatch call for the whole array: task i runs function(first_arg, groups[i]).

    Returns the task job ids ("<array>_<i>") in order."""
    executor = submitit.SlurmExecutor(folder=plan.folder, max_num_timeout=0)
    executor.update_parameters(**slurm_parameters(plan))
    with executor.batch():
        jobs = [executor.submit(function, first_arg, group) for group in plan.groups]
    return [job.job_id for job in jobs]


def array_id(task_ids: list[str]) -> str | None:
    return task_ids[0].split("_")[0] if task_ids else None
