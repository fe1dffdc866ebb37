"""A point made ready to submit: its Slurm request and serving spec, resolved before anything is written."""

from __future__ import annotations

from dataclasses import dataclass

from slurmx.config.clusters import ClusterProfile
from slurmx.errors import UserError
from slurmx.inputs import Inputs
from slurmx.plan import Point
from slurmx.recipes.resolve import missing_implementation, resolve
from slurmx.recipes.spec import ServingSpec
from slurmx.runtimes import runtime_for
from slurmx.slurm.request import SlurmRequest, slurm_request
from slurmx.store.ledger import PointRecord, RepeatMode, labels_of


@dataclass(frozen=True)
class Resolved:
    point: Point
    profile: ClusterProfile
    request: SlurmRequest
    serving: ServingSpec | None  # None when the runtime serves nothing (kind command)

    @property
    def repeat_mode(self) -> RepeatMode:
        """Repeats share the point's server when the profile shares servers, else each is its own task."""
        return (
            "shared-server" if self.profile.slurm is not None and self.profile.slurm.share_server else "separate-tasks"
        )

    def record(self, sweep_id: str, repeats: int = 1) -> PointRecord:
        return PointRecord(
            point=self.point,
            sweep_id=sweep_id,
            labels=labels_of(self.point),
            cluster_profile=self.profile,
            slurm_request=self.request,
            serving=self.serving,
            repeats=repeats,
            repeat_mode=self.repeat_mode,
        )


def check_submittable(points: list[Point]) -> None:
    for p in points:
        if p.multinode or p.scenario != "agentic-coding":
            kind = "multinode" if p.multinode else p.scenario
            raise UserError(f"{p.config_key}: {kind} points cannot be submitted yet (single-node agentic-coding only)")


def resolve_points(points: list[Point], inputs: Inputs) -> list[Resolved]:
    """Every point's request and serving spec; any problem is raised before a file is written."""
    check_submittable(points)
    for point in points:
        missing = missing_implementation(point)
        if missing is not None:
            raise missing
    out = []
    for point in points:
        profile = inputs.submittable_profile(point)
        assert profile.slurm is not None
        serves = runtime_for(profile, point.image).serves
        serving = resolve(point, inputs.recipes()) if serves else None
        out.append(Resolved(point, profile, slurm_request(profile.slurm, point.gpus), serving))
    return out
