"""Every process a point starts, as argv + env delta + health URL: one function for body and golden files."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from slurmx.backends import ServerPorts, kv_transfer_config, lmcache, mooncake
from slurmx.node.replay import production_argv, synthetic_argv
from slurmx.node.runtime import Runtime
from slurmx.recipes.resolve import ServingSpec


# Every process logs unbuffered, so a failure's log tail shows its last words.
COMMON_ENV = {"PYTHONUNBUFFERED": "1"}


@dataclass(frozen=True)
class Process:
    name: str  # lmcache, mooncake-master, engine, replay
    argv: list[str]
    env: dict[str, str]
    health_url: str | None = None
    ready_timeout_s: float = 600.0


@dataclass
class LaunchPlan:
    servers: list[Process] = field(default_factory=list)  # in start order: backend server, engine, router
    engine_url: str = ""  # where clients (the replay) connect

    @property
    def engine(self) -> Process:
        return next(p for p in self.servers if p.name == "engine")


def engine_port(spec: ServingSpec, ports: ServerPorts) -> int:
    return ports.engine_behind_router if spec.router is not None else ports.engine


def engine_argv(spec: ServingSpec, ports: ServerPorts, runtime: Runtime) -> list[str]:
    model = runtime.model_path(spec.model)
    argv = runtime.head(spec.launcher)
    argv += [spec.model_flag, model] if spec.model_flag else [model]
    argv += ["--served-model-name", spec.served_model_name, "--host", "127.0.0.1", "--port", str(engine_port(spec, ports))]
    argv += spec.engine_flags
    connector = kv_transfer_config(spec.backend, ports)
    if connector is not None:
        argv += ["--kv-transfer-config", json.dumps(connector, separators=(",", ":"))]
    return argv


def launch_plan(spec: ServingSpec, ports: ServerPorts, runtime: Runtime) -> LaunchPlan:
    plan = LaunchPlan(engine_url=f"http://127.0.0.1:{ports.engine}")
    backend = spec.backend
    if backend.name == "lmcache":
        argv = lmcache.server_argv([runtime.lmcache_bin, "server"], backend, ports)
        env = {**COMMON_ENV, "PYTHONHASHSEED": spec.env["PYTHONHASHSEED"], "LMCACHE_DISABLE_BANNER": "1"}
        plan.servers.append(
            Process("lmcache", runtime.wrap(argv, "lmcache"), env, lmcache.health_url(ports), backend.startup_timeout_s)
        )
    elif backend.name == "mooncake":
        argv = mooncake.master_argv(["mooncake_master"], backend, ports)
        plan.servers.append(Process("mooncake-master", runtime.wrap(argv, "mooncake-master"), {}, None, 60))
    engine_env = {**COMMON_ENV, **spec.env}
    if runtime.hf_home:
        engine_env["HF_HOME"] = runtime.hf_home
    plan.servers.append(
        Process(
            "engine",
            runtime.wrap(engine_argv(spec, ports, runtime), "engine"),
            engine_env,
            f"http://127.0.0.1:{engine_port(spec, ports)}{spec.health_path}",
            spec.startup_timeout_s,
        )
    )
    if spec.router is not None:
        router = spec.router
        argv = [*router.launcher, "--host", "127.0.0.1", "--port", str(ports.engine),
                "--worker-urls", f"http://127.0.0.1:{ports.engine_behind_router}", *router.flags]
        plan.servers.append(
            Process("router", runtime.wrap(argv, "router"), dict(COMMON_ENV), f"{plan.engine_url}{router.health_path}",
                    router.startup_timeout_s)
        )
    return plan


def replay_process(
    spec: ServingSpec, ports: ServerPorts, runtime: Runtime, artifact_dir: Path, trace: Path | None, turns: int
) -> Process:
    url = f"http://127.0.0.1:{ports.engine}"
    env: dict[str, str] = dict(COMMON_ENV)
    extra = [lmcache.metrics_url(ports)] if spec.backend.name == "lmcache" else []
    if spec.replay.kind == "production":
        argv = production_argv(runtime.aiperf_bin, spec, url, artifact_dir, runtime.model_path(spec.model), extra)
    else:
        assert trace is not None
        # aiperf finds the local tokenizer in an HF cache layout, offline (LOCAL_STACK.md).
        tokenizer = f"local/{Path(spec.model).name}"
        argv = synthetic_argv(runtime.aiperf_bin, spec, url, artifact_dir, trace, turns, tokenizer, extra)
        if runtime.hf_home:
            env |= {"HF_HOME": runtime.hf_home, "HF_HUB_OFFLINE": "1"}
    return Process("replay", runtime.wrap(argv, "replay"), env)
