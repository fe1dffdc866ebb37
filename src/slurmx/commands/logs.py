"""`slurmx logs`: print (or follow) the logs of one point: its processes' logs and Slurm's."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from slurmx import paths
from slurmx.errors import UserError
from slurmx.store.state import read_state
from slurmx.store.targets import resolve
from slurmx.store.tree import LOGS, PointDir, ResultsTree, SweepDir


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("logs", help="show the logs of one point", description=__doc__)
    parser.add_argument("point", metavar="POINT", help="point id (or a unique prefix)")
    parser.add_argument("--name", help="one log: lmcache, engine, replay, command or slurm")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until the point ends")
    parser.add_argument("--results", type=Path, metavar="DIR", help="results tree (default: ./results)")
    parser.set_defaults(func=run)


def _log_files(point: PointDir, sweep: SweepDir, job_id: str | None) -> dict[str, Path]:
    files = {p.stem: p for p in sorted(point.logs.glob("*.log"))}
    # a multinode point's other nodes keep theirs under nodes/<node>/logs/: named <node>/<process>
    for path in sorted(point.nodes.glob(f"*/{LOGS}/*.log")):
        files[f"{path.parent.parent.name}/{path.stem}"] = path
    if job_id and sweep.slurm_log(job_id).exists():
        files["slurm"] = sweep.slurm_log(job_id)
    return files


def run(args: argparse.Namespace) -> int:
    tree = ResultsTree(args.results or paths.default_results())
    target = resolve(tree, args.point)
    if target.point is None:
        raise UserError(f"{args.point!r} is a key or sweep; name one point id (see slurmx status)")
    point, sweep = target.point, target.sweeps[0]
    state = read_state(point.state_json)
    files = _log_files(point, sweep, state.job_id if state else None)
    if args.name:
        if args.name not in files:
            raise UserError(f"point {point.point_id} has no {args.name} log (has: {', '.join(files) or 'none yet'})")
        files = {args.name: files[args.name]}
    offsets: dict[Path, int] = {}
    for name, path in files.items():
        print(f"==> {name}: {path} <==")
        data = path.read_bytes()
        sys.stdout.write(data.decode("utf-8", "replace"))
        offsets[path] = len(data)
    if not args.follow:
        return 0
    while True:
        state = read_state(point.state_json)
        for name, path in _log_files(point, sweep, state.job_id if state else None).items():
            if args.name and name != args.name:
                continue
            size = path.stat().st_size
            if size > offsets.get(path, 0):
                with path.open("rb") as handle:
                    handle.seek(offsets.get(path, 0))
                    sys.stdout.write(handle.read().decode("utf-8", "replace"))
                offsets[path] = size
                sys.stdout.flush()
        if state is not None and state.ended:
            return 0
        time.sleep(1.0)
