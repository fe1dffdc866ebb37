"""Points -> Slurm arrays: one array per distinct Slurm request, one task per point or shared server."""

from __future__ import annotations

from pathlib import Path

from slurmx.plan import server_groups
from slurmx.runtimes import runtime_for
from slurmx.slurm.request import SlurmRequest
from slurmx.slurm.sbatch import ArrayPlan
from slurmx.store.tree import member_id
from slurmx.submit.resolved import Resolved


def array_plans(
    resolved: list[Resolved],
    folder: Path,
    max_parallel: int | None = None,
    repeats: dict[str, list[int]] | None = None,
) -> list[ArrayPlan]:
    """Group points by their exact Slurm request (GRES, features, memory, time, partition, ...).

    A homogeneous sweep is one array; a key mixing TP4 and TP8 points is two, each asking for its own GPUs.
    `repeats` (point id -> the repeats to run, default [1]): on a shared server a point's repeats run back
    to back in its group's task; otherwise each repeat is its own task, round by round (every point's
    repeat 1, then every point's repeat 2, ...), so the arms' repeats of one index run close in time."""
    by_request: dict[SlurmRequest, list[Resolved]] = {}
    for item in resolved:
        by_request.setdefault(item.request, []).append(item)
    plans = []
    for request, members in by_request.items():
        first = members[0]
        slurm = first.profile.slurm
        assert slurm is not None
        points = [m.point for m in members]
        runs = {p.point_id: (repeats or {}).get(p.point_id, [1]) for p in points}
        if slurm.share_server:
            groups = [
                [member_id(p.point_id, r) for p in group for r in runs[p.point_id]] for group in server_groups(points)
            ]
        else:
            rounds = sorted({r for rs in runs.values() for r in rs})
            groups = [[member_id(p.point_id, r)] for r in rounds for p in points if r in runs[p.point_id]]
        plans.append(
            ArrayPlan(
                folder=folder,
                request=request,
                job_name=f"slurmx:{first.point.config_key}",
                groups=groups,
                array_parallelism=max_parallel or slurm.array_parallelism,
                signal_delay_s=slurm.signal_delay_s,
                setup=runtime_for(first.profile, first.point.image).setup_lines(),
            )
        )
    return plans
