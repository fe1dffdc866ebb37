"""The job body: each point goes preflight -> servers -> replay -> result under one supervisor.

Whatever ends the job (success, error, scancel's SIGTERM, the time-limit SIGUSR2, Ctrl-C), the
supervisor tears every process down before the next point starts or the job exits.
"""

from __future__ import annotations

import contextlib
import signal
import time

from slurmx.config.clusters import NodeProfile
from slurmx.node import procscan
from slurmx.node.command_body import run_command_point
from slurmx.node.identity import job_marker, marker_prefix, restart_count, slurm_job_id
from slurmx.node.multinode import Rendezvous, this_task
from slurmx.node.recorder import StageRecorder
from slurmx.node.serving_body import Member, run_group
from slurmx.node.supervisor import JOB_TEARDOWN_GRACE_S, JobInterrupted, Supervisor
from slurmx.node.worker_body import run_worker
from slurmx.runtimes import runtime_for
from slurmx.store.ledger import read_point
from slurmx.store.tree import SweepDir


def run_points(sweep: SweepDir, member_ids: list[str]) -> dict[str, str]:
    """Outcome per member (a point id, or "<point-id>.r<n>" for its repeat n): "done" or the one-line reason
    it did not finish."""
    outcomes: dict[str, str] = {}
    members = []
    for member_id in member_ids:
        point = sweep.member(member_id)
        member = Member(point, read_point(point), StageRecorder(point))
        if restart_count() and member.recorder.state.stage == "done":
            outcomes[member_id] = "done"  # a requeued job: this point finished in the run before
            continue
        members.append(member)
    if not members:
        return outcomes
    spec = members[0].record.serving
    rendezvous = None
    if spec is not None and spec.nodes > 1:
        task = this_task()
        # the attempt too: a requeued job keeps its id, and the earlier attempt's files must not count
        node_profile = members[0].record.cluster_profile.node or NodeProfile()
        rendezvous = Rendezvous(
            members[0].point.path,
            f"{slurm_job_id() or 'local'}.{restart_count()}",
            stale_s=node_profile.heartbeat_stale_s,
        )
        if task.index:  # not the head: this node's ranks until the head ends; state.json is the head's
            return {**outcomes, **run_worker(members, task, rendezvous)}
    if restart_count():
        _end_earlier_run(members[0].recorder)
        slurm = members[0].record.cluster_profile.slurm
        if slurm is not None and restart_count() > slurm.max_requeues:
            why = f"requeued {restart_count()} times by Slurm, over the profile's max-requeues {slurm.max_requeues}"
            for member in members:
                member.recorder.started()
                member.recorder.stage("failed", why)
                outcomes[member.point.member_id] = why
            if rendezvous is not None:
                rendezvous.end(why)
            return outcomes
    members[0].recorder.started()
    first = members[0].record
    runtime = runtime_for(first.cluster_profile, first.point.image)
    beating = rendezvous.beating(this_task().name) if rendezvous is not None else contextlib.nullcontext()
    try:
        with beating, Supervisor(members[0].point.path, job_marker(), grace_s=JOB_TEARDOWN_GRACE_S) as supervisor:
            if runtime.serves:
                run_group(members, runtime, supervisor, outcomes, rendezvous)
            else:
                for index, member in enumerate(members):
                    if index:
                        member.recorder.started()
                    run_command_point(member.record, member.recorder, supervisor, list(runtime.command), outcomes)
    except JobInterrupted as exc:
        name = signal.Signals(exc.signum).name
        why = "time limit near (SIGUSR2)" if exc.signum == signal.SIGUSR2 else f"interrupted by {name}"
        for member in members:
            if not member.recorder.ended:  # the member whose replay it cut short recorded it already
                member.recorder.ended_by(name, why)
            outcomes.setdefault(member.point.member_id, why)
        if exc.signum == signal.SIGUSR2:
            _await_time_limit()
    except Exception as exc:  # a bug, not a point's failure: record it, then let the job fail
        for member in members:
            if not member.recorder.ended:
                member.recorder.stage("failed", f"{exc.__class__.__name__}: {exc}".splitlines()[0])
        raise
    finally:
        if rendezvous is not None:  # every ending: the other nodes tear down their ranks too
            rendezvous.end(next((why for why in outcomes.values() if why != "done"), None))
    return outcomes


def _end_earlier_run(recorder: StageRecorder) -> None:
    """A requeued job may land where its earlier run left processes: end them before starting over."""
    job_id = slurm_job_id()
    if not job_id:
        return
    leftovers = procscan.earlier_attempts(marker_prefix(job_id), job_marker())
    for proc in leftovers:
        procscan.send(proc.pid, signal.SIGKILL)
    procscan.wait_gone([p.pid for p in leftovers], 10.0)


def _await_time_limit(bound_s: float = 600.0) -> None:
    """After a time-limit teardown, let Slurm end the job itself so accounting says TIMEOUT."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        time.sleep(1)
