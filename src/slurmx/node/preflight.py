"""Checks on the node before any server starts; each failure is one line naming what is wrong."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from slurmx.backends import lmcache
from slurmx.node.runtime import Runtime
from slurmx.recipes.resolve import ServingSpec

GB = 1_000_000_000


def available_memory_bytes(meminfo: Path = Path("/proc/meminfo")) -> int:
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def visible_gpus(env: dict[str, str]) -> int:
    devices = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    return len([d for d in devices.split(",") if d]) if devices else 0


def memory_margin_bytes(l1_bytes: int) -> int:
    """Headroom over the L1 pool for the servers themselves: 5 %, at least 1 GB."""
    return max(GB, l1_bytes // 20)


def check_memory(spec: ServingSpec, available: int) -> str | None:
    l1 = (spec.backend.l1_size_gb or 0) * GB
    if not l1:
        return None
    need = l1 + memory_margin_bytes(l1)
    if available < need:
        return f"host memory: {available / GB:.1f} GB available, the L1 pool needs {l1 / GB:.0f} GB plus {memory_margin_bytes(l1) / GB:.0f} GB margin"
    return None


def check_shm(spec: ServingSpec, shm: Path = Path("/dev/shm")) -> str | None:
    """L1 in /dev/shm (a named --shm-name) is silently capped by the tmpfs size: refuse instead."""
    flags = spec.backend.server_flags
    if "--shm-name" not in flags:
        return None
    name = flags[flags.index("--shm-name") + 1] if flags.index("--shm-name") + 1 < len(flags) else ""
    if not name:
        return None
    free = shutil.disk_usage(shm).free
    need = (spec.backend.l1_size_gb or 0) * GB
    return f"/dev/shm has {free / GB:.1f} GB free, the L1 pool needs {need / GB:.0f} GB" if free < need else None


def check_gpus(spec: ServingSpec, env: dict[str, str]) -> str | None:
    seen, need = visible_gpus(env), spec.backend.gpus
    if seen != need:
        return f"GPUs: the point needs {need}, CUDA_VISIBLE_DEVICES shows {seen} ({env.get('CUDA_VISIBLE_DEVICES', 'unset')})"
    return None


def check_tools(spec: ServingSpec, runtime: Runtime) -> str | None:
    if runtime.kind != "venv":
        return None  # inside a container image: checked when the container starts
    for tool in (runtime.engine_python, runtime.aiperf_bin):
        if not os.access(tool, os.X_OK):
            return f"{tool} is not an executable (build the stack: scripts/local-stack.sh)"
    model = Path(runtime.model_path(spec.model))
    if not model.exists():
        return f"model {model} does not exist"
    return None


def check_connector(spec: ServingSpec, runtime: Runtime, timeout_s: float = 180) -> str | None:
    """The engine environment must import the connector's module, or vLLM dies at start-up."""
    if spec.backend.name != "lmcache" or runtime.kind != "venv":
        return None
    code = f"import {lmcache.CONNECTOR_MODULE}"
    try:
        proc = subprocess.run([runtime.engine_python, "-c", code], capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return f"importing {lmcache.CONNECTOR_MODULE} took over {timeout_s:.0f} s"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"the engine environment cannot import {lmcache.CONNECTOR_MODULE}: {last}"
    return None


def preflight(spec: ServingSpec, runtime: Runtime, env: dict[str, str]) -> list[str]:
    """Every failed check, cheapest first; empty when the point may start."""
    checks = [
        check_gpus(spec, env),
        check_tools(spec, runtime),
        check_memory(spec, available_memory_bytes()),
        check_shm(spec),
        check_connector(spec, runtime),
    ]
    return [c for c in checks if c]
