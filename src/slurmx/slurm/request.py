"""The Slurm resource request of a point, from its cluster profile: one source for plan and submit."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from slurmx.config.clusters import SlurmProfile


class SlurmRequest(BaseModel):
    """What sbatch asks for one job; points with equal requests share one array."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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
    exclude: tuple[str, ...] = ()  # nodes this point failed on for a node's reason (sbatch --exclude)

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
        if self.exclude:
            parts.append(f"--exclude {','.join(self.exclude)}")
        return " ".join(parts)


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
