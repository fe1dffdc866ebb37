"""Every process a point starts, as argv + env delta + readiness URL: one function for body and render.

The backend's servers first, then the engine (with the backend's connector), then a router if the
point has one; the replay last. Backends, engines and runtimes come from their registries.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from slurmx.engines.base import NodePart as NodePart  # re-exported: the node body builds parts
from slurmx.errors import UserError
from slurmx.node.replay import production_argv, synthetic_argv
from slurmx.process import COMMON_ENV, Process, ServerPorts, loopback
from slurmx.recipes.spec import DRAFT_PATH, INFERENCEX_FILE, MODEL_PATH, ServingSpec
from slurmx.runtimes import Runtime
from slurmx.store.atomic import write_text

ROUTER = "router"
ENGINE = "engine"
REVIEW_RUN_DIR = Path("$POINT_DIR")  # the point's directory as render shows it (the node names the real one)


@dataclass
class LaunchPlan:
    servers: list[Process] = field(default_factory=list)  # in start order: backend servers, engine, router
    engine_url: str = ""  # where clients (the replay) connect

    @property
    def engine(self) -> Process:
        return next(p for p in self.servers if p.name == ENGINE)


def placed(process: Process, runtime: Runtime, prefix: list[str]) -> Process:
    """A backend server with its NUMA placement (numactl ...) before its own argv, where the runtime
    starts it (inside the container, for a container runtime). The engine and the router are left alone:
    vLLM places its own workers (--numa-bind)."""
    if not prefix or process.name in (ENGINE, ROUTER):
        return process
    return replace(process, argv=runtime.place(process.argv, process.name, prefix))


def write_files(process: Process) -> None:
    """The files a process reads at start (its config), written before it starts."""
    for path, text in process.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_text(Path(path), text)


def ports_needed(spec: ServingSpec) -> int:
    """Free ports a point needs on its node: the engine's, one behind a router, the router's metrics, the engine's
    ranks' rendezvous, and the backend's own."""
    return 4 + len(spec.implementation.backend.ports_of(spec.backend))


def choose_ports(spec: ServingSpec, free: list[int]) -> ServerPorts:
    names = spec.implementation.backend.ports_of(spec.backend)
    return ServerPorts(
        engine=free[0],
        engine_behind_router=free[1],
        router_metrics=free[2],
        rendezvous=free[3],
        named=dict(zip(names, free[4:], strict=True)),
    )


def engine_port(spec: ServingSpec, ports: ServerPorts) -> int:
    return ports.engine_behind_router if spec.router is not None else ports.engine


def engine_direct_url(spec: ServingSpec, ports: ServerPorts) -> str:
    """The engine itself, not a router in front of it: for its metrics and cache resets."""
    return loopback(engine_port(spec, ports))


def launch_plan(
    spec: ServingSpec,
    ports: ServerPorts,
    runtime: Runtime,
    provisioned: Mapping[str, Mapping[str, str]] | None = None,
    part: NodePart | None = None,
    run_dir: Path = REVIEW_RUN_DIR,
) -> LaunchPlan:
    """`provisioned`: env the provisioning step computed on the node, per process name (torch's libraries).
    `part`: this node's part of a multinode engine; a node other than the head serves no API and no router.
    `run_dir`: where the node writes the files the backend hands the engine (the point's directory)."""
    plan = _launch_plan(spec, ports, runtime, part, run_dir)
    extra = provisioned or {}
    plan.servers = [replace(p, env={**p.env, **extra[p.name]}) if p.name in extra else p for p in plan.servers]
    return plan


def _launch_plan(
    spec: ServingSpec, ports: ServerPorts, runtime: Runtime, part: NodePart | None, run_dir: Path
) -> LaunchPlan:
    implemented = spec.implementation
    backend, engine = implemented.backend, implemented.engine
    plan = LaunchPlan(engine_url=loopback(ports.engine))
    if part is not None and backend.head_servers:  # one set on the head, at its address, for every node's ranks
        ports = replace(ports, store_host=part.head_address, store_here=part.index == 0)
    plan.servers += backend.servers(spec.backend, ports, runtime, spec.env)
    flags = [f.replace(MODEL_PATH, runtime.model_path(spec.model)) for f in spec.engine_flags]
    if any(INFERENCEX_FILE in f for f in flags):  # a file of InferenceX's checkout (a chat template)
        checkout = runtime.inferencex_dir()
        if checkout is None:
            raise UserError(
                f"{spec.recipe}: its engine flags name a file of InferenceX's checkout; this runtime mounts none"
            )
        flags = [f.replace(INFERENCEX_FILE, checkout) for f in flags]
    if spec.draft_model is not None:  # the pre-downloaded draft (provisioning puts it there)
        flags = [f.replace(DRAFT_PATH, runtime.model_path(spec.draft_model)) for f in flags]
    if spec.model_revision is not None:  # the snapshot provisioning fetched and checked, not the hub's newest
        flags = [*flags, engine.revision_flag, spec.model_revision]
    flags, own_files = engine.files(flags, run_dir)  # settings the engine reads from a file of its own
    argv = engine.argv(
        runtime.head(spec.launcher), runtime.model_path(spec.model), spec.model_flag, spec.served_model_name,
        engine_port(spec, ports), flags,
    )  # fmt: skip
    offload = backend.offload(spec.backend, ports, engine.name)
    offload_flags, offload_env = engine.offload_args(offload) if offload is not None else ([], {})
    argv += offload_flags
    if part is not None:
        argv += engine.node_flags(part, spec.nodes, spec.ranks_per_node)
    else:
        argv += engine.local_rendezvous_flags(argv, ports.rendezvous)
    engine_env = {**COMMON_ENV, **spec.env, **offload_env, **(engine.node_env(part) if part is not None else {})}
    # a worker behind the engine's own frontend: its port and where the two find each other (Dynamo's)
    engine_env |= engine.port_env(engine_port(spec, ports)) | engine.deployment_env(run_dir)
    if runtime.hf_home:
        engine_env["HF_HOME"] = runtime.hf_home
    if runtime.engine_pythonpath:
        engine_env["PYTHONPATH"] = runtime.engine_pythonpath
    files = backend.engine_files(spec.backend, ports, run_dir)
    engine_env |= {f.env: str(f.path) for f in files}
    # a headless rank answers no HTTP: the head's health covers it once it has registered
    health = loopback(engine_port(spec, ports), spec.health_path) if part is None or part.index == 0 else None
    plan.servers.append(Process(
        ENGINE, runtime.wrap(argv, ENGINE), engine_env, health, spec.startup_timeout_s,
        files={**own_files, **{str(f.path): f.text for f in files}},
    ))  # fmt: skip
    if spec.router is not None and (part is None or part.index == 0):
        router = spec.router
        argv = [*router.launcher, router.host_flag, "127.0.0.1", router.port_flag, str(ports.engine)]
        if router.worker_urls_flag is not None:
            argv += [router.worker_urls_flag, loopback(ports.engine_behind_router)]
        argv += router.flags
        if router.metrics_port:
            argv += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(ports.router_metrics)]
        health = f"{plan.engine_url}{router.health_path}"
        env = {**COMMON_ENV, **router.env, **engine.deployment_env(run_dir)}
        plan.servers.append(Process(ROUTER, runtime.wrap(argv, ROUTER), env, health, router.startup_timeout_s))
    return plan


def replay_process(
    spec: ServingSpec, ports: ServerPorts, runtime: Runtime, artifact_dir: Path, trace: Path | None, turns: int
) -> Process:
    url = loopback(ports.engine)
    env: dict[str, str] = dict(COMMON_ENV)
    extra = spec.implementation.backend.metrics_urls(spec.backend, ports)
    if spec.router is not None:
        env |= spec.router.replay_env
        # aiperf scrapes the URL it sends to, the router, whose /metrics has none of the engine's: name the engine
        extra = [f"{engine_direct_url(spec, ports)}{spec.implementation.engine.metrics_path}", *extra]
    if spec.replay.kind == "production":
        env |= spec.replay.env
        if runtime.hf_home:  # the dataset provisioning fetched into the hub cache: aiperf reads it from there
            env["HF_HOME"] = runtime.hf_home
        argv = production_argv(runtime.aiperf_bin, spec, url, artifact_dir, runtime.model_path(spec.model), extra)
    else:
        assert trace is not None
        # aiperf finds the local tokenizer in an HF cache layout, offline (LOCAL_STACK.md).
        tokenizer = f"local/{Path(spec.model).name}"
        argv = synthetic_argv(runtime.aiperf_bin, spec, url, artifact_dir, trace, turns, tokenizer, extra)
        if runtime.hf_home:
            env |= {"HF_HOME": runtime.hf_home, "HF_HUB_OFFLINE": "1"}
    # aiperf (0.13) stops gracefully on SIGINT: it cancels what is in flight, flushes its per-request
    # JSONL and writes its aggregates. SIGTERM kills its controller at once (it has no handler for it).
    stop = signal.SIGINT if runtime.passes_sigint else signal.SIGTERM
    return Process("replay", runtime.wrap(argv, "replay"), env, stop_signal=stop)
