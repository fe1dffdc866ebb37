"""A node other than the head of a multinode point (node 1 of the job, node02), driven in-process through the job
body: it waits for the head to say where it listens, starts its headless engine rank pointed there, says it runs,
and serves until the head ends the deployment, its rank dies, or the head is gone. The head is this test, speaking
through the point's nodes/ files as the head's task does (node/multinode.py); the rank is a real process."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmx.engines.base import NodePart
from slurmx.node import multinode, worker_body
from slurmx.node.multinode import Rendezvous
from slurmx.node.supervisor import JobInterrupted
from tests.helpers.serving_group import ENGINE, Group, multinode_point, script
from tests.helpers.waiting import until

JOB = "local.0"  # outside Slurm, attempt 0: the rendezvous' job id
HEAD = NodePart(0, "127.0.0.1", 4000, 5000)


@pytest.fixture
def node02(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Group]:
    group, _ = multinode_point(tmp_path, monkeypatch)
    monkeypatch.setenv("SLURMD_NODENAME", "node02")
    monkeypatch.setenv("SLURM_NODEID", "1")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    for name in ("SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    # scontrol knows no node here (the local cluster's own is not asked): the name is the address
    script(group.bin / "scontrol", 'echo "slurm_load_node error: Invalid node name specified" >&2; exit 1')
    monkeypatch.setenv("PATH", f"{group.bin}:{Path(sys.executable).parent}:/usr/bin:/bin")
    # a headless rank serves no HTTP: it runs until it is stopped, its pid where the test finds it
    rank = 'case " $* " in *" --headless "*) echo $$ > "$FAKE_ENGINE_DIR/rank.pid"; exec sleep 600;; esac'
    script(group.bin / "python-fake", ENGINE.format(before=rank))
    monkeypatch.setattr(worker_body, "WATCH_S", 0.05)
    monkeypatch.setattr(multinode, "POLL_S", 0.05)
    # a node that misses its ending would serve forever: the head ends the deployment after 60 s in any case (the
    # test's outcome then shows it; 20 s fired under a loaded CI-sized machine before the rank had started)
    watchdog = threading.Timer(60.0, lambda: _head(group).end("watchdog"))
    watchdog.start()
    yield group
    watchdog.cancel()


def _head(group: Group) -> Rendezvous:
    return Rendezvous(group.point(2).path, JOB)


def _report(group: Group) -> dict[str, Any]:
    return json.loads((group.point(2).path / "nodes" / "node02.json").read_text())  # type: ignore[no-any-return]


def _as_head(steps: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=steps, daemon=True)
    thread.start()
    return thread


def _running(group: Group) -> bool:
    try:
        return bool(_report(group)["state"] == "running")
    except (OSError, ValueError):
        return False


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_a_node_serves_its_rank_pointed_at_the_head_until_the_head_ends_the_deployment(node02: Group) -> None:
    seen: dict[str, Any] = {}

    def head() -> None:
        until((node02.point(2).path / "nodes" / "node02.json").exists)
        seen["first"] = _report(node02)["state"]  # what node02 says before the head has published anything
        _head(node02).publish_head("node01", HEAD)
        until(lambda: _running(node02))
        seen["report"] = _report(node02)
        seen["rank"] = int((node02.root / "rank.pid").read_text())
        seen["alive"] = not _gone(seen["rank"])
        _head(node02).end()

    thread = _as_head(head)
    assert node02.run(2) == {node02.ids[2]: "done"}
    thread.join(timeout=30)
    assert seen["first"] == "starting"
    assert (seen["report"]["node"], seen["report"]["reason"], seen["alive"]) == ("node02", None, True)
    assert _report(node02)["state"] == "ended" and _report(node02)["reason"] is None
    assert _gone(seen["rank"])  # torn down with the node's supervisor
    commands = node02.point(2).path / "nodes" / "node02" / "commands" / "engine.txt"
    argv = commands.read_text()
    # node02's rank: headless, the data-parallel rank after the head's one, at the address and port the head published
    assert "--headless" in argv and "--data-parallel-start-rank 1" in argv
    assert "--data-parallel-address 127.0.0.1 --data-parallel-rpc-port 4000" in argv
    # the rank's own address, as the other ranks reach it: its node's name (scontrol knew no NodeAddr for it)
    assert "# env: VLLM_HOST_IP=node02\n" in argv
    assert node02.state(2).stage == "queued"  # state.json is the head's to write
    beat = json.loads((node02.point(2).path / "nodes" / "node02.beat").read_text())  # it beat while it served
    assert (beat["job_id"], beat["node"]) == (JOB, "node02")


def test_a_head_that_ended_before_it_published_ends_the_node_without_starting_anything(node02: Group) -> None:
    _head(node02).end("preflight: GPUs: the point needs 1, CUDA_VISIBLE_DEVICES shows 0 ()")
    assert node02.run(2) == {node02.ids[2]: "done"}
    assert _report(node02)["state"] == "ended"
    assert not (node02.point(2).path / "nodes" / "node02" / "commands" / "engine.txt").exists()


def test_a_head_that_never_says_where_it_listens_fails_the_node(node02: Group) -> None:
    node02.startup_timeout(2, 1)
    why = "the head did not say where it listens within 1 s"
    assert node02.run(2) == {node02.ids[2]: f"node02: {why}"}
    assert (_report(node02)["state"], _report(node02)["reason"]) == ("failed", why)


def test_a_rank_that_dies_fails_the_node_with_its_last_log_line(node02: Group) -> None:
    dies = 'case " $* " in *" --headless "*) echo "RuntimeError: no route to 127.0.0.1:4000"; exit 3;; esac'
    script(node02.bin / "python-fake", ENGINE.format(before=dies))
    _head(node02).publish_head("node01", HEAD)
    why = "engine exited with code 3: RuntimeError: no route to 127.0.0.1:4000"
    assert node02.run(2) == {node02.ids[2]: f"node02: {why}"}
    assert (_report(node02)["state"], _report(node02)["reason"]) == ("failed", why)


def test_a_head_whose_task_died_fails_the_node(node02: Group) -> None:
    head = _head(node02)
    head.publish_head("node01", HEAD)
    # the head's last beat, 100 s ago (its task SIGKILLed): older than the profile's heartbeat-stale-s of 30
    beat = node02.point(2).path / "nodes" / "node01.beat"
    beat.write_text(json.dumps({"job_id": JOB, "node": "node01", "at": time.time() - 100}))
    outcome = node02.run(2)[node02.ids[2]]
    assert re.fullmatch(r"node02: node01: no heartbeat for 10\d s \(its task is gone\)", outcome), outcome
    assert _report(node02)["state"] == "failed"


def test_a_signal_ends_the_node_and_says_so(node02: Group) -> None:
    def head() -> None:
        _head(node02).publish_head("node01", HEAD)
        until(lambda: _running(node02))
        until((node02.root / "rank.pid").exists)  # the rank's own first step, after the node says "running"
        os.kill(os.getpid(), signal.SIGTERM)  # scancel

    previous = signal.getsignal(signal.SIGTERM)
    thread = _as_head(head)
    with pytest.raises(JobInterrupted):
        node02.run(2)
    thread.join(timeout=30)
    assert signal.getsignal(signal.SIGTERM) is previous
    assert (_report(node02)["state"], _report(node02)["reason"]) == ("ended", "interrupted by SIGTERM")
    assert _gone(int((node02.root / "rank.pid").read_text()))


def test_a_head_whose_task_died_before_it_published_fails_the_node_at_once(
    node02: Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The allocation's first node is the head (scontrol expands the node list): its beat gone stale before it said
    where it listens ends the wait, without the startup timeout (30 s here)."""
    script(node02.bin / "scontrol", '[ "$1 $2 $3" = "show hostnames node[01-02]" ] && printf "node01\\nnode02\\n"')
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[01-02]")
    beat = node02.point(2).path / "nodes" / "node01.beat"
    beat.parent.mkdir(parents=True)
    beat.write_text(json.dumps({"job_id": JOB, "node": "node01", "at": time.time() - 100}))
    outcome = node02.run(2)[node02.ids[2]]
    assert re.fullmatch(r"node02: node01: no heartbeat for 10\d s \(its task is gone\)", outcome), outcome
