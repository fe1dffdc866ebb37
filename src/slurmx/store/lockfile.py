"""lock.json as a typed record: what ran for a point, as the node saw it (written by node/lock.py).

A server group's shared part (`NodeLock`: image, versions per environment, node, GPUs, NUMA placement,
provisioning) plus the point's own (`LockFile`: its id, when, and digests of every process it started).
Extra keys are kept on read, so a lock written by a newer slurmx still reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from slurmx.errors import UserError
from slurmx.store import atomic


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Versions(_Record):
    """Distribution -> version, read by each environment's own interpreter."""

    engine: dict[str, str] = Field(default_factory=dict)
    aiperf: dict[str, str] = Field(default_factory=dict)


class ProcessDigest(_Record):
    argv_sha256: str
    env_sha256: str


class ProvisionStep(_Record):
    step: str
    argv: list[str]
    result: str


class NodeLock(_Record):
    """The part a server group's points share."""

    image: str
    image_digest: str | None = None
    runtime: str
    versions: Versions = Field(default_factory=Versions)
    node: str
    gpu_models: list[str] = Field(default_factory=list)
    cuda_visible_devices: str | None = None
    slurmx_version: str
    numa: dict[str, Any] = Field(default_factory=dict)  # node/numa.py's placement record
    provision: list[ProvisionStep] = Field(default_factory=list)
    aiperf_revision: str | None = None  # the commit of the aiperf checkout the replay was installed from
    model_revision: str | None = None  # the model's commit provisioning checked (a recipe's model-revision)


class LockFile(NodeLock):
    point_id: str
    written_at: float
    processes: dict[str, ProcessDigest] = Field(default_factory=dict)


def write_lock(path: Path, lock: LockFile) -> None:
    atomic.write_json(path, lock.model_dump(mode="json"))


def read_lock(path: Path) -> LockFile:
    try:
        return LockFile.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError) as exc:
        raise UserError(f"{path}: not a readable lock.json: {str(exc).splitlines()[0]}") from None
