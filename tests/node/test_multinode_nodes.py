"""Which task of a multinode job this is, which node is the head, and the address other nodes reach a node at
(node/multinode.py), from Slurm's environment and `scontrol`: a stand-in scontrol that prints the local cluster's
recorded `scontrol show node --oneliner` lines (tests/data/slurm) answers, or none is on PATH at all."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from slurmx.engines.base import NodePart
from slurmx.node import multinode
from slurmx.node.multinode import NodeTask, Rendezvous, head_node, node_address, this_task

NODES = Path(__file__).resolve().parents[1] / "data" / "slurm" / "scontrol-show-node.out"

# `show node NAME --oneliner`: that node's recorded line; `show hostnames LIST`: the names of LIST (HOSTNAMES, as the
# real scontrol expands it); anything else: exit 1 the way scontrol fails on an unknown node
STANDIN = """\
import json, sys
from pathlib import Path
here = Path(__file__).parent
args = sys.argv[1:]
(here / "calls").open("a").write(json.dumps(args) + "\\n")
if args[:2] == ["show", "node"] and args[3:] == ["--oneliner"]:
    lines = [l for l in Path(sys.argv[0] + ".nodes").read_text().splitlines() if l.startswith(f"NodeName={args[2]} ")]
    if lines:
        print(lines[0]); sys.exit(0)
    sys.exit(f"Node {args[2]} not found")
if args[:2] == ["show", "hostnames"]:
    print(json.loads(Path(sys.argv[0] + ".hostnames").read_text())[args[2]]); sys.exit(0)
sys.exit("scontrol: error: unexpected arguments")
"""
HOSTNAMES = {"node[01-02]": "node01\nnode02", "nothing": ""}


@pytest.fixture
def scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    path = bin_dir / "scontrol"
    path.write_text(f"#!{sys.executable}\n{STANDIN}")
    path.chmod(0o755)
    (bin_dir / "scontrol.nodes").write_text(NODES.read_text())
    (bin_dir / "scontrol.hostnames").write_text(json.dumps(HOSTNAMES))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir


def _calls(bin_dir: Path) -> list[list[str]]:
    return [json.loads(line) for line in (bin_dir / "calls").read_text().splitlines()]


def _without_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_this_task_is_read_from_slurms_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_NODEID", "1")
    monkeypatch.setenv("SLURMD_NODENAME", "node02")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setenv("SLURM_NNODES", "3")  # the older name; SLURM_JOB_NUM_NODES wins
    assert this_task() == NodeTask(index=1, name="node02", count=2)
    monkeypatch.delenv("SLURM_JOB_NUM_NODES")
    assert this_task().count == 3
    for name in ("SLURM_NODEID", "SLURM_NNODES"):
        monkeypatch.delenv(name)
    assert this_task() == NodeTask(index=0, name="node02", count=1)  # outside an allocation: one node, the head


def test_the_head_is_the_first_node_of_the_allocation(scontrol: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_NODELIST", raising=False)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[01-02]")
    assert head_node() == "node01"
    assert _calls(scontrol) == [["show", "hostnames", "node[01-02]"]]
    monkeypatch.delenv("SLURM_JOB_NODELIST")
    monkeypatch.setenv("SLURM_NODELIST", "node[01-02]")  # the older name
    assert head_node() == "node01"
    monkeypatch.setenv("SLURM_NODELIST", "nothing")
    assert head_node() is None
    monkeypatch.setenv("SLURM_NODELIST", "unknown[1-2]")  # scontrol fails: no head known
    assert head_node() is None


def test_no_head_outside_an_allocation_or_without_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    assert head_node() is None
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[01-02]")
    _without_scontrol(tmp_path, monkeypatch)
    assert head_node() is None


def test_a_nodes_address_is_its_slurm_nodeaddr(scontrol: Path) -> None:
    # node01's recorded line says NodeAddr=127.0.0.1; the name itself resolves to nothing here
    assert node_address("node01") == "127.0.0.1"
    assert _calls(scontrol) == [["show", "node", "node01", "--oneliner"]]


def test_a_nodeaddr_that_is_a_name_is_resolved_to_an_ip(scontrol: Path) -> None:
    nodes = scontrol / "scontrol.nodes"
    nodes.write_text(nodes.read_text().replace("NodeAddr=127.0.0.1", "NodeAddr=localhost"))
    assert node_address("node02") == "127.0.0.1"  # localhost, as /etc/hosts has it


def test_without_a_nodeaddr_the_name_is_the_address(scontrol: Path) -> None:
    nodes = scontrol / "scontrol.nodes"
    nodes.write_text("NodeName=localhost Arch=x86_64 State=IDLE\nNodeName=gone.invalid State=DOWN\n")
    assert node_address("localhost") == "127.0.0.1"
    assert node_address("gone.invalid") == "gone.invalid"  # resolves to nothing: the name as is
    assert node_address("node09") == "node09"  # scontrol knows no such node


def test_without_scontrol_the_name_is_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _without_scontrol(tmp_path, monkeypatch)
    assert node_address("localhost") == "127.0.0.1"
    assert node_address("node01.invalid") == "node01.invalid"


def test_the_heads_record_says_where_it_listens_and_why_it_ended(tmp_path: Path) -> None:
    head = Rendezvous(tmp_path, "7.0")
    head.publish_head("node01", NodePart(0, "10.0.0.1", 4000, 5000))
    record = json.loads((tmp_path / "nodes" / "head.json").read_text())
    assert record == {
        "job_id": "7.0", "node": "node01", "address": "10.0.0.1", "rpc_port": 4000, "master_port": 5000,
        "backend_ports": {}, "ended": False, "reason": None,
    }  # fmt: skip
    seen = Rendezvous(tmp_path, "7.0").head()
    assert seen is not None and (seen.master_port, seen.reason, seen.ended) == (5000, None, False)
    head.end("node02: engine exited with signal SIGKILL")
    seen = Rendezvous(tmp_path, "7.0").head()
    assert seen is not None and seen.ended and seen.reason == "node02: engine exited with signal SIGKILL"
    assert (seen.address, seen.rpc_port) == ("10.0.0.1", 4000)  # what it published stays


def test_a_head_that_ends_before_publishing_still_ends_the_others(tmp_path: Path) -> None:
    Rendezvous(tmp_path, "7.0").end()
    seen = Rendezvous(tmp_path, "7.0").head()
    assert seen is not None and seen.ended and seen.reason is None
    assert (seen.node, seen.address, seen.rpc_port, seen.master_port) == ("", "", 0, 0)
    assert Rendezvous(tmp_path, "7.0").await_head(timeout_s=5) == seen  # ended: nothing to wait for


def test_peers_are_the_other_nodes_reports_by_node(tmp_path: Path) -> None:
    rendezvous = Rendezvous(tmp_path, "7.0")
    rendezvous.publish_head("node01", NodePart(0, "10.0.0.1", 4000, 5000))
    before = time.time()
    rendezvous.report("node03", "running")
    rendezvous.report("node02", "failed", "lmcache did not become ready")
    (tmp_path / "nodes" / "node04.json").write_text("not json")  # a torn write is no report
    peers = rendezvous.peers()
    assert list(peers) == ["node02", "node03"]  # node order; the head's file is not a peer
    assert peers["node02"]["reason"] == "lmcache did not become ready" and peers["node03"]["state"] == "running"
    assert before <= peers["node03"]["at"] <= time.time()
    assert rendezvous.failed_peer() == "node02: lmcache did not become ready"
    rendezvous.report("node02", "failed")
    assert rendezvous.failed_peer() == "node02: failed"


def test_a_heartbeat_is_written_while_the_block_runs_and_stops_after(tmp_path: Path) -> None:
    rendezvous = Rendezvous(tmp_path, "7.0")
    beat = tmp_path / "nodes" / "node01.beat"
    with rendezvous.beating("node01", every_s=0.05):
        deadline = time.monotonic() + 10
        seen = set()
        while len(seen) < 2 and time.monotonic() < deadline:  # at least two beats: it goes on beating
            if beat.exists():
                seen.add(json.loads(beat.read_text())["at"])
            time.sleep(0.01)
        assert len(seen) >= 2
    record = json.loads(beat.read_text())
    assert (record["job_id"], record["node"]) == ("7.0", "node01")
    assert "heartbeat-node01" not in [t.name for t in threading.enumerate()]  # no beat after the block
    assert rendezvous.node_dir("node02") == tmp_path / "nodes" / "node02"


def test_the_head_waits_for_a_node_that_reports_late(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(multinode, "POLL_S", 0.05)
    late = threading.Timer(0.3, lambda: Rendezvous(tmp_path, "7.0").report("node02", "running"))
    late.start()
    try:
        assert Rendezvous(tmp_path, "7.0").await_peers(1, "running", timeout_s=30) is None
    finally:
        late.join()


def test_a_report_without_its_node_is_named_by_its_file(tmp_path: Path) -> None:
    (tmp_path / "nodes").mkdir()
    (tmp_path / "nodes" / "node05.json").write_text(json.dumps({"job_id": "7.0", "state": "running"}))
    assert Rendezvous(tmp_path, "7.0").peers() == {"node05": {"job_id": "7.0", "state": "running"}}
