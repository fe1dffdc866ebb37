"""The `command` runtime's body: each point's work is one user command (cluster smoke tests)."""

from __future__ import annotations

import os

from slurmx.node.recorder import PointFailed, StageRecorder
from slurmx.node.supervisor import Supervisor
from slurmx.store.ledger import PointRecord


def run_command_point(
    record: PointRecord, recorder: StageRecorder, supervisor: Supervisor, argv: list[str], outcomes: dict[str, str]
) -> None:
    try:
        if not argv:
            raise PointFailed("runtime kind 'command' needs a 'command' argv in the cluster profile")
        recorder.stage("replay")
        env = {
            "SLURMX_POINT_DIR": str(recorder.point.path),
            "SLURMX_POINT_ID": record.point_id,
            "SLURMX_CONC": str(record.point.conc),
        }
        name = "command" if recorder.point.path == supervisor.logs_dir.parent else f"command-{record.point_id}"
        managed = supervisor.start(name, argv, env, base_env=dict(os.environ))
        code = supervisor.wait(managed)
        if code != 0:
            raise PointFailed(f"command exited with code {code} (see logs/{name}.log)")
        recorder.stage("done")
        outcomes[recorder.point.member_id] = "done"
    except PointFailed as exc:
        recorder.stage("failed", str(exc))
        outcomes[recorder.point.member_id] = str(exc)
