"""The sweep ledger in the results tree: sweep.json, point.json and state.json, written atomically.

Everything `status`, `cancel` and a later `submit` need is here, so any shell can pick up a sweep.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from slurmx import __version__, atomic
from slurmx.config.clusters import ClusterProfile
from slurmx.plan import Point
from slurmx.results.state import PointState, read_state, write_state
from slurmx.results.tree import PointDir, SweepDir
from slurmx.slurm.request import SlurmRequest


def sweep_id_for(config_key: str, points: list[Point]) -> str:
    """Same plan, same sweep: a hash of the key and its sorted point ids."""
    blob = config_key + "\n" + "\n".join(sorted(p.point_id for p in points))
    return "s" + hashlib.sha256(blob.encode()).hexdigest()[:10]


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Submission(BaseModel):
    at: float
    array_job_id: str | None = None  # None for a dry run or a failed sbatch
    tasks: dict[str, list[str]] = Field(default_factory=dict)  # array task index -> point ids
    sbatch_calls: int = 0


class Sweep(BaseModel):
    slurmx_version: str
    config_key: str
    sweep_id: str
    created_at: float
    config_files: dict[str, str]  # path -> sha256
    clusters_file: dict[str, str]
    cluster_label: str
    cluster_profile: dict[str, Any]
    point_ids: list[str]
    submissions: list[Submission] = Field(default_factory=list)


class PointRecord(BaseModel):
    """point.json: everything the job body needs, frozen at submit time."""

    point_id: str
    config_key: str
    sweep_id: str
    row: dict[str, Any]
    cluster_label: str
    cluster_profile: dict[str, Any]
    slurm_request: dict[str, Any]
    serving: dict[str, Any] | None = None  # resolved recipe, filled by the job-body layer


def read_sweep(sweep: SweepDir) -> Sweep:
    return Sweep.model_validate_json(sweep.sweep_json.read_text(encoding="utf-8"))


def write_sweep(sweep: SweepDir, record: Sweep) -> None:
    atomic.write_text(sweep.sweep_json, record.model_dump_json(indent=2) + "\n")


def read_point(point: PointDir) -> PointRecord:
    return PointRecord.model_validate_json(point.point_json.read_text(encoding="utf-8"))


def new_sweep(
    sweep: SweepDir,
    points: list[Point],
    config_files: list[Path],
    clusters_file: Path,
    profile: ClusterProfile,
) -> Sweep:
    """The existing sweep.json if there is one, else a fresh record (written by the caller)."""
    if sweep.sweep_json.exists():
        return read_sweep(sweep)
    return Sweep(
        slurmx_version=__version__,
        config_key=points[0].config_key,
        sweep_id=sweep.sweep_id,
        created_at=time.time(),
        config_files={str(p.resolve()): file_digest(p) for p in config_files},
        clusters_file={str(clusters_file.resolve()): file_digest(clusters_file)},
        cluster_label=points[0].runner,
        cluster_profile=profile.model_dump(by_alias=True),
        point_ids=[p.point_id for p in points],
    )


def point_record(
    point: Point, sweep_id: str, profile: ClusterProfile, request: SlurmRequest, serving: dict[str, Any] | None
) -> PointRecord:
    row = point.row()
    row["point-id"] = point.point_id
    return PointRecord(
        point_id=point.point_id,
        config_key=point.config_key,
        sweep_id=sweep_id,
        row=row,
        cluster_label=point.runner,
        cluster_profile=profile.model_dump(by_alias=True),
        slurm_request={"gres": request.gres, "constraint": request.constraint, **request.__dict__, "features": list(request.features)},
        serving=serving,
    )


def queue_point(point_dir: PointDir, record: PointRecord) -> PointState:
    """Write point.json and a queued state.json for the next attempt (before sbatch)."""
    atomic.write_text(point_dir.point_json, record.model_dump_json(indent=2) + "\n")
    previous = read_state(point_dir.state_json)
    attempt = previous.attempt + 1 if previous else 1
    state = PointState(point_id=record.point_id, attempt=attempt, submitted_at=time.time()).advance("queued")
    write_state(point_dir.state_json, state)
    return state


def record_job_id(point_dir: PointDir, job_id: str) -> None:
    state = read_state(point_dir.state_json)
    if state is not None:
        write_state(point_dir.state_json, state.model_copy(update={"job_id": job_id}))
