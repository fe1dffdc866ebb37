"""What a user names on the command line, found in the results tree: KEY, KEY/SWEEP, SWEEP (or a unique
prefix of one), or POINT (a unique prefix of a point id). One resolver for every command."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from slurmx.errors import UserError
from slurmx.store.tree import PointDir, ResultsTree, SweepDir


@dataclass
class Target:
    sweeps: list[SweepDir]
    point: PointDir | None = None  # set when the target named one point


def _sweeps_named(tree: ResultsTree, sweeps: list[SweepDir], name: str) -> list[SweepDir] | None:
    """None when nothing of that name exists; [] for a key directory that has no sweep yet."""
    name = name.strip("/")
    if "/" in name:
        key, sweep_id = name.split("/", 1)
        found = [s for s in sweeps if s.config_key == key and s.sweep_id == sweep_id]
        return found or None
    by_key = [s for s in sweeps if s.config_key == name]
    if by_key or (tree.root / name).is_dir():
        return by_key
    exact = [s for s in sweeps if s.sweep_id == name]
    if exact:
        return exact
    by_prefix = [s for s in sweeps if s.sweep_id.startswith(name)] if len(name) >= 4 else []
    return by_prefix if len(by_prefix) == 1 else None


def resolve(tree: ResultsTree, name: str | None, allow_point: bool = True) -> Target:
    sweeps = list(tree.sweeps())
    if name is None:
        return Target(sweeps)
    found = _sweeps_named(tree, sweeps, name)
    if found:
        return Target(found)
    if allow_point and len(name) >= 4:
        points = [(s, p) for s in sweeps for p in s.points() if p.point_id.startswith(name)]
        if len(points) == 1:
            return Target([points[0][0]], points[0][1])
        if len(points) > 1:
            raise UserError(f"{name!r} matches {len(points)} points; give more of the point id")
    known = sorted({s.config_key for s in sweeps} | {s.sweep_id for s in sweeps})
    what = "config key, sweep or point" if allow_point else "config key or sweep"
    from slurmx.config.load import suggest  # pydantic and the config models: only for this message

    raise UserError(f"no {what} {name!r} in {tree.root}{suggest(name, known)}")


def find_sweeps(tree: ResultsTree, names: list[str]) -> tuple[list[SweepDir], list[str]]:
    """Sweeps named by KEY, KEY/SWEEP or SWEEP (every sweep when no name); unknown names returned apart."""
    sweeps = list(tree.sweeps())
    if not names:
        return sweeps, []
    found: dict[Path, SweepDir] = {}
    missing = []
    for name in names:
        matches = _sweeps_named(tree, sweeps, name)
        if matches is None:
            missing.append(name)
            continue
        for sweep in matches:
            found.setdefault(sweep.path, sweep)
    return list(found.values()), missing
