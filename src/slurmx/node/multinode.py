"""A multinode point's nodes: which task is the head, where it listens, and how the nodes tell each other
that they are up, failed or over.

Every node runs one task of the job (submitit, one task per node). The head (node index 0) runs the point
as a single-node point does, with its engine serving the API; the other nodes run headless engine ranks
that register with it. They talk through small JSON files under `points/<id>/nodes/` on the shared
results tree: `head.json` (the head's node, address and data-parallel RPC port, the ports of the backend servers it runs
for every node's ranks, and whether the deployment is over) and `<node>.json` per other node (starting, running, failed with a reason, ended).
Each file names the Slurm job, so files of an earlier attempt are never read as this one's. Every node's
task also rewrites `<node>.beat` while it runs, so a task that died without a word (SIGKILL, OOM, a node
gone) is noticed by the others.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from slurmx.config.clusters import NodeProfile
from slurmx.engines.base import NodePart
from slurmx.errors import UserError
from slurmx.node.identity import node_name
from slurmx.node.recorder import PointFailed
from slurmx.slurm.cluster_check import scontrol_fields
from slurmx.slurm.commands import run_slurm
from slurmx.store import atomic
from slurmx.store.tree import NODES

HEAD_FILE = "head.json"
POLL_S = 1.0
BEAT_S = 2.0  # each node's task rewrites <node>.beat this often while it runs
# A node whose beat is older is gone (its task killed, its node down): the cluster profile's
# node.heartbeat-stale-s, whose default is used where no profile is at hand.
STALE_S = float(NodeProfile.model_fields["heartbeat_stale_s"].default)

NodeState = Literal["starting", "running", "failed", "ended"]


@dataclass(frozen=True)
class NodeTask:
    """This task's place in the job's allocation."""

    index: int  # SLURM_NODEID: 0 is the head
    name: str  # the Slurm node name
    count: int  # nodes in the allocation


def this_task() -> NodeTask:
    return NodeTask(
        index=int(os.environ.get("SLURM_NODEID") or 0),
        name=node_name(),
        count=int(os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or 1),
    )


def head_node() -> str | None:
    """The allocation's first node, where task 0 (the head) runs; None outside a Slurm job."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not nodelist:
        return None
    try:
        names = run_slurm(["scontrol", "show", "hostnames", nodelist]).stdout.split()
    except UserError:
        return None
    return names[0] if names else None


def node_address(name: str) -> str:
    """The address other nodes reach `name` at: Slurm's NodeAddr for it, as an IP (ZMQ binds to IPs)."""
    address = name
    try:
        out = run_slurm(["scontrol", "show", "node", name, "--oneliner"]).stdout
        address = scontrol_fields(out).get("NodeAddr") or name
    except UserError:  # no scontrol on the node: the name is all there is
        pass
    try:
        return socket.gethostbyname(address)
    except OSError:
        return address


@dataclass(frozen=True)
class Head:
    node: str
    address: str
    rpc_port: int
    master_port: int
    ended: bool
    reason: str | None
    backend_ports: dict[str, int] = field(default_factory=dict)  # its servers for every node's ranks, by name


class Rendezvous:
    """The nodes/ directory of one point for one Slurm job."""

    def __init__(self, point_dir: Path, job_id: str, stale_s: float = STALE_S) -> None:
        self.dir = point_dir / NODES
        self.job_id = job_id
        self.stale_s = stale_s

    @contextmanager
    def beating(self, node: str, every_s: float = BEAT_S) -> Iterator[None]:
        """`node`'s heartbeat for as long as the block runs (a thread: the task's main loop may be busy)."""
        stop = threading.Event()

        def beat() -> None:
            while True:
                record = {"job_id": self.job_id, "node": node, "at": time.time()}
                with contextlib.suppress(OSError):  # a full or flaky shared filesystem: again at the next beat
                    atomic.write_json(self.dir / f"{node}.beat", record)
                if stop.wait(every_s):
                    return

        thread = threading.Thread(target=beat, name=f"heartbeat-{node}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=every_s + 1)

    def silent(self, node: str) -> str | None:
        """Why `node` is taken for gone (its heartbeat stopped), or None while it beats or never beat."""
        data = self._read(self.dir / f"{node}.beat")
        if data is None:
            return None
        quiet = time.time() - float(data.get("at") or 0)
        return f"{node}: no heartbeat for {quiet:.0f} s (its task is gone)" if quiet > self.stale_s else None

    def node_dir(self, node: str) -> Path:
        """Where a node other than the head keeps its commands/ and logs/."""
        return self.dir / node

    def node_logs(self, process: str) -> list[Path]:
        """`process`'s log on every node other than the head, in node order."""
        return sorted(self.dir.glob(f"*/logs/{process}.log"))

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            data = atomic.read_json(path)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("job_id") == self.job_id else None

    # the head's side
    def publish_head(self, node: str, part: NodePart, backend_ports: Mapping[str, int] | None = None) -> None:
        """`backend_ports`: the ports of the backend servers the head runs for every node's ranks (by name)."""
        record = {"job_id": self.job_id, "node": node, "address": part.head_address, "rpc_port": part.rpc_port}
        record["master_port"] = part.master_port
        record["backend_ports"] = dict(backend_ports or {})
        atomic.write_json(self.dir / HEAD_FILE, {**record, "ended": False, "reason": None})

    def end(self, reason: str | None = None) -> None:
        """The deployment is over (any ending): every other node tears its processes down."""
        data = self._read(self.dir / HEAD_FILE) or {"job_id": self.job_id}
        atomic.write_json(self.dir / HEAD_FILE, {**data, "ended": True, "reason": reason})

    def peers(self) -> dict[str, dict[str, Any]]:
        out = {}
        for path in sorted(self.dir.glob("*.json")):
            if path.name != HEAD_FILE and (data := self._read(path)) is not None:
                out[str(data.get("node", path.stem))] = data
        return out

    def failed_peer(self) -> str | None:
        """The reason of the first other node that failed or went silent, naming it."""
        for node, data in self.peers().items():
            if data.get("state") == "failed":
                return f"{node}: {data.get('reason') or 'failed'}"
            if data.get("state") != "ended" and (why := self.silent(node)) is not None:
                return why
        return None

    def await_peers(self, count: int, state: NodeState, timeout_s: float) -> str | None:
        """Wait until `count` other nodes report `state`; the reason it did not happen, or None."""
        deadline = time.monotonic() + timeout_s
        while True:
            if (failed := self.failed_peer()) is not None:
                return failed
            there = [n for n, data in self.peers().items() if data.get("state") == state]
            if len(there) >= count:
                return None
            if time.monotonic() > deadline:
                return f"{len(there)} of {count} other nodes {state} after {timeout_s:.0f} s"
            time.sleep(POLL_S)

    # the other nodes' side
    def report(self, node: str, state: NodeState, reason: str | None = None) -> None:
        record = {"job_id": self.job_id, "node": node, "state": state, "reason": reason, "at": time.time()}
        atomic.write_json(self.dir / f"{node}.json", record)

    def head(self) -> Head | None:
        data = self._read(self.dir / HEAD_FILE)
        if data is None:
            return None
        return Head(
            node=str(data.get("node", "")),
            address=str(data.get("address", "")),
            rpc_port=int(data.get("rpc_port") or 0),
            master_port=int(data.get("master_port") or 0),
            ended=bool(data.get("ended")),
            reason=data.get("reason"),
            backend_ports={str(k): int(v) for k, v in (data.get("backend_ports") or {}).items()},
        )

    def await_head(self, timeout_s: float, head_node: str | None = None) -> Head | None:
        """The head once it has published where it listens (it may already have ended); None on time-out.
        `head_node`: a head whose heartbeat stops meanwhile fails the wait."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            head = self.head()
            if head is not None and (head.ended or head.rpc_port):
                return head
            if head_node is not None and (why := self.silent(head_node)) is not None:
                raise PointFailed(why)
            time.sleep(POLL_S)
        return None

    def ended(self) -> bool:
        head = self.head()
        return head is not None and head.ended

    def head_gone(self) -> str | None:
        """Why the head is taken for gone: its heartbeat stopped before it said the deployment is over."""
        head = self.head()
        if head is None or head.ended:
            return None
        return self.silent(head.node)
