"""The job body: each point goes preflight -> servers -> replay -> result under one supervisor.

Whatever ends the job (success, error, scancel's SIGTERM, the time-limit SIGUSR2, Ctrl-C), the
supervisor tears every process down before the next point starts or the job exits.
"""

from __future__ import annotations

import os
import signal
import time

from slurmx.node.entry import PointFailed, StageRecorder, job_marker, load_record
from slurmx.node.supervisor import JobInterrupted, Supervisor
from slurmx.results.tree import PointDir, SweepDir
from slurmx.slurm.ledger import PointRecord

TEARDOWN_GRACE_S = 4.0  # below Slurm's KillWait, so our KILL comes before Slurm's


def run_points(sweep: SweepDir, point_ids: list[str]) -> dict[str, str]:
    """Outcome per point: "done" or the one-line reason it did not finish."""
    outcomes: dict[str, str] = {}
    for point_id in point_ids:
        point = sweep.point(point_id)
        recorder = StageRecorder(point)
        try:
            recorder.started()
            run_point(point, load_record(point), recorder)
            outcomes[point_id] = "done"
        except JobInterrupted as exc:
            name = signal.Signals(exc.signum).name
            recorder.state = recorder.state.model_copy(update={"ended_by": name})
            why = "time limit near (SIGUSR2)" if exc.signum == signal.SIGUSR2 else f"interrupted by {name}"
            recorder.stage("cancelled", why)
            outcomes[point_id] = why
            for rest in point_ids[point_ids.index(point_id) + 1 :]:
                outcomes[rest] = f"not run: {why}"
            if exc.signum == signal.SIGUSR2:
                _await_time_limit()
            break
        except PointFailed as exc:
            recorder.stage("failed", str(exc))
            outcomes[point_id] = str(exc)
        except Exception as exc:  # noqa: BLE001 - any error fails the point with its reason
            recorder.stage("failed", f"{exc.__class__.__name__}: {exc}".splitlines()[0])
            outcomes[point_id] = str(exc)
    return outcomes


def _await_time_limit(bound_s: float = 600.0) -> None:
    """After a time-limit teardown, let Slurm end the job itself so accounting says TIMEOUT."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        time.sleep(1)


def run_point(point: PointDir, record: PointRecord, recorder: StageRecorder) -> None:
    runtime = record.cluster_profile.get("runtime") or {}
    with Supervisor(point.path, job_marker(), grace_s=TEARDOWN_GRACE_S) as supervisor:
        if runtime.get("kind") == "command":
            _run_command(point, record, recorder, supervisor, runtime.get("command") or [])
        else:
            from slurmx.node.serving_body import run_serving

            run_serving(point, record, recorder, supervisor)
    recorder.stage("done")


def _run_command(
    point: PointDir, record: PointRecord, recorder: StageRecorder, supervisor: Supervisor, argv: list[str]
) -> None:
    """The `command` runtime: the point's work is one user command (cluster smoke tests)."""
    if not argv:
        raise PointFailed("runtime kind 'command' needs a 'command' argv in the cluster profile")
    recorder.stage("replay")
    env = {
        "SLURMX_POINT_DIR": str(point.path),
        "SLURMX_POINT_ID": record.point_id,
        "SLURMX_CONC": str(record.row["conc"]),
    }
    managed = supervisor.start("command", argv, env, base_env=dict(os.environ))
    code = supervisor.wait(managed)
    if code != 0:
        raise PointFailed(f"command exited with code {code} (see logs/command.log)")
