"""`slurmx render`: what would run for each point, exactly: sbatch script, server and replay commands.

For hardware this machine lacks (GPUs, containers), this is how the production path is reviewed.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from slurmx.backends import ServerPorts
from slurmx.commands.common import Loaded, add_config_options, load_points
from slurmx.errors import UserError
from slurmx.node.launch import Process, launch_plan, replay_process
from slurmx.node.runtime import runtime_for, sbatch_setup_lines
from slurmx.plan import Point
from slurmx.recipes.resolve import resolve
from slurmx.results.tree import ResultsTree
from slurmx.slurm.ledger import sweep_id_for
from slurmx.slurm.request import slurm_request
from slurmx.slurm.submit import ArrayPlan, render_sbatch

# InferenceX's fixed ports, so rendered commands read like the scripts they replace.
REVIEW_PORTS = ServerPorts(engine=8888, lmcache=20888, lmcache_http=21888, mooncake_master=22888, engine_behind_router=8889)
POINT_DIR = Path("$POINT_DIR")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("render", help="print the exact commands each point would run", description=__doc__)
    parser.add_argument("key", metavar="KEY")
    parser.add_argument("--point", metavar="ID", help="only this point id")
    parser.add_argument("--results", type=Path, metavar="DIR", default=Path("results"), help="results root named in the sbatch script")
    add_config_options(parser)
    parser.set_defaults(func=run)


def _process_text(process: Process) -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in process.env.items())
    lines = [f"## {process.name}" + (f"  (ready: {process.health_url})" if process.health_url else "")]
    if env:
        lines.append(f"# env: {env}")
    lines.append(shlex.join(process.argv))
    return "\n".join(lines)


def render_point(point: Point, loaded: Loaded) -> str:
    spec = resolve(point, loaded.recipes())
    runtime = runtime_for(loaded.clusters.profiles[point.runner], point.image)
    plan = launch_plan(spec, REVIEW_PORTS, runtime)
    trace = POINT_DIR / "trace.jsonl" if spec.replay.kind == "synthetic" else None
    replay = replay_process(spec, REVIEW_PORTS, runtime, POINT_DIR / "aiperf", trace, 0)
    header = f"# point {point.point_id} {point.exp_name} ({point.parallelism}, {point.backend_name}, conc {point.conc})"
    return "\n\n".join([header, *(_process_text(p) for p in plan.servers), _process_text(replay)]) + "\n"


def render_key(key: str, loaded: Loaded, results: Path, only: str | None = None) -> str:
    points = [p for p in loaded.points if p.config_key == key and (only is None or p.point_id.startswith(only))]
    if not points:
        raise UserError(f"no point {only!r} in {key}")
    profile = loaded.clusters.profiles[points[0].runner]
    if profile.slurm is None:
        raise UserError(f"{points[0].runner} has no slurm section to render")
    sweep = ResultsTree(results).sweep(key, sweep_id_for(key, points))
    plan = ArrayPlan(
        sweep=sweep,
        request=slurm_request(profile.slurm, points[0].gpus),
        job_name=f"slurmx:{key}",
        groups=[[p.point_id] for p in points],
        array_parallelism=profile.slurm.array_parallelism,
        signal_delay_s=profile.slurm.signal_delay_s,
        setup=sbatch_setup_lines(profile, points[0].image),
    )
    parts = ["# sbatch script\n" + render_sbatch(plan)]
    parts += [render_point(p, loaded) for p in points]
    return "\n".join(parts)


def run(args: argparse.Namespace) -> int:
    loaded = load_points(args, [args.key])
    print(render_key(args.key, loaded, args.results, args.point), end="")
    return 0
