"""`slurmx render`: what would run for each point, exactly: sbatch scripts, server and replay commands.

For hardware this machine lacks (GPUs, containers), this is how the production path is reviewed.
The arrays are the ones `submit` would make (one per distinct Slurm request).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from slurmx import backends
from slurmx.commands.common import add_config_options, load_points
from slurmx.errors import UserError
from slurmx.inputs import Inputs
from slurmx.node import provision
from slurmx.node.launch import launch_plan, replay_process
from slurmx.process import Process, ServerPorts
from slurmx.recipes.spec import ServingSpec
from slurmx.runtimes import runtime_for
from slurmx.slurm.sbatch import render_sbatch
from slurmx.store.tree import ResultsTree
from slurmx.submit import sweep_dir
from slurmx.submit.arrays import array_plans
from slurmx.submit.resolved import Resolved, resolve_points

# InferenceX's fixed ports (PORT 8888, the engine behind a router on PORT+1, the router's metrics on
# PORT+10000), so rendered commands read like the scripts they replace; other backends' ports count on
# from 23888.
REVIEW_PORTS = {"lmcache": 20888, "lmcache-http": 21888, "mooncake-master": 22888}
POINT_DIR = Path("$POINT_DIR")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("render", help="print the exact commands each point would run", description=__doc__)
    parser.add_argument("key", metavar="KEY")
    parser.add_argument("--point", metavar="ID", help="only this point id")
    parser.add_argument(
        "--results", type=Path, metavar="DIR", default=Path("results"), help="results root named in the sbatch script"
    )
    add_config_options(parser)
    parser.set_defaults(func=run)


def _process_text(process: Process) -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in process.env.items())
    lines = [f"## {process.name}" + (f"  (ready: {process.health_url})" if process.health_url else "")]
    if env:
        lines.append(f"# env: {env}")
    lines.append(shlex.join(process.argv))
    return "\n".join(lines)


def review_ports(spec: ServingSpec) -> ServerPorts:
    names = backends.get(spec.backend.name).port_names
    named = {name: REVIEW_PORTS.get(name, 23888 + 1000 * i) for i, name in enumerate(names)}
    return ServerPorts(engine=8888, engine_behind_router=8889, router_metrics=18888, named=named)


def point_processes(item: Resolved) -> list[Process]:
    """Every process a serving point starts, in order, at the review ports: what `render` prints."""
    point, spec = item.point, item.serving
    assert spec is not None, "a command point starts no serving processes"
    runtime = runtime_for(item.profile, point.image)
    ports = review_ports(spec)
    plan = launch_plan(spec, ports, runtime, provision.review_env(spec))
    trace = POINT_DIR / "trace.jsonl" if spec.replay.kind == "synthetic" else None
    return [*plan.servers, replay_process(spec, ports, runtime, POINT_DIR / "aiperf", trace, 0)]


def render_point(item: Resolved) -> str:
    point, spec = item.point, item.serving
    header = f"# point {point.point_id} {point.exp_name} ({point.parallelism}, {point.backend_name}, conc {point.conc})"
    if spec is None:
        return f"{header}\n# runtime kind command: {shlex.join(item.profile.runtime.command or []) if item.profile.runtime else ''}\n"
    steps = provision.plan(spec, runtime_for(item.profile, point.image))
    provisioning = list({s.process.name: s.process for s in steps}.values())  # one process may check several
    return "\n\n".join([header, *(_process_text(p) for p in [*provisioning, *point_processes(item)])]) + "\n"


def render_key(key: str, inputs: Inputs, results: Path, only: str | None = None) -> str:
    resolved = [
        r for r in resolve_points(inputs.key_points(key), inputs) if only is None or r.point.point_id.startswith(only)
    ]
    if not resolved:
        raise UserError(f"no point {only!r} in {key}")
    sweep = sweep_dir(ResultsTree(results), key, inputs)
    plans = array_plans(resolved, sweep.submitit)
    title = "# sbatch script" if len(plans) == 1 else "# sbatch script {n} of {total}: {request}"
    parts = [
        title.format(n=n, total=len(plans), request=plan.request.summary()) + "\n" + render_sbatch(plan)
        for n, plan in enumerate(plans, 1)
    ]
    parts += [render_point(item) for item in resolved]
    return "\n".join(parts)


def run(args: argparse.Namespace) -> int:
    inputs = load_points(args, [args.key])
    print(render_key(args.key, inputs, args.results, args.point), end="")
    return 0
