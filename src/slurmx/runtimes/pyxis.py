"""Processes start inside the job's pyxis/enroot container, one `srun --overlap` step each."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar, Self

from slurmx.config.clusters import RuntimeProfile
from slurmx.config.load import WORKSPACE, mounts_workspace
from slurmx.runtimes.base import Runtime

# aiperf's own environment inside the job's container: never the engine's site-packages (aiperf's
# dependencies would upgrade FastAPI/transformers under the server), as InferenceX's isolated venv
AIPERF_VENV = "/tmp/slurmx-aiperf"


def squash_name(image: str) -> str:
    """InferenceX's file name for an imported image: / : @ # become _."""
    return re.sub(r"[/:@#]", "_", image) + ".sqsh"


@dataclass(frozen=True)
class PyxisRuntime(Runtime):
    kind: ClassVar[str] = "pyxis"
    template: ClassVar[str | None] = "pyxis.sh"
    installs: ClassVar[bool] = True  # the job's own container: pip changes die with it
    downloads: ClassVar[bool] = True
    # srun answers one SIGINT with a status report and forwards it only when a second comes within a second
    passes_sigint: ClassVar[bool] = False

    squash_dir: str | None = None
    container_mounts: tuple[str, ...] = ()

    @classmethod
    def from_profile(cls, profile: RuntimeProfile, image: str | None) -> Self:
        runtime = cls(
            model_root=profile.model_root,
            hf_home=profile.hf_home,
            trace_dir=profile.trace_dir,
            image=image,
            squash_dir=profile.squash_dir,
            container_mounts=tuple(profile.container_mounts),
        )
        if not profile.aiperf_source:
            return runtime  # the image's own aiperf
        venv = AIPERF_VENV
        return replace(runtime, aiperf_source=profile.aiperf_source, aiperf_bin=f"{venv}/bin/aiperf",
                       aiperf_python=f"{venv}/bin/python")  # fmt: skip

    def inferencex_dir(self) -> str | None:
        # the checkout mounted at /workspace (config.load.with_workspace), as InferenceX's launchers mount theirs
        return WORKSPACE if mounts_workspace(self.container_mounts) else None

    def squash_path(self) -> str:
        return str(Path(self.squash_dir or ".") / squash_name(self.image or "image"))

    def wrap(self, argv: list[str], name: str) -> list[str]:
        return [*self.srun_container_prefix(name), *argv]

    def place(self, wrapped: list[str], name: str, prefix: list[str]) -> list[str]:
        # numactl on the host would place srun, not the process slurmstepd starts in the container
        head = self.srun_container_prefix(name)
        assert wrapped[: len(head)] == head, f"{name}: not started by this runtime"
        return [*head, *prefix, *wrapped[len(head) :]]

    def srun_container_prefix(self, name: str) -> list[str]:
        # on the node whose task starts it: a step without a node list lands on the allocation's first node,
        # so a multinode point's other nodes would start their ranks on the head
        node = os.environ.get("SLURMD_NODENAME", "$SLURMD_NODENAME")
        prefix = [
            "srun", "--overlap", "--ntasks=1", f"--nodelist={node}", "--mpi=none", f"--job-name=slurmx-{name}",
            f"--container-image={self.squash_path()}",
            "--container-name=slurmx",  # every process of the job shares one container
            # writable whatever the site's ENROOT_ROOTFS_WRITABLE: provisioning pip-installs into the container
            "--no-container-mount-home", "--container-remap-root", "--container-writable",
            "--container-workdir=/workspace", "--no-container-entrypoint", "--export=ALL",
        ]  # fmt: skip
        if self.container_mounts:
            prefix.insert(7, f"--container-mounts={','.join(self.container_mounts)}")
        return prefix

    def template_values(self) -> dict[str, str]:
        return {**super().template_values(), "squash_dir": self.squash_dir or "", "squash_path": self.squash_path()}
