"""The sweep ledger in the results tree: sweep.json and each point's point.json, written atomically.

Everything `status`, `cancel`, a later `submit` and the job body need is here, typed, so any shell
(and any node) can pick up a sweep.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from slurmx import __version__
from slurmx.config.clusters import ClusterProfile
from slurmx.digest import file_digest
from slurmx.errors import UserError
from slurmx.plan import Point
from slurmx.recipes.spec import ServingSpec
from slurmx.slurm.request import SlurmRequest
from slurmx.store import atomic
from slurmx.store.state import PointState, update_state
from slurmx.store.tree import PointDir, SweepDir

M = TypeVar("M", bound=BaseModel)

# How a point's repeats ran: each its own array task, or back to back on one shared server (caches reset
# between them). Arms' repeats of the same index are paired only when they ran as separate tasks, round by round.
RepeatMode = Literal["separate-tasks", "shared-server"]


def sweep_id_for(config_key: str, points: list[Point]) -> str:
    """Same plan, same sweep: a hash of the key and its sorted point ids (all of the key's points)."""
    blob = config_key + "\n" + "\n".join(sorted(p.point_id for p in points))
    return "s" + hashlib.sha256(blob.encode()).hexdigest()[:10]


class Submission(BaseModel):
    at: float
    array_job_id: str | None = None  # None for a dry run or a failed sbatch
    tasks: dict[str, list[str]] = Field(default_factory=dict)  # array task index -> point ids
    request: str | None = None  # the array's Slurm request, in `slurmx plan`'s words
    sbatch_calls: int = 0


class Sweep(BaseModel):
    slurmx_version: str
    config_key: str
    sweep_id: str
    created_at: float
    config_files: dict[str, str]  # path -> sha256
    clusters_file: dict[str, str]
    cluster_label: str
    cluster_profile: ClusterProfile
    point_ids: list[str]
    submissions: list[Submission] = Field(default_factory=list)


class UntilCertified(BaseModel):
    """`submit --until-certified`: replay the point in rounds until the named percentiles of the headline metrics
    are certified (results/certify.py: stop_reason), within a budget and after a minimum duration."""

    model_config = ConfigDict(frozen=True)

    percentiles: tuple[str, ...]  # ("p90", ...), as certify.parse_percentiles reads them
    max_point_minutes: float
    min_duration_s: float = 0.0
    rel_width: float | None = None  # the +- relative width certified at (`--rel-width`); None: certify's default

    def summary(self) -> str:
        """What `render` and `submit --dry-run` say of it."""
        floor = f", at least {self.min_duration_s:g} s" if self.min_duration_s else ""
        width = f" to +-{self.rel_width:.0%}" if self.rel_width is not None else ""
        return (
            f"until {','.join(self.percentiles)} certified{width}: cold rounds aiperf/round-<k>/, "
            f"budget {self.max_point_minutes:g} min{floor}"
        )


class PointRecord(BaseModel):
    """point.json: the point typed end to end, frozen at submit time. Its names (parallelism, backend, GPUs)
    are the point's own properties; the `labels` block older files carry is ignored on read."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    point: Point
    sweep_id: str
    cluster_profile: ClusterProfile
    slurm_request: SlurmRequest
    serving: ServingSpec | None = None  # None for a runtime that serves nothing (kind command)
    repeats: int = 1  # how many times the point runs (`submit --repeats`)
    repeat_mode: RepeatMode = "separate-tasks"
    # None: replayed once; left out of point.json then, so a point without the flag writes the file it always did
    until_certified: UntilCertified | None = Field(default=None, exclude_if=lambda value: value is None)

    @property
    def point_id(self) -> str:
        return self.point.point_id

    @property
    def config_key(self) -> str:
        return self.point.config_key


def read_sweep(sweep: SweepDir) -> Sweep:
    return _read(Sweep, sweep.sweep_json)


def write_sweep(sweep: SweepDir, record: Sweep) -> None:
    atomic.write_text(sweep.sweep_json, record.model_dump_json(indent=2, by_alias=True) + "\n")


def read_point(point: PointDir) -> PointRecord:
    return _read(PointRecord, point.point_json)


def _read(model: type[M], path: Path) -> M:
    try:
        return model.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: unreadable: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(
            f"{path}: not a {model.__name__} of this slurmx ({where}: {first['msg']}); resubmit with --force"
        ) from None


def new_sweep(
    sweep: SweepDir, points: list[Point], config_files: list[Path], clusters_file: Path, profile: ClusterProfile
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
        cluster_profile=profile,
        point_ids=[p.point_id for p in points],
    )


def queue_point(point_dir: PointDir, record: PointRecord) -> PointState:
    """Write point.json and a queued state.json for the next attempt (before sbatch)."""
    atomic.write_text(point_dir.point_json, record.model_dump_json(indent=2, by_alias=True) + "\n")

    def queued(previous: PointState | None) -> PointState:
        attempt = previous.attempt + 1 if previous else 1
        failed_nodes = list(record.slurm_request.exclude)  # decided by submit; kept so status can show them
        return PointState(
            point_id=record.point_id, attempt=attempt, submitted_at=time.time(), failed_nodes=failed_nodes
        ).advance("queued")

    return update_state(point_dir.state_json, queued)


def record_job_id(point_dir: PointDir, job_id: str) -> None:
    """After sbatch: the job id, unless the job already started and recorded its own."""

    def with_job(state: PointState | None) -> PointState:
        assert state is not None, f"{point_dir.state_json} vanished between queue and sbatch"
        return state if state.job_id else state.model_copy(update={"job_id": job_id})

    update_state(point_dir.state_json, with_job)
