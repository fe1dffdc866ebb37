"""Fault tests: whatever ends a job, no process of it survives, its state and reason are recorded,
and its logs are kept. Processes are found by the job's env marker, never by name."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from slurmx.results import gate
from slurmx.results.schema import Result
from tests.helpers.jobs import wait_left_queue
from tests.stack.conftest import ROOT, StackEnv, job_processes, kill, process_with

pytestmark = pytest.mark.stack
KILL_WAIT_S = 15  # scripts/local-slurm.sh's KillWait, the local profiles' kill-wait-s


def _one_point(env: StackEnv, key: str, backend: str = "lmcache", sessions: int = 24) -> dict[str, Any]:
    # A longer trace, so there is time to strike mid-replay.
    env.recipe(**{"replay.sessions-per-conc": sessions})
    env.key(key, [(backend, [2])])
    return env.submit(key)


def _stage(env: StackEnv, key: str, stage: str) -> dict[str, Any]:
    return env.wait_for(key, lambda s: s[0]["stage"] == stage or s[0]["state"] in ("failed", "completed"))[0]


def _ended(env: StackEnv, key: str) -> dict[str, Any]:
    # Slurm reports the end at once; the body records its reason a moment later.
    return env.wait_for(
        key,
        lambda s: s[0]["state"] not in ("pending", "running") and s[0]["stage"] in ("done", "failed", "cancelled"),
        timeout_s=180,
    )[0]


def _no_survivors(env: StackEnv, point: dict[str, Any]) -> None:
    assert env.wait_gone(point["job_id"]) == [], job_processes(point["job_id"])


def _logs(env: StackEnv, point: dict[str, Any]) -> Path:
    return next(env.results.rglob(f"points/{point['point_id']}/logs"))


def _struck_in_replay(
    env: StackEnv, keys: list[str], strike: Callable[[str, dict[str, Any]], None], timeout_s: float = 420
) -> dict[str, float]:
    """Each point of `keys` struck as soon as it replays: point id -> when. A key per job runs the jobs side by side
    (CI time; the local profiles' array-parallelism is 1, so one key's jobs run one after another)."""
    struck: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    while True:
        points = [(key, point) for key in keys for point in env.status(key)]
        if len(struck) == len(points):
            return struck
        assert time.monotonic() < deadline, points
        for key, point in points:
            if point["point_id"] in struck:
                continue
            assert point["state"] not in ("failed", "completed") and point["stage"] != "done", point
            if point["stage"] == "replay":
                struck[point["point_id"]] = time.time()
                strike(key, point)
        time.sleep(0.5)


def test_scancel_during_engine_startup(stack_env: StackEnv) -> None:
    _one_point(stack_env, "cancel-startup")
    point = _stage(stack_env, "cancel-startup", "engine")
    assert stack_env.slurmx("cancel", "cancel-startup", "--results", str(stack_env.results))[0] == 0
    point = _ended(stack_env, "cancel-startup")
    assert point["state"] == "cancelled" and "SIGTERM" in (point["reason"] or "")
    _no_survivors(stack_env, point)
    assert (_logs(stack_env, point) / "lmcache.log").stat().st_size > 0


def _completed_requests(export: Path) -> int:
    """Error-free records aiperf has written so far (it appends to profile_export.jsonl as it goes)."""
    try:
        lines = export.read_text().splitlines()
    except OSError:
        return 0
    done = 0
    for line in lines:
        with contextlib.suppress(json.JSONDecodeError):  # a batch being written
            done += not json.loads(line).get("error")
    return done


def test_a_cancel_mid_replay_of_each_offload_arm_leaves_no_process(stack_env: StackEnv) -> None:
    """The arms beside LMCache: vLLM's own CPU pool (in the engine), Mooncake's master (its own process) and the
    engine's embedded store; a cancel while aiperf replays takes every one of them down. A key per arm: the two
    jobs side by side (an array runs one task at a time here), each cancelled by its point id once it replays."""
    keys = ["cancel-vllm-simple", "cancel-mooncake"]
    stack_env.recipe(**{"replay.sessions-per-conc": 24})
    for key in keys:
        stack_env.key(key, [(key.removeprefix("cancel-"), [2])])
        stack_env.submit(key)

    def cancel(key: str, point: dict[str, Any]) -> None:
        if point["backend"] == "mooncake":  # the master really ran: its own process, its own log
            pdir = next(stack_env.results.rglob(f"points/{point['point_id']}"))
            assert (pdir / "commands/mooncake-master.txt").exists()
            assert "Master service started" in (pdir / "logs/mooncake-master.log").read_text(errors="replace")
        assert stack_env.slurmx("cancel", point["point_id"], "--results", str(stack_env.results))[0] == 0

    cancelled_at = _struck_in_replay(stack_env, keys, cancel)
    ended = [_ended(stack_env, key) for key in keys]
    assert wait_left_queue({p["job_id"].split("_")[0] for p in ended}) == set()  # every body has exited
    for point in ended:
        assert point["state"] == "cancelled" and "SIGTERM" in (point["reason"] or ""), point
        _no_survivors(stack_env, point)
        # the body wrote its record before Slurm's SIGKILL (KillWait after the SIGTERM): the whole teardown fit
        teardown = json.loads(next(stack_env.results.rglob(f"points/{point['point_id']}/teardown.json")).read_text())
        assert teardown["survivors"] == [], teardown
        assert teardown["ended_at"] - cancelled_at[point["point_id"]] < KILL_WAIT_S, teardown
        if point["backend"] == "mooncake":  # stopped by the teardown, or gone already with the job step's SIGTERM
            assert "mooncake-master" in teardown["terminated"] + teardown["already_exited"], teardown


WITHOUT_CONNECTOR = ROOT / "tests/data/launchers/vllm_without_connector.py"


def _by_conc(env: StackEnv, key: str) -> dict[int, dict[str, Any]]:
    return {p["conc"]: p for p in env.status(key)}


def test_an_arm_without_its_connector_is_refused_and_a_cancelled_replay_keeps_its_part(stack_env: StackEnv) -> None:
    """One engine start for two checks (CI time): an LMCache arm whose engine launcher drops the connector
    (slurmx's argv record still shows it) on a shared server; its conc-2 point replays to the end and
    is refused as "offload tier not engaged"; its conc-4 point is cancelled once aiperf has recorded a
    completed request, and keeps that partial result."""
    key = "cancel-replay"
    launcher = ["{engine_python}", str(WITHOUT_CONNECTOR)]
    stack_env.recipe(**{"engine.launcher": launcher, "replay.sessions-per-conc": 6})
    stack_env.key(key, [("lmcache", [2, 4])])
    stack_env.submit(key)
    stack_env.wait_for(key, lambda s: {p["conc"]: p["stage"] for p in s}.get(4) in ("replay", "failed", "done"))
    full, cut = _by_conc(stack_env, key)[2], _by_conc(stack_env, key)[4]
    assert full["state"] == "failed" and (full["reason"] or "").startswith(f"invalid result: {gate.NOT_ENGAGED}")
    refused = Result.model_validate_json(
        next(stack_env.results.rglob(f"points/{full['point_id']}/result.json")).read_text()
    )
    assert refused.slurmx is not None and (refused.slurmx.invalid_reason or "").startswith(gate.NOT_ENGAGED)
    evidence = refused.slurmx.evidence
    assert evidence is not None and evidence.exceeded_pool and not evidence.tier_tokens
    assert evidence.engine_connector == evidence.expected_connector  # the argv record could not tell
    assert refused.num_requests_successful > 0  # a real replay, refused for its arm, not for errors

    points = next(stack_env.results.rglob(f"points/{cut['point_id']}"))
    # strike once aiperf has recorded a completed request, whatever the machine's speed
    deadline = time.monotonic() + 300
    while _completed_requests(points / "aiperf/profile_export.jsonl") < 1:
        assert time.monotonic() < deadline, "aiperf recorded no completed request in 300 s"
        assert _by_conc(stack_env, key)[4]["stage"] == "replay", "the replay ended before the cancel"
        time.sleep(0.5)
    recorded = _completed_requests(points / "aiperf/profile_export.jsonl")
    assert stack_env.slurmx("cancel", cut["point_id"], "--results", str(stack_env.results))[0] == 0
    point = stack_env.wait_for(
        key,
        lambda s: any(p["conc"] == 4 and p["stage"] == "cancelled" and p["state"] == "cancelled" for p in s),
        timeout_s=180,
    )[0]
    _no_survivors(stack_env, point)  # the two points share one job
    assert (points / "logs/engine.log").exists() and (points / "logs/replay.log").exists()
    # the partial result keeps what aiperf measured, marked invalid with the reason
    result = json.loads((points / "result.json").read_text())
    # that the replay was cut is kept as its own fact; the verdict is InferenceX's rule when the in-flight requests
    # aiperf cancelled count as errors beyond its threshold (1/8 seen once), else the partial replay's
    meta = result["slurmx"]
    assert meta["partial_reason"] == "interrupted by SIGTERM", meta
    assert (meta["invalid_rule"], meta["invalid_reason"]) == (
        "slurmx-partial-replay",
        "partial replay: interrupted by SIGTERM",
    ) or meta["invalid_rule"] == "inferencex-error-rate", meta
    assert result["num_requests_successful"] >= recorded >= 1, (result["num_requests_successful"], recorded)
    print(f"partial result: {result['num_requests_successful']} requests kept, {recorded} recorded at the cancel")
    # aiperf got SIGINT (not the job-wide SIGTERM) and stopped gracefully within the grace that
    # Slurm's KillWait leaves: its own aggregate says cancelled, and nothing had to be killed
    teardown = json.loads((points / "teardown-replay.json").read_text())
    assert teardown["terminated"] == ["replay"] and teardown["killed"] == [], teardown
    assert json.loads((points / "aiperf/profile_export_aiperf.json").read_text())["was_cancelled"] is True


def test_a_signal_to_the_job_tears_everything_down(stack_env: StackEnv) -> None:
    """scancel's SIGTERM and the time limit's SIGUSR2, each to its own job's replay (the two keys side by side)."""
    signals = {"signal-sigterm": signal.SIGTERM, "signal-sigusr2": signal.SIGUSR2}
    stack_env.recipe(**{"replay.sessions-per-conc": 24})
    for key in signals:
        stack_env.key(key, [("none", [2])])
        stack_env.submit(key)

    def send(key: str, point: dict[str, Any]) -> None:
        subprocess.run(["scancel", "--signal", signals[key].name.removeprefix("SIG"), point["job_id"]], check=True)

    _struck_in_replay(stack_env, list(signals), send)
    for key, signum in signals.items():
        point = stack_env.wait_for(key, lambda s: s[0]["stage"] == "cancelled", timeout_s=120)[0]
        expected = "time limit near (SIGUSR2)" if signum == signal.SIGUSR2 else "interrupted by SIGTERM"
        assert point["reason"] == expected
        # After SIGUSR2 the job waits for Slurm's time limit with nothing running; check, then end it.
        assert stack_env.wait_gone(point["job_id"]) == [], job_processes(point["job_id"])
        # A job waiting out its time limit after SIGUSR2 is still cancellable by key.
        code, out, _ = stack_env.slurmx("cancel", key, "--results", str(stack_env.results))
        assert code == 0
        if signum == signal.SIGUSR2:
            assert "cancelled 1 job" in out
    for key in signals:
        stack_env.wait_for(key, lambda s: s[0]["state"] not in ("running", "pending"), timeout_s=60)


def test_a_server_killed_mid_replay_fails_the_point(stack_env: StackEnv) -> None:
    """The engine of one job and the LMCache server of another (the two keys side by side), each killed mid-replay."""
    victims = {"kill-engine": ("vllm.entrypoints", "engine"), "kill-lmcache": ("lmcache server", "lmcache")}
    stack_env.recipe(**{"replay.sessions-per-conc": 24})
    for key in victims:
        stack_env.key(key, [("lmcache", [2])])
        stack_env.submit(key)

    def kill_server(key: str, point: dict[str, Any]) -> None:
        pid = process_with(point["job_id"], victims[key][0])
        assert pid is not None, f"no {victims[key][0]} process of job {point['job_id']}"
        kill(pid)

    _struck_in_replay(stack_env, list(victims), kill_server)
    for key, (_, name) in victims.items():
        point = _ended(stack_env, key)
        assert point["state"] == "failed"
        assert f"{name} exited with code" in (point["reason"] or ""), point["reason"]
        _no_survivors(stack_env, point)
        assert (_logs(stack_env, point) / f"{name}.log").exists()


def test_readiness_timeout_fails_fast_with_the_log_tail(stack_env: StackEnv) -> None:
    stack_env.recipe(**{"engine.startup-timeout-s": 15})
    stack_env.key("slow-engine", [("none", [2])])
    stack_env.submit("slow-engine")
    point = _ended(stack_env, "slow-engine")
    assert point["state"] == "failed"
    assert "engine did not become ready" in (point["reason"] or "") and "after 15 s" in point["reason"]
    _no_survivors(stack_env, point)
    assert point["log_tail"], "the failure shows the engine log's last lines"
