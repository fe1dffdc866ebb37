"""state.json: the stage a point has reached. Submit and the job body both change it, so every change
is a read-modify-write under the point's lock: neither can overwrite what the other just wrote."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from slurmx.store import atomic

Stage = Literal["queued", "preflight", "lmcache", "engine", "replay", "aggregate", "done", "failed", "cancelled"]
TERMINAL_STAGES = ("done", "failed", "cancelled")


class StageChange(BaseModel):
    stage: Stage
    at: float


class PointState(BaseModel):
    point_id: str
    stage: Stage = "queued"
    attempt: int = 1
    job_id: str | None = None  # Slurm id of this attempt, "<array>_<task>" for array tasks
    node: str | None = None
    reason: str | None = None  # why the point failed, one line
    ended_by: str | None = None  # the signal that ended the attempt (SIGTERM, SIGUSR2 = time limit near)
    submitted_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    failed_nodes: list[str] = Field(default_factory=list)  # nodes this point failed on for a node's reason
    restarts: int = 0  # SLURM_RESTART_COUNT this attempt started with: Slurm's requeues of the same job id
    requeues: list[str] = Field(default_factory=list)  # one line per requeue: how the attempt before it ended
    history: list[StageChange] = Field(default_factory=list)

    def advance(self, stage: Stage, reason: str | None = None) -> PointState:
        now = time.time()
        update: dict[str, object] = {"stage": stage, "history": [*self.history, StageChange(stage=stage, at=now)]}
        if stage == "preflight" and self.started_at is None:
            update["started_at"] = now
        if stage in TERMINAL_STAGES:
            update["ended_at"] = now
        if reason is not None:
            update["reason"] = reason
        return self.model_copy(update=update)

    @property
    def ended(self) -> bool:
        return self.stage in TERMINAL_STAGES


def read_state(path: Path) -> PointState | None:
    """The point's state; None when there is none, or when the file cannot be read (see state_problem)."""
    return load_state(path)[0]


def load_state(path: Path) -> tuple[PointState | None, str | None]:
    """(state, None), (None, None) when the file does not exist, or (None, why) for a corrupt or unreadable one."""
    try:
        return PointState.model_validate_json(path.read_text(encoding="utf-8")), None
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{path}: unreadable: {exc}"
    except ValueError as exc:
        first = str(exc).splitlines()[1] if len(str(exc).splitlines()) > 1 else str(exc)
        return None, f"{path}: not a valid state file ({first.strip()})"


@contextmanager
def _state_lock(path: Path) -> Iterator[None]:
    # A sidecar lock file: state.json itself is replaced on every write, so it cannot hold the lock.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def update_state(path: Path, change: Callable[[PointState | None], PointState]) -> PointState:
    """Apply `change` to the current state (None if there is none) and write the result atomically."""
    with _state_lock(path):
        state = change(read_state(path))
        atomic.write_text(path, state.model_dump_json(indent=2) + "\n")
        return state
