"""Points -> Slurm arrays: one array per distinct Slurm request, one task per point or shared server."""

from __future__ import annotations

from pathlib import Path

from slurmx.plan import server_groups
from slurmx.runtimes import runtime_for
from slurmx.slurm.request import SlurmRequest
from slurmx.slurm.sbatch import ArrayPlan
from slurmx.submit.resolved import Resolved


def array_plans(resolved: list[Resolved], folder: Path, max_parallel: int | None = None) -> list[ArrayPlan]:
    """Group points by their exact Slurm request (GRES, features, memory, time, partition, ...).

    A homogeneous sweep is one array; a key mixing TP4 and TP8 points is two, each asking for its own GPUs."""
    by_request: dict[SlurmRequest, list[Resolved]] = {}
    for item in resolved:
        by_request.setdefault(item.request, []).append(item)
    plans = []
    for request, members in by_request.items():
        first = members[0]
        slurm = first.profile.slurm
        assert slurm is not None
        points = [m.point for m in members]
        groups = server_groups(points) if slurm.share_server else [[p] for p in points]
        plans.append(
            ArrayPlan(
                folder=folder,
                request=request,
                job_name=f"slurmx:{first.point.config_key}",
                groups=[[p.point_id for p in group] for group in groups],
                array_parallelism=max_parallel or slurm.array_parallelism,
                signal_delay_s=slurm.signal_delay_s,
                setup=runtime_for(first.profile, first.point.image).setup_lines(),
            )
        )
    return plans
