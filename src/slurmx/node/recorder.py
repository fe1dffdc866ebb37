"""A point's stages as the job body records them in state.json."""

from __future__ import annotations

from collections.abc import Callable

from slurmx.node.identity import node_name, restart_count, slurm_job_id
from slurmx.store.state import PointState, Stage, update_state
from slurmx.store.tree import ATTEMPT_FILES, PointDir


class PointFailed(Exception):
    """A point failed for a reason that fits on one line."""


class StageRecorder:
    """Writes stage changes of one point to its state.json (under the state's lock)."""

    def __init__(self, point: PointDir) -> None:
        self.point = point
        self.state = update_state(point.state_json, lambda s: s or PointState(point_id=point.point_id))

    def _write(self, change: Callable[[PointState], PointState]) -> None:
        mine = self.state

        def apply(current: PointState | None) -> PointState:
            if current is not None and self._superseded(current):
                return current
            return change(current or mine)

        written = update_state(self.point.state_json, apply)
        self.state = change(mine) if self._superseded(written) else written

    def _superseded(self, current: PointState) -> bool:
        """A newer attempt owns the file (`submit --only-failed` while this body still tears down after a
        cancel): this body's late stages must not end that attempt."""
        job_id = self.state.job_id
        return current.attempt > self.state.attempt or bool(job_id and current.job_id and current.job_id != job_id)

    def _update(self, **fields: object) -> None:
        self._write(lambda s: s.model_copy(update=fields))

    def stage(self, stage: Stage, reason: str | None = None) -> None:
        self._write(lambda s: s.advance(stage, reason))

    @property
    def ended(self) -> bool:
        return self.state.ended

    def started(self) -> None:
        fields: dict[str, object] = {"node": node_name(), "reason": None}
        if job_id := slurm_job_id():
            fields["job_id"] = job_id
        restarts = restart_count()
        if restarts > self.state.restarts:
            fields |= self._new_attempt(restarts)
        self._update(**fields)
        self.stage("preflight")

    def _new_attempt(self, restarts: int) -> dict[str, object]:
        """Slurm requeued the job: keep the earlier attempt's files, and start this one clean."""
        before = self.state
        archive = self.point.attempt(before.attempt)
        for name in ATTEMPT_FILES:
            source = self.point.path / name
            if source.exists() or source.is_symlink():
                archive.mkdir(parents=True, exist_ok=True)
                source.rename(archive / name)
        how = before.reason or f"stage {before.stage}"
        return {
            "attempt": before.attempt + 1,
            "restarts": restarts,
            "requeues": [*before.requeues, f"attempt {before.attempt} requeued by Slurm (restart {restarts}): {how}"],
            "started_at": None,
            "ended_at": None,
            "ended_by": None,
        }

    def ended_by(self, signal_name: str, reason: str) -> None:
        self._update(ended_by=signal_name)
        self.stage("cancelled", reason)
