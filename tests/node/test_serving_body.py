"""The serving job body's decisions, driven end to end with real small processes in place of the
engine and aiperf (tests/node/fake_engine.py, fake_aiperf.py): real ports, HTTP, process groups,
state.json and result.json; only vLLM and the replay are stand-ins.

Each point of a shared-server group must end done with a gated result.json, or failed with a
one-line reason and no result.json; one point's failure does not stop the next one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmx.backends.none import NoOffload
from slurmx.node.identity import job_marker
from tests.helpers.serving_group import Group, serving_group


@pytest.fixture
def group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Group:
    """The no-offload arm's two points (conc 2 and 4) queued in a sweep, sharing one server."""
    return serving_group(tmp_path, monkeypatch)


def _engine_gone(group: Group) -> bool:
    pid = int((group.root / "engine.pid").read_text())
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


def test_a_shared_server_group_runs_each_point_to_a_gated_result(group: Group) -> None:
    outcomes = group.run()
    assert outcomes == {group.ids[2]: "done", group.ids[4]: "done"}
    for conc in (2, 4):
        result = group.result(conc)
        assert result is not None and result.conc == conc
        assert result.slurmx is not None and result.slurmx.point_id == group.ids[conc]
        assert result.num_requests_successful == 12
    # the first point starts the servers; the second reuses them after a cache reset
    assert group.stages(2) == ["queued", "preflight", "engine", "replay", "aggregate", "done"]
    assert group.stages(4) == ["queued", "preflight", "replay", "aggregate", "done"]
    assert group.resets() == ["/reset_prefix_cache?reset_external=true"]
    assert group.state(4).reason is None
    for conc in (2, 4):  # aiperf carries the job's marker as its prefix: a sweep by job id finds it too
        marker = (group.root / f"replay-marker-{conc}").read_text()
        assert marker.startswith(f"{job_marker()}-") and marker.endswith("-replay"), marker
    shared_log = group.sweep.point(group.ids[4]).logs / "engine.log"
    assert shared_log.is_symlink() and shared_log.resolve() == (group.sweep.point(group.ids[2]).logs / "engine.log")
    assert _engine_gone(group)


def test_an_invalid_replay_fails_its_point_keeps_its_result_marked_invalid_and_the_next_point_runs(
    group: Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_AIPERF_2", "cancelled")
    outcomes = group.run()
    reason = "invalid result: the replay was cancelled before it finished (aiperf was_cancelled)"
    assert outcomes == {group.ids[2]: reason, group.ids[4]: "done"}
    # the gate runs before result.json is written: the file is kept, marked with the gate's reason
    kept = group.result(2)
    assert kept is not None and kept.slurmx is not None
    assert kept.slurmx.invalid_reason == "the replay was cancelled before it finished (aiperf was_cancelled)"
    assert (group.state(2).stage, group.state(2).reason) == ("failed", reason)
    assert group.stages(2)[-2:] == ["aggregate", "failed"]
    assert group.result(4) is not None


def test_a_failed_cache_reset_fails_the_next_point_with_the_reason(
    group: Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ENGINE_RESET", "500")
    outcomes = group.run()
    reason = "could not reset the engine's prefix cache between points (set VLLM_SERVER_DEV_MODE=1)"
    assert outcomes == {group.ids[2]: "done", group.ids[4]: reason}
    assert (group.state(4).stage, group.state(4).reason) == ("failed", reason)
    assert "replay" not in group.stages(4)  # a warm cache would skew the comparison: no replay at all
    assert group.result(4) is None and group.resets()


def test_a_failed_tier_reset_fails_the_next_point_with_the_tier_url(
    group: Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tier's clear not answering 2xx (here: nothing listens on its port) fails the point that would replay
    on the tier's warm cache, as a failed engine reset does."""
    dead = "http://127.0.0.1:1/cache/clear"  # port 1: refused on loopback
    monkeypatch.setattr(NoOffload, "cache_reset_urls", lambda self, spec, ports: [dead])
    outcomes = group.run()
    reason = f"could not reset the KV tier's cache between points (POST {dead})"
    assert outcomes == {group.ids[2]: "done", group.ids[4]: reason}
    assert "replay" not in group.stages(4) and group.result(4) is None
    assert group.resets() == ["/reset_prefix_cache?reset_external=true"]  # the engine's own reset did run


def test_a_replay_that_exits_non_zero_fails_its_point_with_aiperfs_last_line(
    group: Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_AIPERF_4", "exit")
    outcomes = group.run()
    reason = "aiperf exited with code 4: aiperf: error: the endpoint answered 500 to every request"
    assert outcomes == {group.ids[2]: "done", group.ids[4]: reason}
    assert group.state(4).reason == reason and group.result(4) is None


def test_a_failed_preflight_fails_every_point_of_the_group_and_starts_nothing(
    group: Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    outcomes = group.run()
    reason = "preflight: GPUs: the point needs 1, CUDA_VISIBLE_DEVICES shows 2 (0,1)"
    assert outcomes == {group.ids[2]: reason, group.ids[4]: reason}
    assert group.state(2).reason == reason and group.state(4).reason == f"not run: {reason}"
    assert group.stages(2) == ["queued", "preflight", "failed"]
    assert not (group.root / "engine.pid").exists()


def test_an_engine_that_dies_at_start_fails_the_group_with_its_last_log_line(
    group: Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ENGINE_EXIT", "1")
    outcomes = group.run()
    reason = outcomes[group.ids[2]]
    assert reason.startswith("engine did not become ready: ") and "exit" in reason, reason
    assert outcomes[group.ids[4]] == reason and group.state(4).reason == f"not run: {reason}"
    assert group.result(2) is None and group.result(4) is None


# ---- the array task's entry point, in its own process as Slurm runs it ---------------------------

ENTRY = "import sys; from slurmx.node.entry import run_job; run_job(sys.argv[1], sys.argv[2:])"


def _run_job(group: Group) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", ENTRY, str(group.sweep.path), group.ids[2], group.ids[4]]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def test_the_job_fails_in_slurms_eyes_when_a_point_failed(group: Group, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a failure that costs no server start
    proc = _run_job(group)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    reason = "preflight: GPUs: the point needs 1, CUDA_VISIBLE_DEVICES shows 0 ()"
    assert f"JobFailed: {group.ids[2]}: {reason}; {group.ids[4]}: {reason}" in err
    assert [group.state(conc).stage for conc in (2, 4)] == ["failed", "failed"]


def test_sigterm_during_the_replay_cancels_every_unfinished_point_and_stops_the_engine(
    group: Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_AIPERF_2", "hang")
    proc = _run_job(group)
    deadline = time.monotonic() + 30
    while not (group.root / "replaying").exists():  # the replay of the first point is running
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the replay never started"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)  # scancel
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, err
    for conc in (2, 4):
        state = group.state(conc)
        assert (state.stage, state.ended_by, state.reason) == ("cancelled", "SIGTERM", "interrupted by SIGTERM")
        assert group.result(conc) is None
    assert _engine_gone(group)


def test_the_result_records_the_error_threshold_the_node_gated_with(group: Group) -> None:
    for conc in (2, 4):  # the recipe's threshold, as point.json carries it to the node
        path = group.sweep.point(group.ids[conc]).point_json
        record = json.loads(path.read_text())
        replay = record["serving"]["replay"]
        key = next(k for k in replay if k.replace("-", "_") == "failed_request_threshold")
        replay[key] = 0.37
        path.write_text(json.dumps(record))
    assert group.run() == {group.ids[2]: "done", group.ids[4]: "done"}
    for conc in (2, 4):
        result = group.result(conc)
        assert result is not None and result.slurmx is not None
        assert result.slurmx.failed_request_threshold == 0.37
