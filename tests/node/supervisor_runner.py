"""A job body in its own process, so the signal tests can signal it the way Slurm would.

usage: supervisor_runner.py RUN_DIR MARKER PORT MODE GRACE_S BODY   (BODY: sleep | wait)
Writes RUN_DIR/outcome.json and exits with 128+signum when interrupted.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from slurmx.node.supervisor import HANDLED_SIGNALS, JobInterrupted, Supervisor

HERE = Path(__file__).resolve().parent
BODY_BOUND_S = 8.0  # without a signal the body ends by itself, so a broken handler fails fast

calls: list[int] = []


def submitit_like(signum: int, frame: FrameType | None) -> None:
    calls.append(signum)  # stands in for the handlers submitit installs before the body runs


def main() -> int:
    run_dir, marker, port, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    grace_s, body = float(sys.argv[5]), sys.argv[6]
    for signum in (signal.SIGTERM, signal.SIGUSR2):
        signal.signal(signum, submitit_like)
    before = {signum: signal.getsignal(signum) for signum in HANDLED_SIGNALS}
    outcome: dict[str, object] = {}
    code = 0
    supervisor = Supervisor(run_dir, marker, grace_s=grace_s)
    try:
        with supervisor:
            pidfile = run_dir / "tree.json"
            tree = supervisor.start("tree", [sys.executable, str(HERE / "proc_tree.py"), str(pidfile), port, mode])
            deadline = time.monotonic() + BODY_BOUND_S
            while not pidfile.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            (run_dir / "runner-ready").write_text("ready")
            if body == "wait":
                supervisor.wait(tree)  # blocked in waitpid, as a `command` runtime body is
            while time.monotonic() < deadline:
                time.sleep(0.05)
        outcome["interrupted"] = None
    except JobInterrupted as exc:
        outcome["interrupted"] = exc.signum
        code = exc.exit_code
    outcome["previous_handler_calls"] = calls
    outcome["handlers_restored"] = all(signal.getsignal(s) == before[s] for s in HANDLED_SIGNALS)
    outcome["report"] = supervisor.report.to_dict() if supervisor.report else None
    (run_dir / "outcome.json").write_text(json.dumps(outcome))
    return code


if __name__ == "__main__":
    sys.exit(main())
