"""Resolve a KEY, SWEEP id or POINT id (or a unique prefix) to places in the results tree."""

from __future__ import annotations

from dataclasses import dataclass

from slurmx.config.load import suggest
from slurmx.errors import UserError
from slurmx.results.tree import PointDir, ResultsTree, SweepDir


@dataclass
class Target:
    sweeps: list[SweepDir]
    point: PointDir | None = None  # set when the target named one point


def resolve(tree: ResultsTree, name: str | None, allow_point: bool = True) -> Target:
    sweeps = list(tree.sweeps())
    if name is None:
        return Target(sweeps)
    by_key = [s for s in sweeps if s.config_key == name]
    if by_key:
        return Target(by_key)
    by_sweep = [s for s in sweeps if s.sweep_id == name or (len(name) >= 4 and s.sweep_id.startswith(name))]
    if len(by_sweep) == 1:
        return Target(by_sweep)
    if allow_point and len(name) >= 4:
        points = [(s, p) for s in sweeps for p in s.points() if p.point_id.startswith(name)]
        if len(points) == 1:
            return Target([points[0][0]], points[0][1])
        if len(points) > 1:
            raise UserError(f"{name!r} matches {len(points)} points; give more of the point id")
    known = sorted({s.config_key for s in sweeps} | {s.sweep_id for s in sweeps})
    what = "config key, sweep or point" if allow_point else "config key or sweep"
    raise UserError(f"no {what} {name!r} in {tree.root}{suggest(name, known)}")
