"""Checks on the node before any server starts; each failure is one line naming what is wrong.

Generic checks here (GPUs, tools, host memory for the backend's pool); each backend adds its own.
"""

from __future__ import annotations

import os
from pathlib import Path

from slurmx.backends.base import GB
from slurmx.node import gpu_hygiene, gpus, identity
from slurmx.recipes.spec import ServingSpec
from slurmx.runtimes import Runtime


def available_memory_bytes(meminfo: Path = Path("/proc/meminfo")) -> int:
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def memory_margin_bytes(pool_bytes: int) -> int:
    """Headroom over the backend's pool for the servers themselves: 5 %, at least 1 GB."""
    return max(GB, pool_bytes // 20)


def check_memory(spec: ServingSpec, available: int) -> str | None:
    pool = spec.backend.host_memory_bytes()
    if not pool:
        return None
    need = pool + memory_margin_bytes(pool)
    if available < need:
        return (
            f"host memory: {available / GB:.1f} GB available, the {spec.backend.name} pool needs {pool / GB:.0f} GB plus "
            f"{memory_margin_bytes(pool) / GB:.0f} GB margin"
        )
    return None


def check_gpus(spec: ServingSpec, env: dict[str, str]) -> str | None:
    seen, need = gpus.visible_count(env), spec.gpus
    if seen != need:
        return f"GPUs: the point needs {need}, CUDA_VISIBLE_DEVICES shows {seen} ({env.get(gpus.VISIBLE_ENV, 'unset')})"
    return None


def check_tools(spec: ServingSpec, runtime: Runtime) -> str | None:
    if not runtime.tools_on_host:
        return None  # inside a container image: checked when the container starts
    for tool in (runtime.engine_python, runtime.aiperf_bin):
        if not os.access(tool, os.X_OK):
            return f"{tool} is not an executable (build the stack: scripts/local-stack.sh)"
    model = Path(runtime.model_path(spec.model))
    if not model.exists():
        return f"model {model} does not exist"
    return None


def check_node_clean(env: dict[str, str], remove_shm: bool, gpus_absent: str | None = None) -> str | None:
    """GPU hygiene and /dev/shm leftovers; what is only worth knowing goes to the job's log."""
    findings = gpu_hygiene.node_hygiene(env, remove_shm=remove_shm, gpus_absent=gpus_absent)
    for note in findings.notes:
        print(f"preflight: {note}", flush=True)
    return findings.failure(identity.node_name(env))


def preflight(
    spec: ServingSpec,
    runtime: Runtime,
    env: dict[str, str],
    *,
    remove_shm: bool = False,
    gpus_absent: str | None = None,
) -> list[str]:
    """Every failed check, cheapest first; empty when the point may start. `gpus_absent`: the profile's
    node.gpu-checks-absent (GPU hygiene skipped with that reason)."""
    checks = [
        check_gpus(spec, env),
        check_tools(spec, runtime),
        check_memory(spec, available_memory_bytes()),
        check_node_clean(env, remove_shm, gpus_absent),
    ]
    problems = [c for c in checks if c]
    return problems + spec.implementation.backend.preflight(spec.backend, runtime)
