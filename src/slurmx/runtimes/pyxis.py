"""Processes start inside the job's pyxis/enroot container, one `srun --overlap` step each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Self

from slurmx.config.clusters import RuntimeProfile
from slurmx.runtimes.base import Runtime


def squash_name(image: str) -> str:
    """InferenceX's file name for an imported image: / : @ # become _."""
    return re.sub(r"[/:@#]", "_", image) + ".sqsh"


@dataclass(frozen=True)
class PyxisRuntime(Runtime):
    kind: ClassVar[str] = "pyxis"
    template: ClassVar[str | None] = "pyxis.sh"
    installs: ClassVar[bool] = True  # the job's own container: pip changes die with it
    downloads: ClassVar[bool] = True

    squash_dir: str | None = None
    container_mounts: tuple[str, ...] = ()

    @classmethod
    def from_profile(cls, profile: RuntimeProfile, image: str | None) -> Self:
        return cls(
            model_root=profile.model_root,
            hf_home=profile.hf_home,
            trace_dir=profile.trace_dir,
            image=image,
            squash_dir=profile.squash_dir,
            container_mounts=tuple(profile.container_mounts),
        )

    def squash_path(self) -> str:
        return str(Path(self.squash_dir or ".") / squash_name(self.image or "image"))

    def wrap(self, argv: list[str], name: str) -> list[str]:
        return [*self.srun_container_prefix(name), *argv]

    def srun_container_prefix(self, name: str) -> list[str]:
        prefix = [
            "srun", "--overlap", "--ntasks=1", "--mpi=none", f"--job-name=slurmx-{name}",
            f"--container-image={self.squash_path()}",
            "--container-name=slurmx",  # every process of the job shares one container
            "--no-container-mount-home", "--container-remap-root",
            "--container-workdir=/workspace", "--no-container-entrypoint", "--export=ALL",
        ]  # fmt: skip
        if self.container_mounts:
            prefix.insert(6, f"--container-mounts={','.join(self.container_mounts)}")
        return prefix

    def template_values(self) -> dict[str, str]:
        return {**super().template_values(), "squash_dir": self.squash_dir or "", "squash_path": self.squash_path()}
