"""How a point's replay ends, driven in-process through the job body with the real small stand-ins for vLLM and
aiperf (tests/node/fake_engine.py, fake_aiperf.py): a server that dies during the replay, scancel's SIGTERM while
aiperf has already written records, and what result.json keeps of the engine that ran (its argv, its KV pool).
In-process, unlike test_serving_body.py's entry-point tests, so that mutation testing sees these paths."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.serving_group import ENGINE, NODE_TESTS, Group, script, serving_group

FAKE_AIPERF = NODE_TESTS / "fake_aiperf.py"
SAMPLE = NODE_TESTS.parent / "data" / "aiperf" / "lmcache-replay"
# vLLM's own line for its pool (EngineCore's log, as vLLM 0.11 prints it); 34,816 tokens = 2,176 blocks of 16
KV_LINE = "(EngineCore pid=4242) INFO 12-05 10:00:00 [kv_cache_utils.py:1087] GPU KV cache size: 34,816 tokens"


@pytest.fixture
def group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Group:
    return serving_group(tmp_path, monkeypatch)


def _aiperf(group: Group, before: str, after: str = "") -> None:
    """aiperf's stand-in with shell steps before it writes its artifacts (`before`) and after (`after`)."""
    run = f'"{sys.executable}" "{FAKE_AIPERF}" "$@" || exit $?'
    script(group.bin / "aiperf-fake", f'case "$1" in --version) exec "{sys.executable}" "{FAKE_AIPERF}" "$@";; esac\n'
           f"{before}\n{run}\n{after}")  # fmt: skip


# the engine SIGKILLed, and aiperf waits until it is gone (a zombie of the job body, or reaped)
KILL_ENGINE = (
    'pid=$(cat "$FAKE_ENGINE_DIR/engine.pid"); kill -9 "$pid"\n'
    'while [ -e /proc/$pid ] && [ "$(cut -d" " -f3 /proc/$pid/stat)" != Z ]; do sleep 0.02; done'
)


def test_an_engine_that_dies_while_aiperf_runs_fails_the_point_and_keeps_what_aiperf_wrote(group: Group) -> None:
    """aiperf writes its records and hangs; the engine dies meanwhile: the body notices within its one-second watch,
    stops aiperf and keeps the records as an invalid partial result; the next point does not start on a dead engine."""
    _aiperf(group, "", f'{KILL_ENGINE}\ntouch "$FAKE_ENGINE_DIR/replaying"; exec sleep 60')
    outcomes = group.run()
    # a SIGKILLed child's return code is minus the signal's number (9); the fake engine logs nothing
    during = "engine exited with code -9 during the replay"
    assert outcomes == {group.ids[2]: during, group.ids[4]: "engine exited with code -9 before this point"}
    assert group.state(2).reason == during and group.stages(2)[-2:] == ["replay", "failed"]
    kept = group.result(2)
    assert kept is not None and kept.slurmx is not None
    assert kept.slurmx.partial_reason == during and kept.slurmx.invalid_reason
    assert kept.num_requests_successful == 12  # the sample's 12 records, as aiperf wrote them
    assert kept.slurmx.ended_at is not None and kept.slurmx.started_at is not None
    assert kept.slurmx.started_at <= kept.slurmx.ended_at <= time.time()
    assert group.result(4) is None and "replay" not in group.stages(4)


def test_an_engine_that_dies_before_aiperf_exits_fails_the_point_even_though_aiperf_succeeded(group: Group) -> None:
    """aiperf writes its records, then the engine dies and aiperf exits 0 at once: the check after the replay fails
    the point (a result measured against a dying server is no result) and keeps the records as partial."""
    _aiperf(group, "", KILL_ENGINE)
    outcomes = group.run(2)
    during = "engine exited with code -9 during the replay"
    assert outcomes == {group.ids[2]: during}
    kept = group.result(2)
    assert kept is not None and kept.slurmx is not None and kept.slurmx.partial_reason == during
    assert kept.slurmx.ended_at is not None


def test_a_replay_without_records_when_the_engine_dies_leaves_no_result(group: Group) -> None:
    _aiperf(group, f"{KILL_ENGINE}\nexit 0")  # aiperf ends without writing a record
    assert group.run(2) == {group.ids[2]: "engine exited with code -9 during the replay"}
    assert group.result(2) is None


def _signal_when_replaying(group: Group, signum: int, done: threading.Event) -> threading.Thread:
    """Send `signum` to this process once aiperf says it is replaying (as scancel signals the job's task); never
    once the body has returned (`done`): with no handler of the body's, the signal would end the test run."""

    def watch() -> None:
        while not (group.root / "replaying").exists():
            if done.wait(0.02):
                return
        os.kill(os.getpid(), signum)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(("signum", "name"), [(signal.SIGTERM, "SIGTERM")])  # scancel; Ctrl-C takes the same path
def test_a_signal_during_the_replay_keeps_what_aiperf_wrote_and_cancels_every_unfinished_point(
    group: Group, signum: int, name: str
) -> None:
    """scancel (SIGTERM) or Ctrl-C once aiperf has written its records: the replay's records become an invalid
    partial result naming the signal, each unfinished point ends cancelled by it, and the engine is stopped."""
    _aiperf(group, "", 'touch "$FAKE_ENGINE_DIR/replaying"; exec sleep 60')
    previous = signal.getsignal(signum)
    done = threading.Event()
    watcher = _signal_when_replaying(group, signum, done)
    try:
        outcomes = group.run()
    finally:
        done.set()
        watcher.join(timeout=30)
    assert signal.getsignal(signum) is previous  # the body's handlers are gone again
    why = f"interrupted by {name}"
    assert outcomes == {group.ids[2]: why, group.ids[4]: why}
    for conc in (2, 4):
        state = group.state(conc)
        assert (state.stage, state.ended_by, state.reason) == ("cancelled", name, why)
    kept = group.result(2)
    assert kept is not None and kept.slurmx is not None
    assert kept.slurmx.partial_reason == why and kept.slurmx.invalid_reason
    assert kept.num_requests_successful == 12
    assert group.result(4) is None
    pid = int((group.root / "engine.pid").read_text())
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_a_done_point_records_what_ran_the_engine_its_pool_the_lock_and_the_gpu_sampler(group: Group) -> None:
    """The engine's argv as the supervisor started it is the arm's evidence (the none arm: no connector in it), the
    pool size vLLM logged is the result's KV pool, lock.json names each process that ran and the provisioning steps,
    and the GPU sampler ran beside the servers for the group (what it found depends on the host: not asserted)."""
    script(group.bin / "python-fake", ENGINE.format(before=f'echo "{KV_LINE}"'))
    assert group.run(2) == {group.ids[2]: "done"}
    point = group.point(2)
    lock = json.loads(point.lock_json.read_text())
    assert sorted(lock["processes"]) == ["engine", "replay"]
    assert [step["step"] for step in lock["provision"]] == ["aiperf runs", "download model tiny-llama"]
    assert lock["numa"]["policy"] == "none" and lock["cuda_visible_devices"] == "0"
    telemetry = json.loads((point.telemetry / "telemetry.json").read_text())
    assert telemetry["cuda_visible_devices"] == "0"  # the sampler ran, for the point's GPU
    assert (point.commands / "telemetry.txt").exists()
    result = group.result(2)
    assert result is not None and result.slurmx is not None and result.slurmx.evidence is not None
    evidence = result.slurmx.evidence
    assert evidence.engine_argv_seen and evidence.engine_connector is None and evidence.arm == "none"
    assert evidence.kv_pool_tokens == 34_816
    assert result.slurmx.nodes is None  # a single-node point lists no nodes
    assert result.slurmx.energy is not None  # the sampler's file, read over the replay's window
    assert result.slurmx.started_at is not None and result.slurmx.ended_at is not None
    assert result.slurmx.started_at < result.slurmx.ended_at <= time.time()


def _flags(argv: list[str]) -> dict[str, str | None]:
    """--name value / --switch pairs of an argv (a switch maps to None)."""
    out: dict[str, str | None] = {}
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
            out[arg] = value
    return out


def test_the_synthetic_replay_asks_aiperf_for_what_aiperf_ran_in_the_recorded_local_replay(group: Group) -> None:
    """tests/data/aiperf/lmcache-replay is a real aiperf 0.13 run of this key's conc-2 synthetic replay: its
    input_config is what aiperf parsed from the argv it was given. The argv the body starts now asks the same."""
    assert group.run(2) == {group.ids[2]: "done"}
    point = group.point(2)
    replay = json.loads((point.commands / "replay.txt").read_text().splitlines()[-1])
    flags = _flags(replay["argv"])
    ran = json.loads((SAMPLE / "profile_export_aiperf.json").read_text())["input_config"]
    engine = _flags(json.loads((point.commands / "engine.txt").read_text().splitlines()[-1])["argv"])
    assert replay["argv"][1] == "profile"
    assert flags["--url"] == f"http://127.0.0.1:{engine['--port']}"  # the engine, on loopback
    assert flags["--model"] == ran["models"]["items"][0]["name"]
    assert flags["--endpoint-type"] == ran["endpoint"]["type"]
    assert "--streaming" in flags and ran["endpoint"]["streaming"] is True
    name, value = (flags["--extra-inputs"] or "").split(":")
    assert {name: json.loads(value)} == ran["endpoint"]["extra"]
    dataset = ran["datasets"][0]
    assert flags["--custom-dataset-type"] == dataset["format"]
    assert Path(flags["--input-file"] or "") == point.trace_jsonl and dataset["path"] == point.trace_jsonl.name
    assert int(flags["--isl-block-size"] or 0) == dataset["block_size"]
    assert int(flags["--random-seed"] or 0) == dataset["random_seed"]
    phase = ran["phases"][0]
    assert int(flags["--request-count"] or 0) == phase["requests"] == dataset["entries"]
    assert int(flags["--concurrency"] or 0) == phase["concurrency"] == 2
    assert flags["--tokenizer"] == ran["tokenizer"]["name"]
    assert flags["--ui-type"] == ran["runtime"]["ui"]
    assert int(flags["--workers-max"] or 0) == ran["runtime"]["workers"]
    assert "--no-auto-plot" in flags and ran["artifacts"]["auto_plot"] is False
    assert flags["--artifact-dir"] == str(point.aiperf)
    assert "--server-metrics" not in flags  # the none arm has no tier to scrape
    # the trace it replays has one line per request it sends
    assert len(point.trace_jsonl.read_text().splitlines()) == phase["requests"]
