"""What would run for each point, exactly: sbatch scripts, server and replay commands, at review ports.

For hardware this machine lacks (GPUs, containers), this is how the production path is reviewed. The arrays
are the ones `submit` would make (one per distinct Slurm request); disaggregated points render through
`submit/disagg.py`.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from slurmx.errors import UserError
from slurmx.inputs import Inputs
from slurmx.node import numa, provision
from slurmx.node.launch import REVIEW_RUN_DIR, NodePart, launch_plan, placed, replay_process
from slurmx.plan import Point
from slurmx.process import Process, ServerPorts
from slurmx.recipes.spec import ServingSpec
from slurmx.runtimes import runtime_for
from slurmx.slurm.sbatch import render_sbatch
from slurmx.store.ledger import UntilCertified
from slurmx.store.tree import PointDir, ResultsTree
from slurmx.submit import disagg
from slurmx.submit.arrays import array_plans
from slurmx.submit.resolved import Resolved, check_submittable, is_disaggregated, point_request, resolve_runnable
from slurmx.submit.stage import check_budget, sweep_dir

# InferenceX's fixed ports (PORT 8888, the engine behind a router on PORT+1, the router's metrics on
# PORT+10000, Mooncake's master on PORT+12000), so rendered commands read like the scripts they replace;
# other backends' ports count on from 23888.
REVIEW_PORTS = {"lmcache": 20888, "lmcache-http": 21888, "mooncake-master": 20888}
POINT_DIR = REVIEW_RUN_DIR
# A multinode point's head: its address (Slurm's NodeAddr) and data-parallel RPC port are chosen at run time.
REVIEW_RPC_PORT = 28888
REVIEW_MASTER_PORT = 29501  # torch.distributed's, when a rank spans nodes (chosen free on the head at run time)


def _header(point: Point) -> str:
    return f"# point {point.point_id} {point.exp_name} ({point.parallelism}, {point.backend_name}, conc {point.conc})"


def _process_text(process: Process) -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in process.env.items())
    lines = [f"## {process.name}" + (f"  (ready: {process.health_url})" if process.health_url else "")]
    if env:
        lines.append(f"# env: {env}")
    for path, text in process.files.items():  # what the node writes before it starts the process
        lines += [f"# file {path}:", *(f"#   {line}" for line in text.splitlines())]
    lines.append(shlex.join(process.argv))
    return "\n".join(lines)


def review_port(name: str, index: int) -> int:
    """A backend port's placeholder: REVIEW_PORTS's, the i-th server's (`NAME.i`) that plus i, else one of its own."""
    base, _, server = name.partition(".")
    if name in REVIEW_PORTS or (base in REVIEW_PORTS and server.isdigit()):
        return REVIEW_PORTS.get(name) or REVIEW_PORTS[base] + int(server)
    return 23888 + 1000 * index


def review_ports(spec: ServingSpec) -> ServerPorts:
    names = spec.implementation.backend.ports_of(spec.backend)
    named = {name: review_port(name, i) for i, name in enumerate(names)}
    # InferenceX's: PORT=8888, its backend behind a router PORT+1, the router's metrics PORT+10000, the dsv4 SGLang
    # scripts' --dist-init-addr PORT+2000
    return ServerPorts(engine=8888, engine_behind_router=8889, router_metrics=18888, rendezvous=10888, named=named)


def point_processes(item: Resolved, until: UntilCertified | None = None) -> list[Process]:
    """Every process a serving point starts, in order, at the review ports: what `render` prints (`until`: its
    replay as the first of its rounds)."""
    spec, runtime = item.serving, item.runtime
    assert spec is not None, "a command point starts no serving processes"
    ports = review_ports(spec)
    # the NUMA placement as the job body applies it, with the GPUs' NUMA nodes still to be read on the node
    prefix = numa.review_prefix(item.profile.node.numa_policy if item.profile.node else "none")
    parts = (
        [
            NodePart(i, disagg.HEAD_ADDRESS, REVIEW_RPC_PORT, REVIEW_MASTER_PORT, disagg.NODE_ADDRESS)
            for i in range(spec.nodes)
        ]
        if spec.nodes > 1
        else [None]
    )
    servers = []
    for part in parts:  # the head (or the only node), then each other node's servers and headless ranks
        for process in launch_plan(spec, ports, runtime, provision.review_env(spec), part).servers:
            server = placed(process, runtime, prefix)
            if part is not None and part.index:
                server = replace(server, name=f"node {part.index} of {spec.nodes}: {process.name}")
            servers.append(server)
    trace = POINT_DIR / "trace.jsonl" if spec.replay.kind == "synthetic" else None
    artifacts = POINT_DIR / "aiperf" if until is None else PointDir(POINT_DIR).aiperf_round(1)
    return [*servers, replay_process(spec, ports, runtime, artifacts, trace, 0)]


def render_point(item: Resolved, until: UntilCertified | None = None) -> str:
    point, spec = item.point, item.serving
    header = _header(point)
    if until is not None and spec is not None:
        header += f"\n# replayed {until.summary()}; the replay below is round 1's"
    if spec is None:
        return f"{header}\n# runtime kind command: {shlex.join(item.profile.runtime.command or []) if item.profile.runtime else ''}\n"
    steps = provision.plan(spec, item.runtime)
    provisioning = list({s.process.name: s.process for s in steps}.values())  # one process may check several
    processes = [*provisioning, *point_processes(item, until)]
    return "\n\n".join([header, *(_process_text(p) for p in processes)]) + "\n"


def render_key(
    key: str, inputs: Inputs, results: Path, only: str | None = None, until: UntilCertified | None = None
) -> str:
    points = [p for p in inputs.key_points(key) if only is None or p.point_id.startswith(only)]
    if not points:
        raise UserError(f"no point {only!r} in {key}")
    disaggregated = [p for p in points if is_disaggregated(p)]
    points = [p for p in points if not is_disaggregated(p)]
    check_submittable(points)
    resolved, refused = resolve_runnable(points, inputs)
    parts = []
    if resolved:
        sweep = sweep_dir(ResultsTree(results), key, inputs)
        plans = array_plans(resolved, sweep.submitit)
        if until is not None:
            check_budget(plans, until)
        title = "# sbatch script" if len(plans) == 1 else "# sbatch script {n} of {total}: {request}"
        parts += [
            title.format(n=n, total=len(plans), request=plan.request.summary()) + "\n" + render_sbatch(plan)
            for n, plan in enumerate(plans, 1)
        ]
    parts += [render_point(item, until) for item in resolved]
    parts += [render_refused(point, why) for point, why in refused]
    parts += [render_disaggregated(point, inputs) for point in disaggregated]
    return "\n".join(parts)


def render_disaggregated(point: Point, inputs: Inputs) -> str:
    """A disaggregated point: its Slurm request and every node's processes (submit/disagg.py), for review
    only; `submit` refuses it (KV transfer between prefill and decode needs GPUs and RDMA)."""
    profile = inputs.submittable_profile(point)
    header = (
        f"{_header(point)}\n"
        f"# submit refuses: {disagg.WHY_NOT_SUBMITTED}\n"
        f"# slurm request: {point_request(point, profile, None).summary()}"
    )
    why = disagg.why_not_rendered(point, profile.gpus_per_node)
    if why is not None:
        return f"{header}\n# refused: {why}\n"
    processes = disagg.disagg_processes(point, profile.gpus_per_node, runtime_for(profile, point.image))
    blocks = [_process_text(replace(p.process, name=f"node {p.node}: {p.process.name}")) for p in processes]
    return "\n\n".join([header, *blocks]) + "\n"


def render_refused(point: Point, why: str) -> str:
    """A planned point slurmx does not start: named with the reason submit gives, and nothing rendered."""
    return f"{_header(point)}\n# refused: {why}\n"
