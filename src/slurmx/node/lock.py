"""lock.json beside result.json: what ran, as the node saw it.

The image (and its digest when the reference carries one), the distributions installed in the
engine's and aiperf's environments (what `pip show` reports), sha256 digests of every process's
argv and env, the node, its GPU models and the slurmx version. `collect` compares arms with it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from slurmx import __version__, backends
from slurmx.engines import Engine
from slurmx.node.gpus import VISIBLE_ENV
from slurmx.node.identity import node_name
from slurmx.node.supervisor import Supervisor
from slurmx.process import COMMON_ENV, Process
from slurmx.runtimes import Runtime
from slurmx.store import lockfile
from slurmx.store.lockfile import LockFile, NodeLock, ProcessDigest, Versions

AIPERF_DISTRIBUTIONS = ("aiperf",)
PROBE_TIMEOUT_S = 120.0
# prints {distribution: version} for the installed ones among argv[1:]
_PROBE = (
    "import sys, json, importlib.metadata as m\n"
    "out = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        out[name] = m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "print(json.dumps(out))\n"
)


def engine_distributions(engine: Engine, pinned: str | None = None) -> tuple[str, ...]:
    """What the engine's environment is probed for: the engine's own distributions, then every backend's,
    then the build the point's arm pins when it names another (Mooncake's CUDA 13 wheel)."""
    found = [*engine.distributions, *(b.distribution for b in backends.REGISTRY.values() if b.distribution)]
    return tuple(dict.fromkeys([*found, *([pinned] if pinned else [])]))


def interpreter_of(script: str) -> str:
    """The Python a console script runs under (its shebang), for probing that script's environment."""
    try:
        with open(script, "rb") as handle:
            first = handle.readline().decode(errors="replace").strip()
    except OSError:
        return "python3"
    return first[2:].split()[0] if first.startswith("#!") and "python" in first else "python3"


def probe_versions(
    supervisor: Supervisor, runtime: Runtime, name: str, python: str, distributions: tuple[str, ...]
) -> dict[str, str]:
    """Versions installed in one environment, read by its own interpreter (supervised, logged)."""
    argv = runtime.wrap([python, "-c", _PROBE, *distributions], name)
    managed = supervisor.start(name, argv, dict(COMMON_ENV), base_env=dict(os.environ))
    try:
        code = supervisor.wait(managed, timeout_s=PROBE_TIMEOUT_S)
    except Exception:  # a probe that hangs or fails leaves the versions unknown, not the point failed
        return {}
    if code != 0:
        return {}
    for line in reversed(managed.log_tail(20).strip().splitlines()):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            return {str(k): str(v) for k, v in data.items()}
    return {}


def gpu_models(supervisor: Supervisor) -> list[str]:
    if shutil.which("nvidia-smi") is None:
        return []
    argv = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]
    managed = supervisor.start("gpu-models", argv, {}, base_env=dict(os.environ))
    try:
        if supervisor.wait(managed, timeout_s=30) != 0:
            return []
    except Exception:  # no answer from the driver: unknown, not fatal
        return []
    return [line.strip() for line in managed.log_tail(64).splitlines() if line.strip()]


def image_digest(image: str | None) -> str | None:
    """The digest a pinned image reference carries (`repo@sha256:...`); None when it does not."""
    if image and "@sha256:" in image:
        return "sha256:" + image.split("@sha256:", 1)[1].split()[0]
    return None


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def process_digests(processes: list[Process]) -> dict[str, dict[str, str]]:
    return {p.name: {"argv_sha256": digest(p.argv), "env_sha256": digest(p.env)} for p in processes}


def node_lock(
    image: str, runtime: Runtime, engine_versions: dict[str, str], aiperf_versions: dict[str, str], gpus: list[str]
) -> NodeLock:
    """What a server group ran with (the part shared by its points); NUMA and provisioning are added by the
    body once they ran."""
    return NodeLock(
        image=image,
        image_digest=image_digest(image),
        runtime=runtime.kind,
        versions=Versions(engine=engine_versions, aiperf=aiperf_versions),
        node=node_name(),
        gpu_models=gpus,
        cuda_visible_devices=os.environ.get(VISIBLE_ENV),
        slurmx_version=__version__,
    )


def write_lock(path: Path, point_id: str, shared: NodeLock, processes: list[Process]) -> None:
    digests = {name: ProcessDigest(**d) for name, d in process_digests(processes).items()}
    lockfile.write_lock(
        path, LockFile(**shared.model_dump(), point_id=point_id, written_at=time.time(), processes=digests)
    )
