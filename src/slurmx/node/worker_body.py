"""A node other than the head of a multinode point: its backend servers and headless engine ranks, under
its own supervisor, until the head says the deployment is over or one of its processes dies.

Its commands and logs live under `points/<id>/nodes/<node>/`; what it reports goes to
`points/<id>/nodes/<node>.json`, which the head watches (node/multinode.py).
"""

from __future__ import annotations

import os
import signal
import time

from slurmx.node.identity import job_marker
from slurmx.node.launch import NodePart, placed
from slurmx.node.multinode import NodeTask, Rendezvous, head_node, node_address
from slurmx.node.recorder import PointFailed
from slurmx.node.serving_body import Member, prepare_node
from slurmx.node.supervisor import (
    JOB_TEARDOWN_GRACE_S,
    JobInterrupted,
    Managed,
    Supervisor,
    SupervisorError,
    describe_returncode,
)
from slurmx.runtimes import runtime_for

WATCH_S = 1.0  # between looks at this node's processes and the head's file


def run_worker(members: list[Member], task: NodeTask, rendezvous: Rendezvous) -> dict[str, str]:
    """Serve this node's ranks for the group's points; outcome per member ("done" or why this node failed)."""
    first = members[0]
    ids = [m.point.member_id for m in members]
    rendezvous.report(task.name, "starting")
    try:
        with (
            rendezvous.beating(task.name),
            Supervisor(rendezvous.node_dir(task.name), job_marker(), grace_s=JOB_TEARDOWN_GRACE_S) as supervisor,
        ):
            _serve(first, task, rendezvous, supervisor)
    except (PointFailed, SupervisorError) as exc:
        reason = str(exc).splitlines()[0]
        rendezvous.report(task.name, "failed", reason)
        return dict.fromkeys(ids, f"{task.name}: {reason}")
    except JobInterrupted as exc:
        rendezvous.report(task.name, "ended", f"interrupted by {signal.Signals(exc.signum).name}")
        raise
    rendezvous.report(task.name, "ended")
    return dict.fromkeys(ids, "done")


def _serve(first: Member, task: NodeTask, rendezvous: Rendezvous, supervisor: Supervisor) -> None:
    spec = first.spec
    head = rendezvous.await_head(timeout_s=spec.startup_timeout_s, head_node=head_node())
    if head is None:
        raise PointFailed(f"the head did not say where it listens within {spec.startup_timeout_s} s")
    if head.ended:
        return
    runtime = runtime_for(first.record.cluster_profile, first.record.point.image)
    prepared = prepare_node(
        first,
        runtime,
        supervisor,
        NodePart(task.index, head.address, head.rpc_port, head.master_port, node_address(task.name)),
        rendezvous.node_dir(task.name),
        head.backend_ports,
    )
    started: list[Managed] = []
    try:
        for process in prepared.plan.servers:  # this node's backend servers placed as on the head
            argv = placed(process, runtime, prepared.numa_prefix).argv
            managed = supervisor.start(process.name, argv, process.env, base_env=dict(os.environ))
            started.append(managed)
            if process.health_url:
                supervisor.wait_ready(managed, process.health_url, timeout_s=process.ready_timeout_s)
    except (PointFailed, SupervisorError):
        prepared.provisioning.finish()  # a failed provisioning check is the cause
        raise
    prepared.provisioning.finish()  # this node runs only once every check of its environment passed
    rendezvous.report(task.name, "running")
    while not rendezvous.ended():
        if (gone := rendezvous.head_gone()) is not None:  # the head's task died: no one else ends this node
            raise PointFailed(gone)
        for managed in started:
            code = supervisor.poll(managed)
            if code is not None:
                tail = managed.log_tail(3).strip().splitlines()
                raise PointFailed(
                    f"{managed.name} exited with {describe_returncode(code)}" + (f": {tail[-1]}" if tail else "")
                )
        time.sleep(WATCH_S)
