"""Process runtimes as a registry: one module per kind (venv, pyxis, command); a new kind is one file.

`runtime_for(profile, image)` resolves a cluster profile's `runtime:` section for one point.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from slurmx.config.clusters import ClusterProfile, RuntimeProfile
from slurmx.errors import ConfigError, UserError
from slurmx.runtimes.base import Runtime
from slurmx.runtimes.command import CommandRuntime
from slurmx.runtimes.pyxis import PyxisRuntime
from slurmx.runtimes.venv import VenvRuntime

REGISTRY: dict[str, type[Runtime]] = {}


def register(kind: type[Runtime]) -> type[Runtime]:
    REGISTRY[kind.kind] = kind
    return kind


for _kind in (VenvRuntime, PyxisRuntime, CommandRuntime):
    register(_kind)


def get(kind: str) -> type[Runtime]:
    try:
        return REGISTRY[kind]
    except KeyError:
        raise UserError(f"no runtime kind {kind!r} in slurmx (have: {', '.join(sorted(REGISTRY))})") from None


def runtime_for(profile: ClusterProfile, image: str | None = None) -> Runtime:
    section = profile.runtime or RuntimeProfile()
    return replace(get(section.kind).from_profile(section, image), env=tuple(section.env.items()))


__all__ = ["REGISTRY", "Runtime", "get", "register", "runtime_for"]


def kind_errors(
    clusters_path: Path, profiles: dict[str, ClusterProfile], lines: dict[str, int | None]
) -> dict[str, ConfigError]:
    """Per label whose profile names a runtime kind slurmx lacks, a located one-line error."""
    errors = {}
    for label, profile in profiles.items():
        if profile.runtime is not None and profile.runtime.kind not in REGISTRY:
            errors[label] = ConfigError(
                clusters_path, lines.get(label), f"hardware.{label}.runtime.kind",
                f"unknown runtime kind {profile.runtime.kind!r} (have: {', '.join(sorted(REGISTRY))})",
            )  # fmt: skip
    return errors
