"""Where every point of a sweep is: the results tree plus one batched accounting query."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from slurmx.errors import UserError
from slurmx.slurm.accounting import JobInfo, Query, query_jobs
from slurmx.store.ledger import PointRecord, read_point, read_sweep
from slurmx.store.state import PointState, load_state
from slurmx.store.tree import PointDir, SweepDir

# Slurm's terminal states, in the words status shows.
_SLURM_END = {
    "COMPLETED": "completed",
    "FAILED": "failed",
    "CANCELLED": "cancelled",
    "TIMEOUT": "timeout",
    "NODE_FAIL": "node failure",
    "PREEMPTED": "preempted",
    "OUT_OF_MEMORY": "out of memory",
    "BOOT_FAIL": "node failure",
    "DEADLINE": "timeout",
}
UNREADABLE = "unreadable"  # a ledger file that does not parse: shown with its path, never a traceback
ENDED = frozenset({"completed", "failed", "cancelled", "timeout", "node failure", "preempted", "out of memory"})


@dataclass
class PointStatus:
    config_key: str
    sweep_id: str
    point_id: str
    parallelism: str
    backend: str
    conc: int | list[int] | None
    state: str
    stage: str | None
    node: str | None
    elapsed_s: float | None
    attempt: int | None
    job_id: str | None
    reason: str | None
    log: str | None
    log_tail: list[str]
    failed_nodes: list[str] = field(default_factory=list)  # nodes this point failed on for a node's reason
    requeues: list[str] = field(default_factory=list)  # how each attempt Slurm requeued had ended
    repeat: int = 1  # the repeat this row's state describes (the one still active or failed, when any)
    repeats: int = 1  # runs asked for (`submit --repeats`)
    repeats_done: int = 0  # runs that completed with a result

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def ended(self) -> bool:
        return self.state in ENDED or self.state in ("not submitted", UNREADABLE)


def _elapsed(text: str | None) -> float | None:
    """Slurm's [D-]HH:MM:SS or MM:SS to seconds."""
    if not text:
        return None
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return int(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def tail(path: Path, lines: int = 12) -> list[str]:
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - 16384))
            return handle.read().decode("utf-8", "replace").splitlines()[-lines:]
    except OSError:
        return []


def explaining_log(sweep: SweepDir, point: PointDir, job_id: str | None) -> Path | None:
    """The log most likely to explain how a point ended: its newest process log, else Slurm's."""
    logs = sorted(point.logs.glob("*.log"), key=lambda p: p.stat().st_mtime) if point.logs.is_dir() else []
    if logs:
        return logs[-1]
    if job_id and sweep.slurm_log(job_id).exists():
        return sweep.slurm_log(job_id)
    return None


def unreadable(sweep: SweepDir, point_id: str, problem: str) -> PointStatus:
    return PointStatus(
        config_key=sweep.config_key, sweep_id=sweep.sweep_id, point_id=point_id, parallelism="-", backend="-",
        conc=None, state=UNREADABLE, stage=None, node=None, elapsed_s=None, attempt=None, job_id=None,
        reason=problem, log=None, log_tail=[],
    )  # fmt: skip


def label(state: PointState | None, job: JobInfo | None) -> tuple[str, str | None]:
    """A point's state in status's words, and why: the body's record where it decided, Slurm's otherwise."""
    stage = state.stage if state else None
    reason = state.reason if state else None
    if state is None:
        return "not submitted", None
    if stage == "done":
        return "completed", reason  # a point of a server group finishes while its job runs on
    if job is not None and job.active:
        if stage == "failed":
            return "failed", reason
        return ("pending", job.reason) if job.state == "PENDING" else ("running", reason)
    if job is not None:
        word = _SLURM_END.get(job.state, job.state.lower())
        if word == "completed":  # stage "done" was handled above
            return "failed", reason or f"job ended while the point was at stage {stage}"
        if stage in ("failed", "cancelled") and word in ("failed", "cancelled"):
            # The body recorded how the point ended before its job did (a server group's failed point, then
            # scancel; a point torn down on scancel's signal, then a non-zero exit): its word stands.
            return str(stage), reason
        if stage == "queued":  # ended before the body could record anything: Slurm's word is the reason
            return word, reason or f"the job ended ({job.state}) before its body started"
        return word, reason
    if stage in ("failed", "cancelled"):
        return str(stage), reason
    if state.job_id is None:
        return ("unsubmitted" if stage == "queued" else str(stage)), reason
    return "unknown", reason or f"job {state.job_id} is not known to Slurm"


def node_of(state: PointState | None, job: JobInfo | None) -> str | None:
    """Slurm's node list (every node of a multi-node point), except on a requeued job's row: until accounting
    records the restart it names the old node, and the body of the new attempt knows better."""
    if job is not None and job.node and job.state != "REQUEUED":
        return job.node
    return (state.node if state else None) or (job.node if job else None)


def point_status(
    sweep: SweepDir, record: PointRecord, point: PointDir, jobs: dict[str, JobInfo], state: PointState | None
) -> PointStatus:
    job = jobs.get(state.job_id) if state and state.job_id else None
    stage = state.stage if state else None
    label_, reason = label(state, job)
    elapsed = _elapsed(job.elapsed) if job else None
    if elapsed is None and state and state.started_at:
        elapsed = (state.ended_at or time.time()) - state.started_at
    log = explaining_log(sweep, point, state.job_id if state else None) if label_ in ENDED - {"completed"} else None
    return PointStatus(
        config_key=record.config_key,
        sweep_id=record.sweep_id,
        point_id=record.point_id,
        parallelism=record.point.parallelism,
        backend=record.point.backend_name,
        conc=list(record.point.concs) if record.point.concs else record.point.conc,
        state=label_,
        stage=stage,
        node=node_of(state, job),
        elapsed_s=elapsed,
        attempt=state.attempt if state else None,
        job_id=state.job_id if state else None,
        reason=reason,
        log=str(log) if log else None,
        log_tail=tail(log) if log else [],
        failed_nodes=list(state.failed_nodes) if state else [],
        requeues=list(state.requeues) if state else [],
    )


# Which repeat speaks for a point: one still running or queued, else one that ended badly, else the first.
_SPEAKS_FIRST = ("running", "pending", "unsubmitted", "queued", "unknown")


def repeated_status(
    sweep: SweepDir, record: PointRecord, point: PointDir, jobs: dict[str, JobInfo], states: list[PointState | None]
) -> PointStatus:
    """A point over all its repeats: the state of the repeat that matters most, and repeats done/total."""
    runs = [point_status(sweep, record, point.repeat_dir(n), jobs, states[n - 1]) for n in range(1, record.repeats + 1)]
    for n, run in enumerate(runs, 1):
        run.repeat, run.repeats = n, record.repeats
    done = sum(1 for r in runs if r.state == "completed")
    active = [r for r in runs if r.state in _SPEAKS_FIRST]
    bad = [r for r in runs if r.state not in ("completed", "not submitted")]
    speaker = (active or bad or runs)[0]
    speaker.repeats_done = done
    return speaker


@dataclass
class SweepStatus:
    path: SweepDir
    points: list[PointStatus]
    problem: str | None = None  # sweep.json unreadable: the sweep is listed with this, its points are not

    @property
    def config_key(self) -> str:
        return self.path.config_key

    @property
    def sweep_id(self) -> str:
        return self.path.sweep_id


def _load(sweep_dir: SweepDir) -> tuple[SweepStatus, list[tuple[PointRecord, PointDir, list[PointState | None]]]]:
    """What the tree says of one sweep; every unreadable file becomes a status with its path and why."""
    try:
        sweep = read_sweep(sweep_dir)
    except UserError as exc:
        return SweepStatus(sweep_dir, [unreadable(sweep_dir, "-", str(exc))], str(exc)), []
    status = SweepStatus(sweep_dir, [])
    readable = []
    for point_id in sweep.point_ids:
        point = sweep_dir.point(point_id)
        if not point.point_json.exists():
            continue
        try:
            record = read_point(point)
        except UserError as exc:
            status.points.append(unreadable(sweep_dir, point_id, str(exc)))
            continue
        loads = [load_state(point.repeat_dir(n).state_json) for n in range(1, record.repeats + 1)]
        problem = next((why for _, why in loads if why), None)
        if problem:
            status.points.append(unreadable(sweep_dir, point_id, problem))
            continue
        readable.append((record, point, [state for state, _ in loads]))
    return status, readable


def sweep_statuses(sweeps: Iterable[SweepDir]) -> tuple[list[SweepStatus], Query]:
    """Statuses of every point of `sweeps`, with ONE accounting query for all of them."""
    loaded = [_load(sweep_dir) for sweep_dir in sweeps]
    job_ids = [st.job_id for _, readable in loaded for _, _, states in readable for st in states if st and st.job_id]
    query = query_jobs(job_ids)
    for status, readable in loaded:
        status.points += [repeated_status(status.path, rec, pt, query.jobs, sts) for rec, pt, sts in readable]
    return [status for status, _ in loaded], query
