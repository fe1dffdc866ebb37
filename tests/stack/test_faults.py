"""Fault tests: whatever ends a job, no process of it survives, its state and reason are recorded,
and its logs are kept. Processes are found by the job's env marker, never by name."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.stack.conftest import StackEnv, job_processes, kill, process_with

pytestmark = pytest.mark.stack


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


def test_scancel_during_engine_startup(stack_env: StackEnv) -> None:
    _one_point(stack_env, "cancel-startup")
    point = _stage(stack_env, "cancel-startup", "engine")
    assert stack_env.slurmx("cancel", "cancel-startup", "--results", str(stack_env.results))[0] == 0
    point = _ended(stack_env, "cancel-startup")
    assert point["state"] == "cancelled" and "SIGTERM" in (point["reason"] or "")
    _no_survivors(stack_env, point)
    assert (_logs(stack_env, point) / "lmcache.log").stat().st_size > 0


def test_scancel_during_replay(stack_env: StackEnv) -> None:
    _one_point(stack_env, "cancel-replay")
    point = _stage(stack_env, "cancel-replay", "replay")
    time.sleep(3)
    assert stack_env.slurmx("cancel", point["point_id"], "--results", str(stack_env.results))[0] == 0
    point = _ended(stack_env, "cancel-replay")
    assert point["state"] == "cancelled"
    _no_survivors(stack_env, point)
    assert (_logs(stack_env, point) / "engine.log").exists() and (_logs(stack_env, point) / "replay.log").exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR2])
def test_signal_to_the_job_tears_everything_down(stack_env: StackEnv, signum: int) -> None:
    key = f"signal-{signum.name.lower()}"
    _one_point(stack_env, key, backend="none")
    point = _stage(stack_env, key, "replay")
    subprocess.run(["scancel", "--signal", signum.name.removeprefix("SIG"), point["job_id"]], check=True)
    point = stack_env.wait_for(key, lambda s: s[0]["stage"] == "cancelled", timeout_s=120)[0]
    expected = "time limit near (SIGUSR2)" if signum == signal.SIGUSR2 else "interrupted by SIGTERM"
    assert point["reason"] == expected
    # After SIGUSR2 the job waits for Slurm's time limit with nothing running; check, then end it.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        left = [p for p in job_processes(point["job_id"])]
        if not left:
            break
        time.sleep(0.5)
    assert job_processes(point["job_id"]) == []
    # A job waiting out its time limit after SIGUSR2 is still cancellable by key.
    code, out, _ = stack_env.slurmx("cancel", key, "--results", str(stack_env.results))
    assert code == 0
    if signum == signal.SIGUSR2:
        assert "cancelled 1 job" in out
    stack_env.wait_for(key, lambda s: s[0]["state"] not in ("running", "pending"), timeout_s=60)


@pytest.mark.parametrize("victim", ["vllm.entrypoints", "lmcache server"])
def test_server_killed_mid_replay_fails_the_point(stack_env: StackEnv, victim: str) -> None:
    key = "kill-engine" if victim.startswith("vllm") else "kill-lmcache"
    _one_point(stack_env, key)
    point = _stage(stack_env, key, "replay")
    pid = process_with(point["job_id"], victim)
    assert pid is not None, f"no {victim} process of job {point['job_id']}"
    kill(pid)
    point = _ended(stack_env, key)
    assert point["state"] == "failed"
    name = "engine" if victim.startswith("vllm") else "lmcache"
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
