"""Points -> Slurm arrays: one array per distinct Slurm request, one task per point or shared server.

Requests that differ only in memory (an offloading arm next to one without a pool) share one array
asking for the largest: an array is one sbatch request, and the profile's array-parallelism then
still bounds the whole sweep."""

from __future__ import annotations

import json
from pathlib import Path

from slurmx.plan import Point, server_groups
from slurmx.slurm.request import SlurmRequest, mem_mb
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
        by_request.setdefault(item.request.model_copy(update={"mem": "0"}), []).append(item)
    plans = []
    for key, members in by_request.items():
        request = key.model_copy(update={"mem": largest_mem([m.request.mem for m in members])})
        first = members[0]
        slurm = first.profile.slurm
        assert slurm is not None
        points = [m.point for m in members]
        runs = {p.point_id: (repeats or {}).get(p.point_id, [1]) for p in points}
        if slurm.share_server:
            groups = [
                [member_id(p.point_id, r) for p in group for r in runs[p.point_id]] for group in shared_servers(members)
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
                setup=[*profile_setup(slurm.setup), *first.runtime.setup_lines()],
            )
        )
    return plans


def profile_setup(lines: list[str]) -> list[str]:
    """The cluster profile's own setup lines, headed so a reader of the script knows where they came from."""
    return ["# cluster profile setup (slurm.setup)", *lines] if lines else []


def shared_servers(members: list[Resolved]) -> list[list[Point]]:
    """Points that run on one server: plan's server groups (same serving config, other concurrency), split
    where the engine would start differently (a recipe whose flags follow concurrency, such as
    max-num-seqs-per-conc, gives each concurrency its own server: no point runs on another's engine argv)."""
    by_id = {m.point.point_id: m for m in members}
    groups: list[list[Point]] = []
    for group in server_groups([m.point for m in members]):
        split: dict[str, list[Point]] = {}
        for point in group:
            serving = by_id[point.point_id].serving
            engine = (
                [serving.engine_flags, serving.env, serving.router and serving.router.model_dump()] if serving else []
            )
            split.setdefault(json.dumps(engine, sort_keys=True), []).append(point)
        groups.extend(split.values())
    return groups


def largest_mem(mems: list[str]) -> str:
    """The largest of sbatch --mem values; "0" (a node's whole memory) is larger than any figure."""
    return max(mems, key=lambda mem: mem_mb(mem) or float("inf"))
