"""Cluster profiles: per cluster label the node's hardware figures and how Slurm is asked for it.

The file is a superset of InferenceX's runners.yaml: its `hardware:` block loads unchanged,
and slurmx adds optional `slurm:` and `runtime:` sections per label.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, StringConstraints, field_validator, model_validator

from slurmx.config.master import kebab


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, alias_generator=kebab, populate_by_name=True)


class SlurmProfile(_Model):
    """What sbatch is asked for; GPU count comes from each point."""

    partition: str
    account: str | None = None
    qos: str | None = None
    gres_type: str | None = None  # None: plain gpu:<n>
    features: list[str] = Field(default_factory=list)
    # sbatch --exclude: nodes the cluster's own launcher keeps off (known-bad hardware); a resubmit adds the
    # nodes a point failed on to these
    exclude: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-\[\],]*$")]] = Field(
        default_factory=list
    )
    # sbatch --mem of a point that pins no host pool; a point's backend pool plus preflight's margin is
    # added to it (slurmx.slurm.request.point_mem). "0" asks for all of a node's memory, pool or not.
    mem: str = Field(default="0", pattern=r"^\d+[KMGTkmgt]?[Bb]?$")
    exclusive: bool = True
    time_limit_min: PositiveInt = 480
    array_parallelism: PositiveInt = 64
    share_server: bool = False  # one job runs all concurrencies of a serving config on one server
    signal_delay_s: PositiveInt = 120  # SIGUSR2 this long before the time limit, so teardown runs
    # the cluster's KillWait (Slurm's default 30): scancel's SIGTERM, then SIGKILL this much later;
    # the body fits the replay's graceful stop, the partial result and the servers' teardown into it
    kill_wait_s: PositiveInt = 30
    cpus_per_task: PositiveInt | None = None
    # The NUMA requirement of the node: at least this many sockets (sbatch --sockets-per-node), checked
    # against the partition's nodes at submit.
    sockets_per_node: PositiveInt | None = None
    # A point that failed for a node's reason on this many nodes is not resubmitted by --only-failed.
    max_node_failures: PositiveInt = 3
    # A job Slurm requeued more often than this (node failures, preemption) stops instead of running again.
    max_requeues: int = Field(default=3, ge=0)
    # The site's lines for the job script, before the runtime's preamble (module loads, proxies, scratch
    # setup): each one shell line, run as written on every node of the job.
    setup: list[str] = Field(default_factory=list)

    @field_validator("setup")
    @classmethod
    def _one_line_each(cls, lines: list[str]) -> list[str]:
        for i, line in enumerate(lines):
            if "\n" in line or "\r" in line:
                raise ValueError(f"setup line {i + 1} holds a line break: give each shell line its own list entry")
        return lines

    @model_validator(mode="after")
    def _signal_after_start(self) -> Self:
        # Slurm checks signal times about once a minute: a lead this close to the limit can hit the
        # job while it starts, before the body can tear anything down.
        if self.signal_delay_s > self.time_limit_min * 60 - 60:
            raise ValueError(
                f"signal-delay-s {self.signal_delay_s} leaves under a minute of a {self.time_limit_min}-minute "
                "time limit: raise time-limit-min or lower signal-delay-s"
            )
        return self


EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class RuntimeProfile(_Model):
    """How processes start on the node and where models, caches and traces live."""

    kind: str = "venv"  # a registered runtime kind (slurmx.runtimes): venv, pyxis, command
    command: list[str] | None = None  # command: run this argv as the point's work (cluster smoke tests)
    engine_python: str | None = None  # venv: the Python of the vLLM (+ lmcache) environment
    # venv: the engine process's PYTHONPATH, colon-separated (the local stack's shim for vLLM's CPU build and its
    # Mooncake site, scripts/local-stack.sh); provisioning's checks with the engine's Python see it too
    engine_pythonpath: str | None = None
    mooncake_master_bin: str | None = None  # venv: the Mooncake store's master executable (None: on PATH)
    aiperf_bin: str | None = None  # venv: the aiperf executable
    # pyxis: what pip installs as the replay's aiperf, in its own venv in the job's container (a checkout of
    # InferenceX's aiperf fork on the cluster's filesystem, or a pinned release); None: the image's aiperf
    aiperf_source: str | None = None
    container_mounts: list[str] = Field(default_factory=list)  # pyxis: src:dst pairs
    squash_dir: str | None = None  # pyxis: where imported images live
    model_root: str | None = None  # directory holding model weights, by model name
    hf_home: str | None = None
    trace_dir: str | None = None
    # exported by the job script before anything starts, as the cluster's launcher exports it for its job
    # (every process inherits it; pyxis steps pass it into the container with --export=ALL); taken literally
    env: dict[EnvName, str] = Field(default_factory=dict)


NumaPolicy = Literal["bind", "interleave", "none"]


class NodeProfile(_Model):
    """What the job body may do to a node before a point starts."""

    clean_shm: bool = False  # remove an earlier LMCache server's /dev/shm segments (no live process maps them)
    # the LMCache server's L1 pool: bound to the NUMA nodes of the point's GPUs, interleaved across them, or left
    numa_policy: NumaPolicy = "none"
    # A multinode point's node whose heartbeat file is older than this is taken for gone (its task died):
    # above the results tree's attribute caching (NFS's acdirmax defaults to 60 s).
    heartbeat_stale_s: PositiveInt = 90
    # Why this node's GPUs get no hygiene checks and no power samples (their vendor's tools are not NVML):
    # the job records the reason and goes on, as on a node with no GPU at all.
    gpu_checks_absent: str | None = Field(default=None, min_length=1)
    # The node's /dev/shm in GiB, as `df -BG` reports it: what an upstream script that sizes LMCache against free
    # /dev/shm sees under capture (the capture's `df` stand-in, upstream/capture.py); None: not known.
    shm_gib: PositiveInt | None = None


class ClusterProfile(_Model):
    available_cpu_dram_mib: PositiveInt
    gpus_per_node: PositiveInt
    slurm: SlurmProfile | None = None
    runtime: RuntimeProfile | None = None
    node: NodeProfile | None = None


class ClustersFile(_Model):
    """The file's shape; each hardware entry is validated on its own (a bad one blocks only its label)."""

    labels: dict[str, list[str]] | None = None  # InferenceX runner labels; read, not used
    hardware: dict[str, Any] = Field(default_factory=dict)
