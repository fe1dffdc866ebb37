"""The Slurm resource request of a point, from its cluster profile and the point: one source for plan and submit."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from slurmx.config.clusters import NumaPolicy, SlurmProfile
from slurmx.errors import UserError


class SlurmRequest(BaseModel):
    """What sbatch asks for one job; points with equal requests share one array."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: str
    gpus: int  # per node
    gres_type: str | None
    features: tuple[str, ...]
    mem: str
    exclusive: bool
    time_limit_min: int
    account: str | None = None
    qos: str | None = None
    cpus_per_task: int | None = None
    nodes: int = 1  # a multinode point's allocation: gpus, mem and features are per node
    exclude: tuple[str, ...] = ()  # nodes this point failed on for a node's reason (sbatch --exclude)
    # NUMA, from the profile's node.numa-policy and slurm.sockets-per-node:
    gres_flags: str | None = None  # sbatch --gres-flags: "enforce-binding", the GPUs come with their affine cores
    sockets_per_node: int | None = None  # sbatch --sockets-per-node: only nodes with at least this many sockets
    mem_bind: str | None = None  # the job step's srun --mem-bind: "local", memory of the allocated cores' NUMA nodes

    @property
    def gres(self) -> str:
        return f"gpu:{self.gres_type}:{self.gpus}" if self.gres_type else f"gpu:{self.gpus}"

    @property
    def constraint(self) -> str | None:
        # Slurm ANDs features joined with '&'.
        return "&".join(self.features) if self.features else None

    def summary(self) -> str:
        parts = [self.partition, self.gres]
        if self.nodes > 1:
            parts.append(f"x{self.nodes} nodes")
        if self.constraint:
            parts.append(f"-C {self.constraint}")
        parts.append(f"mem={self.mem}")
        if self.exclusive:
            parts.append("excl")
        if self.gres_flags:
            parts.append(self.gres_flags)
        if self.sockets_per_node:
            parts.append(f"sockets>={self.sockets_per_node}")
        if self.mem_bind:
            parts.append(f"mem-bind={self.mem_bind}")
        parts.append(f"{self.time_limit_min}m")
        if self.exclude:
            parts.append(f"--exclude {','.join(self.exclude)}")
        return " ".join(parts)


def mem_mb(mem: str) -> int:
    """sbatch --mem syntax to MB; 0 means all of a node's memory."""
    match = re.fullmatch(r"(\d+)([KMGT]?)B?", mem.strip().upper())
    if not match:
        raise UserError(f"invalid Slurm memory request {mem!r} (use e.g. 16G, 500M or 0)")
    number, unit = int(match.group(1)), match.group(2)
    if unit == "K":  # Slurm rounds up to whole megabytes: --mem=1500K holds a job to 2M
        return -(-number // 1024)
    return number * {"": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]


def point_mem(profile_mem: str, host_need_mb: int) -> str:
    """sbatch --mem of a point: the profile's memory (the engine and the rest) plus the point's host-DRAM
    need (its backend's pool and margin). A profile that takes a node's whole memory (0) keeps it."""
    if host_need_mb <= 0 or mem_mb(profile_mem) == 0:
        return profile_mem
    return f"{mem_mb(profile_mem) + host_need_mb}M"


def numa_options(policy: NumaPolicy) -> tuple[str | None, str | None]:
    """What Slurm is asked for a NUMA policy of the LMCache pool.

    `bind` and `interleave` place the pool on the NUMA nodes of the point's GPUs, so the job asks for
    those GPUs with their affine cores (--gres-flags=enforce-binding); `bind` also keeps the job step's
    memory local to those cores (srun --mem-bind=local; sbatch 22.05 has no --cpu-bind, and with
    task/affinity the one task is bound to its allocated cores already). `none` asks nothing.
    Returns (gres-flags, mem-bind)."""
    if policy == "none":
        return None, None
    return "enforce-binding", "local" if policy == "bind" else None


def slurm_request(
    profile: SlurmProfile,
    gpus: int,
    nodes: int = 1,
    *,
    host_need_mb: int = 0,
    numa_policy: NumaPolicy = "none",
    time_limit_min: int | None = None,
) -> SlurmRequest:
    gres_flags, mem_bind = numa_options(numa_policy)
    return SlurmRequest(
        nodes=nodes,
        partition=profile.partition,
        gpus=gpus,
        gres_type=profile.gres_type,
        features=tuple(profile.features),
        mem=point_mem(profile.mem, host_need_mb),
        exclusive=profile.exclusive,
        time_limit_min=time_limit_min or profile.time_limit_min,
        account=profile.account,
        qos=profile.qos,
        cpus_per_task=profile.cpus_per_task,
        exclude=tuple(profile.exclude),
        sockets_per_node=profile.sockets_per_node,
        gres_flags=gres_flags,
        mem_bind=mem_bind,
    )
