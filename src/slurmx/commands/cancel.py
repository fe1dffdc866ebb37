"""`slurmx cancel`: cancel the Slurm jobs of a key, a sweep or one point, in one scancel call."""

from __future__ import annotations

import argparse
from pathlib import Path

from slurmx import paths
from slurmx.slurm.accounting import query_jobs, still_active
from slurmx.slurm.commands import run_slurm
from slurmx.store.state import read_state
from slurmx.store.targets import resolve
from slurmx.store.tree import ResultsTree


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("cancel", help="cancel the jobs of a key, sweep or point", description=__doc__)
    parser.add_argument("target", metavar="KEY|SWEEP|POINT")
    parser.add_argument("--results", type=Path, metavar="DIR", help="results tree (default: ./results)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    tree = ResultsTree(args.results or paths.default_results())
    target = resolve(tree, args.target)
    points = [target.point] if target.point else [p for s in target.sweeps for p in s.points()]
    states = [s for p in points if (s := read_state(p.state_json)) and s.job_id]
    jobs = query_jobs(sorted({s.job_id for s in states if s.job_id})).jobs
    active = sorted({s.job_id for s in states if s.job_id and still_active(jobs.get(s.job_id), s.ended)})
    if not active:
        print(f"nothing to cancel: no queued or running job for {args.target}")
        return 0
    run_slurm(["scancel", *active], check=False)
    print(f"cancelled {len(active)} job(s): {' '.join(active)}")
    return 0
