"""The job body: each point goes preflight -> servers -> replay -> result under one supervisor.

Whatever ends the job (success, error, scancel's SIGTERM, the time-limit SIGUSR2, Ctrl-C), the
supervisor tears every process down before the next point starts or the job exits.
"""

from __future__ import annotations

import os
import signal
import time

from slurmx.node.entry import PointFailed, StageRecorder, job_marker
from slurmx.node.supervisor import JobInterrupted, Supervisor
from slurmx.results.state import TERMINAL_STAGES
from slurmx.results.tree import SweepDir
from slurmx.slurm.ledger import PointRecord, read_point

TEARDOWN_GRACE_S = 4.0  # below Slurm's KillWait, so our KILL comes before Slurm's


def run_points(sweep: SweepDir, point_ids: list[str]) -> dict[str, str]:
    """Outcome per point: "done" or the one-line reason it did not finish."""
    from slurmx.node.serving_body import Member, run_group

    outcomes: dict[str, str] = {}
    members = []
    for point_id in point_ids:
        point = sweep.point(point_id)
        members.append(Member(point, read_point(point), StageRecorder(point)))
    members[0].recorder.started()
    try:
        with Supervisor(members[0].point.path, job_marker(), grace_s=TEARDOWN_GRACE_S) as supervisor:
            runtime = members[0].record.cluster_profile.get("runtime") or {}
            if runtime.get("kind") == "command":
                for index, member in enumerate(members):
                    if index:
                        member.recorder.started()
                    _run_command_point(member.record, member.recorder, supervisor, runtime.get("command") or [], outcomes)
            else:
                run_group(members, supervisor, outcomes)
    except JobInterrupted as exc:
        name = signal.Signals(exc.signum).name
        why = "time limit near (SIGUSR2)" if exc.signum == signal.SIGUSR2 else f"interrupted by {name}"
        for member in members:
            if member.recorder.state.stage not in TERMINAL_STAGES:
                member.recorder.state = member.recorder.state.model_copy(update={"ended_by": name})
                member.recorder.stage("cancelled", why)
                outcomes[member.record.point_id] = why
        if exc.signum == signal.SIGUSR2:
            _await_time_limit()
    except Exception as exc:  # a bug, not a point's failure: record it, then let the job fail
        for member in members:
            if member.recorder.state.stage not in TERMINAL_STAGES:
                member.recorder.stage("failed", f"{exc.__class__.__name__}: {exc}".splitlines()[0])
        raise
    return outcomes


def _await_time_limit(bound_s: float = 600.0) -> None:
    """After a time-limit teardown, let Slurm end the job itself so accounting says TIMEOUT."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        time.sleep(1)


def _run_command_point(
    record: PointRecord, recorder: StageRecorder, supervisor: Supervisor, argv: list[str], outcomes: dict[str, str]
) -> None:
    """The `command` runtime: the point's work is one user command (cluster smoke tests)."""
    try:
        if not argv:
            raise PointFailed("runtime kind 'command' needs a 'command' argv in the cluster profile")
        recorder.stage("replay")
        env = {
            "SLURMX_POINT_DIR": str(recorder.point.path),
            "SLURMX_POINT_ID": record.point_id,
            "SLURMX_CONC": str(record.row["conc"]),
        }
        name = "command" if recorder.point.path == supervisor.logs_dir.parent else f"command-{record.point_id}"
        managed = supervisor.start(name, argv, env, base_env=dict(os.environ))
        code = supervisor.wait(managed)
        if code != 0:
            raise PointFailed(f"command exited with code {code} (see logs/{name}.log)")
        recorder.stage("done")
        outcomes[record.point_id] = "done"
    except PointFailed as exc:
        recorder.stage("failed", str(exc))
        outcomes[record.point_id] = str(exc)
