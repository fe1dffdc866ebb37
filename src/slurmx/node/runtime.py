"""How a process starts on the node: directly from a venv, or inside a pyxis container via srun.

The runtime comes from the point's cluster profile; model, HF cache and trace paths too.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmx.config.clusters import ClusterProfile, RuntimeProfile

TEMPLATES = Path(__file__).resolve().parents[3] / "sbatch_templates"
_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)")


def expand(value: str, env: dict[str, str] | None = None) -> str:
    """Shell-style ${VAR:-default} and $VAR expansion of profile paths (no other shell syntax)."""
    env = dict(os.environ) if env is None else env

    def sub(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        default = match.group(2)
        return env.get(name) or (default if default is not None else "")

    return _VAR.sub(sub, value)


@dataclass(frozen=True)
class Runtime:
    """Resolved runtime: tool paths (venv) or container settings (pyxis)."""

    kind: str
    engine_python: str
    lmcache_bin: str
    aiperf_bin: str
    model_root: str | None
    hf_home: str | None
    trace_dir: str | None
    image: str | None = None
    squash_dir: str | None = None
    container_mounts: tuple[str, ...] = ()

    def model_path(self, model: str) -> str:
        return str(Path(self.model_root) / model) if self.model_root else model

    def head(self, launcher: list[str]) -> list[str]:
        """A recipe launcher with {engine_python} filled in."""
        return [part.replace("{engine_python}", self.engine_python) for part in launcher]

    def wrap(self, argv: list[str], name: str) -> list[str]:
        """The argv that starts `argv` on this node: as is, or inside the job's container."""
        if self.kind != "pyxis":
            return argv
        return [*self.srun_container_prefix(name), *argv]

    def srun_container_prefix(self, name: str) -> list[str]:
        mounts = ",".join(self.container_mounts)
        prefix = [
            "srun", "--overlap", "--ntasks=1", "--mpi=none", f"--job-name=slurmx-{name}",
            f"--container-image={self.squash_path()}",
            "--container-name=slurmx",  # every process of the job shares one container
            "--no-container-mount-home", "--container-remap-root",
            "--container-workdir=/workspace", "--no-container-entrypoint", "--export=ALL",
        ]  # fmt: skip
        if mounts:
            prefix.insert(6, f"--container-mounts={mounts}")
        return prefix

    def squash_path(self) -> str:
        return str(Path(self.squash_dir or ".") / squash_name(self.image or "image"))


def squash_name(image: str) -> str:
    """InferenceX's file name for an imported image: / : @ # become _."""
    return re.sub(r"[/:@#]", "_", image) + ".sqsh"


def runtime_for(profile: dict[str, Any] | ClusterProfile, image: str | None = None) -> Runtime:
    raw = profile.runtime if isinstance(profile, ClusterProfile) else profile.get("runtime")
    runtime = raw if isinstance(raw, RuntimeProfile) else RuntimeProfile.model_validate(raw or {})
    if runtime.kind == "pyxis":
        return Runtime(
            kind="pyxis", engine_python="python3", lmcache_bin="lmcache", aiperf_bin="aiperf",
            model_root=runtime.model_root, hf_home=runtime.hf_home, trace_dir=runtime.trace_dir,
            image=image, squash_dir=runtime.squash_dir, container_mounts=tuple(runtime.container_mounts),
        )  # fmt: skip
    engine_python = expand(runtime.engine_python or "python3")
    return Runtime(
        kind=runtime.kind,
        engine_python=engine_python,
        lmcache_bin=str(Path(engine_python).parent / "lmcache") if runtime.engine_python else "lmcache",
        aiperf_bin=expand(runtime.aiperf_bin or "aiperf"),
        model_root=expand(runtime.model_root) if runtime.model_root else None,
        hf_home=expand(runtime.hf_home) if runtime.hf_home else None,
        trace_dir=expand(runtime.trace_dir) if runtime.trace_dir else None,
    )


def sbatch_setup_lines(profile: ClusterProfile, image: str | None = None) -> list[str]:
    """The job script's setup lines from sbatch_templates/<kind>.sh, with profile values filled in."""
    if profile.runtime is None:
        return []
    template = TEMPLATES / f"{profile.runtime.kind}.sh"
    if not template.exists():
        return []
    runtime = runtime_for(profile, image)
    values = {
        "squash_dir": runtime.squash_dir or "",
        "squash_path": runtime.squash_path() if runtime.kind == "pyxis" else "",
        "image": image or "",
        "hf_home": runtime.hf_home or "",
    }
    lines = []
    for line in template.read_text().splitlines():
        if line.startswith("#!") or not line.strip():
            continue
        for key, value in values.items():
            line = line.replace("{" + key + "}", shlex.quote(value))
        lines.append(line)
    return lines
