"""The job body's own decisions around the points (node/body.py, node/command_body.py), driven in-process: the
`command` runtime's points (a user command each, no serving stack), and a job Slurm requeued (points done in the
run before are not run again, the earlier run's leftover processes are killed, too many requeues stop the job)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from slurmx.node.body import _await_time_limit
from tests.helpers.serving_group import Group, serving_group

# the point's work: say what it was told (point id, concurrency), where it was told to (its directory)
# and count its runs in the directory the job's environment names (it inherits the job's env besides its own)
SAY = 'echo "$SLURMX_POINT_ID $SLURMX_CONC" > "$SLURMX_POINT_DIR/said"; echo said >> "${{FAKE_ENGINE_DIR:?}}/runs"'
COMMAND = "{{{{ kind: command, command: [sh, -c, '{say}'] }}}}"


def _command_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, say: str = SAY, slurm: str = "") -> Group:
    return serving_group(tmp_path, monkeypatch, runtime=COMMAND.format(say=say), slurm=slurm)


def _runs(group: Group) -> int:
    path = group.root / "runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_the_command_runtime_runs_its_command_once_per_point_with_the_points_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = _command_group(tmp_path, monkeypatch)
    assert group.run() == {group.ids[2]: "done", group.ids[4]: "done"}
    for conc in (2, 4):
        point = group.point(conc)
        assert (point.path / "said").read_text() == f"{group.ids[conc]} {conc}\n"
        assert group.stages(conc) == ["queued", "preflight", "replay", "done"]
    assert _runs(group) == 2
    # the first point's command is the job's "command"; the next ones are named for their point (one logs/ dir)
    logs = group.point(2).logs
    assert (logs / "command.log").exists() and (logs / f"command-{group.ids[4]}.log").exists()


def test_a_command_that_fails_fails_its_point_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    group = _command_group(tmp_path, monkeypatch, say='[ "$SLURMX_CONC" = 2 ] || exit 3')
    reason = f"command exited with code 3 (see logs/command-{group.ids[4]}.log)"
    assert group.run() == {group.ids[2]: "done", group.ids[4]: reason}
    assert (group.state(4).stage, group.state(4).reason) == ("failed", reason)
    assert group.state(2).stage == "done"


def test_a_command_runtime_without_a_command_fails_every_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    group = serving_group(tmp_path, monkeypatch, runtime="{{ kind: command }}")
    reason = "runtime kind 'command' needs a 'command' argv in the cluster profile"
    assert group.run() == {group.ids[2]: reason, group.ids[4]: reason}
    assert group.stages(4) == ["queued", "preflight", "failed"]


def test_a_requeued_job_skips_the_points_its_earlier_run_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = _command_group(tmp_path, monkeypatch)
    assert group.run(2) == {group.ids[2]: "done"}  # the first run got this far before its node failed
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert group.run() == {group.ids[2]: "done", group.ids[4]: "done"}
    assert _runs(group) == 2  # point 2 once, point 4 once
    assert group.stages(2) == ["queued", "preflight", "replay", "done"]  # untouched by the requeued run
    assert group.run() == {group.ids[2]: "done", group.ids[4]: "done"}  # all done: nothing to start
    assert _runs(group) == 2


def test_a_job_requeued_more_often_than_the_profile_allows_fails_its_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = _command_group(tmp_path, monkeypatch, slurm=", max-requeues: 1")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    why = "requeued 2 times by Slurm, over the profile's max-requeues 1"
    assert group.run() == {group.ids[2]: why, group.ids[4]: why}
    assert _runs(group) == 0
    assert (group.state(4).stage, group.state(4).reason) == ("failed", why)


def test_a_job_requeued_as_often_as_the_profile_allows_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    group = _command_group(tmp_path, monkeypatch, slurm=", max-requeues: 2")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert group.run() == {group.ids[2]: "done", group.ids[4]: "done"}


JOB = "918273645"  # a job id no other process on this machine carries


def _leftover(marker: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"], env={"PATH": "/usr/bin:/bin", "SLURMX_JOB_MARKER": marker})


def test_a_requeued_job_kills_what_its_earlier_run_left_and_spares_other_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = _command_group(tmp_path, monkeypatch)
    earlier = _leftover(f"{JOB}-12345")  # the earlier attempt's process: the job's id, another body's pid
    other = _leftover(f"{JOB}0-12345")  # another job whose id starts with this one's digits
    try:
        monkeypatch.setenv("SLURM_JOB_ID", JOB)
        assert group.run() == {group.ids[2]: "done", group.ids[4]: "done"}  # not requeued: nothing is killed
        assert earlier.poll() is None
        monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
        group.point(4).state_json.unlink()  # point 4 still to run in the requeued job
        assert group.run() == {group.ids[2]: "done", group.ids[4]: "done"}
        assert earlier.wait(timeout=10) == -9  # SIGKILLed, before the points ran
        assert other.poll() is None
    finally:
        for proc in (earlier, other):
            proc.kill()
            proc.wait()


def test_after_a_time_limit_teardown_the_body_waits_for_slurm_with_sigterm_at_its_default() -> None:
    """After SIGUSR2's teardown the body waits for Slurm's own end of the job (so accounting says TIMEOUT), with
    SIGTERM back at its default so Slurm's signal ends the process; the wait is bounded."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        began = time.monotonic()
        _await_time_limit(bound_s=0.2)
        waited = time.monotonic() - began
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert 0.2 <= waited < 5.0  # its one-second naps: at most one past the bound
