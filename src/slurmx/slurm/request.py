"""The Slurm resource request of a point, from its cluster profile: one source for plan and submit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slurmx.config.clusters import SlurmProfile


@dataclass(frozen=True)
class SlurmRequest:
    partition: str
    gpus: int
    gres_type: str | None
    features: tuple[str, ...]
    mem: str
    exclusive: bool
    time_limit_min: int
    account: str | None = None
    qos: str | None = None
    cpus_per_task: int | None = None

    @property
    def gres(self) -> str:
        return f"gpu:{self.gres_type}:{self.gpus}" if self.gres_type else f"gpu:{self.gpus}"

    @property
    def constraint(self) -> str | None:
        # Slurm ANDs features joined with '&'.
        return "&".join(self.features) if self.features else None

    def summary(self) -> str:
        parts = [self.partition, self.gres]
        if self.constraint:
            parts.append(f"-C {self.constraint}")
        parts.append(f"mem={self.mem}")
        if self.exclusive:
            parts.append("excl")
        parts.append(f"{self.time_limit_min}m")
        return " ".join(parts)

    def submitit_parameters(self) -> dict[str, Any]:
        """Keyword arguments for submitit's `update_parameters`."""
        params: dict[str, Any] = {
            "slurm_partition": self.partition,
            "slurm_gres": self.gres,
            "slurm_mem": self.mem,
            "timeout_min": self.time_limit_min,
            "nodes": 1,
            "tasks_per_node": 1,
        }
        if self.constraint:
            params["slurm_constraint"] = self.constraint
        if self.account:
            params["slurm_account"] = self.account
        if self.qos:
            params["slurm_qos"] = self.qos
        if self.cpus_per_task:
            params["cpus_per_task"] = self.cpus_per_task
        if self.exclusive:
            params["slurm_exclusive"] = True
        return params


def slurm_request(profile: SlurmProfile, gpus: int) -> SlurmRequest:
    return SlurmRequest(
        partition=profile.partition,
        gpus=gpus,
        gres_type=profile.gres_type,
        features=tuple(profile.features),
        mem=profile.mem,
        exclusive=profile.exclusive,
        time_limit_min=profile.time_limit_min,
        account=profile.account,
        qos=profile.qos,
        cpus_per_task=profile.cpus_per_task,
    )
