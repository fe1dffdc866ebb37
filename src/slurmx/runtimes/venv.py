"""Processes start from Python environments on the node itself (the local CPU stack, bare-metal clusters)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Self

from slurmx.config.clusters import RuntimeProfile
from slurmx.runtimes.base import Runtime, expand


@dataclass(frozen=True)
class VenvRuntime(Runtime):
    kind: ClassVar[str] = "venv"
    template: ClassVar[str | None] = "venv.sh"
    tools_on_host: ClassVar[bool] = True

    @classmethod
    def from_profile(cls, profile: RuntimeProfile, image: str | None) -> Self:
        engine_python = expand(profile.engine_python or "python3")
        return cls(
            engine_python=engine_python,
            # lmcache lives in the engine's environment: its connector runs inside the engine anyway
            lmcache_bin=str(Path(engine_python).parent / "lmcache") if profile.engine_python else "lmcache",
            aiperf_bin=expand(profile.aiperf_bin or "aiperf"),
            model_root=expand(profile.model_root) if profile.model_root else None,
            hf_home=expand(profile.hf_home) if profile.hf_home else None,
            trace_dir=expand(profile.trace_dir) if profile.trace_dir else None,
            image=image,
            engine_pythonpath=expand(profile.engine_pythonpath) if profile.engine_pythonpath else None,
            mooncake_master_bin=expand(profile.mooncake_master_bin or "mooncake_master"),
        )
