"""How the nodes of a multinode point tell each other where the head listens, that they run, that one
failed (and why), and that the deployment is over; files of another job or attempt never count."""

from __future__ import annotations

from pathlib import Path

from slurmx.node.multinode import Rendezvous


def test_the_head_publishes_where_it_listens_and_ends_the_others(tmp_path: Path) -> None:
    head, worker = Rendezvous(tmp_path, "7.0"), Rendezvous(tmp_path, "7.0")
    assert worker.head() is None and worker.await_head(timeout_s=0.1) is None
    head.publish_head("node01", "10.0.0.1", 4000, 2)
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
    earlier.publish_head("node01", "10.0.0.1", 4000, 2)
    earlier.end("done")
    earlier.report("node02", "failed", "old")
    now = Rendezvous(tmp_path, "7.1")  # the same job, requeued
    assert now.head() is None and not now.ended() and now.failed_peer() is None
