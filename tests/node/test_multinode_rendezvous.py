"""How the nodes of a multinode point tell each other where the head listens, that they run, that one
failed (and why), and that the deployment is over; files of another job or attempt never count."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmx.engines.base import NodePart
from slurmx.node.multinode import Rendezvous
from slurmx.node.recorder import PointFailed
from tests.helpers.waiting import until


def test_the_head_publishes_where_it_listens_and_ends_the_others(tmp_path: Path) -> None:
    head, worker = Rendezvous(tmp_path, "7.0"), Rendezvous(tmp_path, "7.0")
    assert worker.head() is None and worker.await_head(timeout_s=0.1) is None
    head.publish_head("node01", NodePart(0, "10.0.0.1", 4000, 5000))
    seen = worker.await_head(timeout_s=1)
    assert seen is not None and (seen.node, seen.address, seen.rpc_port, seen.ended) == (
        "node01",
        "10.0.0.1",
        4000,
        False,
    )
    assert not worker.ended()
    head.end("interrupted by SIGTERM")
    assert worker.ended() and worker.head() is not None


def test_a_failed_node_is_named_with_its_reason(tmp_path: Path) -> None:
    head = Rendezvous(tmp_path, "7.0")
    Rendezvous(tmp_path, "7.0").report("node02", "running")
    assert head.await_peers(1, "running", timeout_s=1) is None
    assert head.failed_peer() is None
    Rendezvous(tmp_path, "7.0").report("node03", "failed", "engine exited with signal SIGKILL")
    assert head.failed_peer() == "node03: engine exited with signal SIGKILL"
    assert head.await_peers(2, "running", timeout_s=1) == "node03: engine exited with signal SIGKILL"


def test_waiting_for_nodes_that_never_report_times_out_with_the_count(tmp_path: Path) -> None:
    assert Rendezvous(tmp_path, "7.0").await_peers(1, "running", timeout_s=0.1) == (
        "0 of 1 other nodes running after 0 s"
    )


def test_files_of_an_earlier_attempt_do_not_count(tmp_path: Path) -> None:
    earlier = Rendezvous(tmp_path, "7.0")
    earlier.publish_head("node01", NodePart(0, "10.0.0.1", 4000, 5000))
    earlier.end("done")
    earlier.report("node02", "failed", "old")
    now = Rendezvous(tmp_path, "7.1")  # the same job, requeued
    assert now.head() is None and not now.ended() and now.failed_peer() is None


def _beating_task(point_dir: Path, node: str) -> subprocess.Popen[bytes]:
    """A real process that beats for `node` the way a node's task does, until it is killed."""
    code = (
        "import sys, time; from pathlib import Path; from slurmx.node.multinode import Rendezvous\n"
        "with Rendezvous(Path(sys.argv[1]), '7.0').beating(sys.argv[2], every_s=0.1):\n"
        "    time.sleep(60)\n"
    )
    return subprocess.Popen([sys.executable, "-c", code, str(point_dir), node])


def test_a_node_whose_task_dies_silently_is_named_once_its_heartbeat_is_stale(tmp_path: Path) -> None:
    head = Rendezvous(tmp_path, "7.0", stale_s=2.0)  # 20 beats: a loaded machine's stall is not a death
    head.report("node02", "running")  # what node02 said before its task was SIGKILLed (no "failed" comes)
    task = _beating_task(tmp_path, "node02")
    try:
        assert until(lambda: (tmp_path / "nodes" / "node02.beat").exists())
        time.sleep(2.5)  # longer than stale_s: a beating node is never taken for gone
        assert head.failed_peer() is None
    finally:
        task.kill()
        task.wait()
    why = until(head.failed_peer, bound_s=5.0)
    assert isinstance(why, str) and re.fullmatch(r"node02: no heartbeat for \d+ s \(its task is gone\)", why)
    head.report("node02", "ended")  # a node that said it ended is not missed
    assert head.failed_peer() is None


def test_other_nodes_stop_waiting_for_a_head_that_died(tmp_path: Path) -> None:
    worker = Rendezvous(tmp_path, "7.0", stale_s=2.0)
    task = _beating_task(tmp_path, "node01")
    try:
        assert until(lambda: worker.silent("node01") is None and (tmp_path / "nodes" / "node01.beat").exists())
        worker_head = Rendezvous(tmp_path, "7.0")
        worker_head.publish_head("node01", NodePart(0, "10.0.0.1", 4000, 5000))
        assert worker.head_gone() is None
    finally:
        task.kill()
        task.wait()
    gone = until(worker.head_gone, bound_s=5.0)
    assert isinstance(gone, str) and gone.startswith("node01: no heartbeat for ")
    (tmp_path / "nodes" / "head.json").unlink()  # before the head said where it listens: the wait fails
    with pytest.raises(PointFailed, match=r"^node01: no heartbeat for \d+ s"):
        worker.await_head(timeout_s=5.0, head_node="node01")
    Rendezvous(tmp_path, "7.0").end("done")  # a head that ended is not gone
    assert worker.head_gone() is None


def test_the_head_publishes_the_ports_of_the_backend_servers_it_runs_for_every_node(tmp_path: Path) -> None:
    """A Mooncake master on the head for every node's ranks: its ports travel in head.json; none where it runs none."""
    head, worker = Rendezvous(tmp_path, "7.0"), Rendezvous(tmp_path, "7.0")
    head.publish_head(
        "node01", NodePart(0, "10.0.0.1", 4000, 5000), {"mooncake-master": 6000, "mooncake-metrics": 6001}
    )
    seen = worker.await_head(timeout_s=1)
    assert seen is not None and seen.backend_ports == {"mooncake-master": 6000, "mooncake-metrics": 6001}
    head.end()
    ended = worker.head()
    assert (
        ended is not None and ended.ended and ended.backend_ports == {"mooncake-master": 6000, "mooncake-metrics": 6001}
    )
    Rendezvous(tmp_path / "other", "7.0").publish_head("node01", NodePart(0, "10.0.0.1", 4000, 5000))
    plain = Rendezvous(tmp_path / "other", "7.0").head()
    assert plain is not None and plain.backend_ports == {}
