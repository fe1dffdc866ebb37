"""The head of a multinode point (node 0 of the job), driven in-process through the job body with the real stand-ins
for vLLM and aiperf; the other node (node02) is this test, speaking through the point's nodes/ files as a node's task
does (node/multinode.py): it says it starts, runs, fails, and reads what the head published."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from slurmx.node import multinode, serving_body
from slurmx.node.multinode import Rendezvous
from tests.helpers.serving_group import ENGINE, NODE_TESTS, Group, multinode_point, script
from tests.helpers.waiting import until

JOB = "local.0"  # outside Slurm, attempt 0: the rendezvous' job id
KV_LINE = "(EngineCore_DP{rank} pid=4242) INFO [kv_cache_utils.py:1087] GPU KV cache size: 34,816 tokens"


@pytest.fixture
def head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Group:
    group, _ = multinode_point(tmp_path, monkeypatch)
    monkeypatch.setenv("SLURMD_NODENAME", "node01")
    monkeypatch.setenv("SLURM_NODEID", "0")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    # scontrol knows no node here (the local cluster's own is not asked): the name is the address
    script(group.bin / "scontrol", 'echo "slurm_load_node error: Invalid node name specified" >&2; exit 1')
    monkeypatch.setenv("PATH", f"{group.bin}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setattr(multinode, "POLL_S", 0.05)
    return group


def _node02(group: Group) -> Rendezvous:
    return Rendezvous(group.point(2).path, JOB)


def _as_node02(group: Group, steps: Callable[[Rendezvous], None]) -> threading.Thread:
    """node02's task, once the head has said where it listens."""

    def run() -> None:
        rendezvous = _node02(group)
        if rendezvous.await_head(timeout_s=30) is not None:
            steps(rendezvous)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _heads_record(group: Group) -> dict[str, object]:
    return json.loads((group.point(2).path / "nodes" / "head.json").read_text())  # type: ignore[no-any-return]


def test_the_head_serves_once_the_other_node_runs_and_ends_it_after_the_replay(head: Group) -> None:
    script(head.bin / "python-fake", ENGINE.format(before=f'echo "{KV_LINE.format(rank=0)}"'))
    logs = head.point(2).path / "nodes" / "node02" / "logs"
    logs.mkdir(parents=True)
    (logs / "engine.log").write_text(KV_LINE.format(rank=1) + "\n")  # what node02's rank logged

    def node02(rendezvous: Rendezvous) -> None:
        rendezvous.report("node02", "starting")
        rendezvous.report("node02", "running")

    thread = _as_node02(head, node02)
    assert head.run(2) == {head.ids[2]: "done"}
    thread.join(timeout=30)
    record = _heads_record(head)
    # where the head listens: its name (scontrol knew no address), two free ports; then over, with no failure
    assert (record["job_id"], record["node"], record["address"]) == (JOB, "node01", "node01")
    assert isinstance(record["rpc_port"], int) and isinstance(record["master_port"], int)
    assert record["rpc_port"] != record["master_port"] and record["rpc_port"] > 0
    assert (record["ended"], record["reason"]) == (True, None)
    result = head.result(2)
    assert result is not None and result.slurmx is not None
    assert result.slurmx.nodes == ["node01", "node02"]
    assert result.slurmx.invalid_reason is None
    # each node's engine logs its own rank's pool: the point's pool is both, 2 x 34,816
    assert result.slurmx.evidence is not None and result.slurmx.evidence.kv_pool_tokens == 69_632
    assert head.stages(2) == ["queued", "preflight", "engine", "replay", "aggregate", "done"]
    beat = json.loads((head.point(2).path / "nodes" / "node01.beat").read_text())  # the head beat while it ran
    assert (beat["job_id"], beat["node"]) == (JOB, "node01")
    # the head's engine was told where the ranks meet: the address and the RPC port it published
    argv = (head.point(2).path / "commands" / "engine.txt").read_text()
    assert f"--data-parallel-address node01 --data-parallel-rpc-port {record['rpc_port']}" in argv


def test_a_node_that_failed_before_the_heads_engine_is_ready_fails_the_point_with_its_reason(head: Group) -> None:
    _node02(head).report("node02", "failed", "engine exited with code 3: CUDA error: no device")
    reason = "node02: engine exited with code 3: CUDA error: no device"
    assert head.run(2) == {head.ids[2]: reason}
    assert head.state(2).reason == reason
    record = _heads_record(head)
    assert (record["ended"], record["reason"]) == (True, reason)  # the other nodes tear down too
    assert head.result(2) is None


def test_a_node_that_never_runs_fails_the_point_once_the_startup_timeout_passed(head: Group) -> None:
    head.startup_timeout(2, 1)
    thread = _as_node02(head, lambda rendezvous: rendezvous.report("node02", "starting"))
    reason = "multinode deployment not ready: 0 of 1 other nodes running after 1 s"
    assert head.run(2) == {head.ids[2]: reason}
    thread.join(timeout=30)
    assert _heads_record(head)["reason"] == reason


def test_a_node_that_fails_during_the_replay_fails_the_point_and_keeps_the_partial_records(head: Group) -> None:
    aiperf = f'"{sys.executable}" "{NODE_TESTS / "fake_aiperf.py"}"'
    script(
        head.bin / "aiperf-fake",
        f'case "$1" in --version) exec {aiperf} "$@";; esac\n{aiperf} "$@"\n'
        'touch "$FAKE_ENGINE_DIR/replaying"; exec sleep 60',
    )

    def node02(rendezvous: Rendezvous) -> None:
        rendezvous.report("node02", "running")
        until((head.root / "replaying").exists)
        rendezvous.report("node02", "failed", "engine exited with signal SIGKILL")

    thread = _as_node02(head, node02)
    reason = "node02: engine exited with signal SIGKILL during the replay"
    assert head.run(2) == {head.ids[2]: reason}
    thread.join(timeout=30)
    kept = head.result(2)
    assert kept is not None and kept.slurmx is not None and kept.slurmx.partial_reason == reason
    assert kept.slurmx.nodes == ["node01", "node02"]
    assert _heads_record(head)["reason"] == reason


def test_a_head_engine_that_dies_with_a_node_is_blamed_on_the_node_that_says_why(
    head: Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank dying on node02 takes the head's engine with it; the head gives node02 a moment to say why, and the
    point fails with node02's reason rather than the head engine's exit."""
    monkeypatch.setattr(serving_body, "PEER_REPORT_WAIT_S", 20.0)  # bounded: node02 answers within it
    aiperf = f'"{sys.executable}" "{NODE_TESTS / "fake_aiperf.py"}"'
    script(
        head.bin / "aiperf-fake",
        f'case "$1" in --version) exec {aiperf} "$@";; esac\n{aiperf} "$@"\n'
        'kill -9 "$(cat "$FAKE_ENGINE_DIR/engine.pid")"; touch "$FAKE_ENGINE_DIR/replaying"; exec sleep 60',
    )

    def node02(rendezvous: Rendezvous) -> None:
        rendezvous.report("node02", "running")
        until((head.root / "replaying").exists)
        engine = Path(f"/proc/{(head.root / 'engine.pid').read_text()}")
        until(lambda: not engine.exists())  # reaped: the head saw its engine die and waits for a word
        rendezvous.report("node02", "failed", "engine exited with signal SIGABRT")

    thread = _as_node02(head, node02)
    reason = "node02: engine exited with signal SIGABRT during the replay"
    assert head.run(2) == {head.ids[2]: reason}
    thread.join(timeout=30)


def test_a_head_engine_that_dies_alone_fails_the_point_with_its_own_exit(
    head: Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serving_body, "PEER_REPORT_WAIT_S", 0.3)  # node02 says nothing: the head stops waiting
    aiperf = f'"{sys.executable}" "{NODE_TESTS / "fake_aiperf.py"}"'
    script(
        head.bin / "aiperf-fake",
        f'case "$1" in --version) exec {aiperf} "$@";; esac\n{aiperf} "$@"\n'
        'kill -9 "$(cat "$FAKE_ENGINE_DIR/engine.pid")"; exec sleep 60',
    )
    thread = _as_node02(head, lambda rendezvous: rendezvous.report("node02", "running"))
    assert head.run(2) == {head.ids[2]: "engine exited with code -9 during the replay"}
    thread.join(timeout=30)


def test_a_node_silent_for_longer_than_the_profiles_heartbeat_stale_s_fails_the_point(head: Group) -> None:
    """The profile's node.heartbeat-stale-s (30 s here; 90 by default) decides when a silent node is gone: node02's
    last beat 50 s ago is over it."""
    node02 = _node02(head)
    node02.report("node02", "running")
    beat = head.point(2).path / "nodes" / "node02.beat"
    beat.write_text(json.dumps({"job_id": JOB, "node": "node02", "at": time.time() - 50}))
    outcome = head.run(2)[head.ids[2]]
    assert re.fullmatch(r"node02: no heartbeat for 5\d s \(its task is gone\)", outcome), outcome
