"""NUMA placement of the LMCache server's L1 pool: the GPUs' NUMA affinity, a policy, an argv prefix.

The topology comes from `nvidia-smi topo -m` (each GPU's CPU and NUMA affinity) and /sys (the
node's NUMA nodes and their CPUs). The cluster profile names the policy: `bind` (CPUs and memory on
the NUMA nodes of the point's GPUs), `interleave` (memory interleaved across those nodes, CPUs on
them) or `none`. It is applied with numactl; where numactl is missing (the local stack), with a
CPU-affinity launcher (`python -m slurmx.node.numa`), which keeps first-touch memory on those nodes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmx.node import gpus as node_gpus

if TYPE_CHECKING:  # only stdlib at run time: the launcher starts before every backend server
    from slurmx.config.clusters import NumaPolicy

__all__ = ["REVIEW_NODES", "Topology", "parse_topo_matrix", "placement", "placement_prefix", "review_prefix"]
# What `render` shows for the NUMA nodes of the point's GPUs: they are read on the node at run time.
REVIEW_NODES = "{gpu_numa_nodes}"
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class GpuAffinity:
    cpus: str  # as nvidia-smi prints it: "0-63,128-191"
    numa_node: int | None  # None: N/A (one NUMA node, or the driver does not know)


@dataclass(frozen=True)
class Topology:
    gpus: dict[str, GpuAffinity]  # by GPU index
    numa_nodes: dict[int, str] = field(default_factory=dict)  # node -> its CPU list (/sys)

    def nodes_of(self, gpu_indices: Sequence[str]) -> list[int]:
        """The NUMA nodes of these GPUs; every node when the GPUs' nodes are unknown."""
        nodes = sorted({a.numa_node for i in gpu_indices if (a := self.gpus.get(i)) and a.numa_node is not None})
        return nodes or sorted(self.numa_nodes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus": {i: {"cpus": a.cpus, "numa_node": a.numa_node} for i, a in self.gpus.items()},
            "numa_nodes": {str(n): cpus for n, cpus in self.numa_nodes.items()},
        }


def parse_topo_matrix(text: str) -> dict[str, GpuAffinity]:
    """`nvidia-smi topo -m`: each GPU row's "CPU Affinity" and "NUMA Affinity" cells, by the header's columns."""
    lines = [_ANSI_RE.sub("", line) for line in text.splitlines()]
    header = next((line.split("\t") for line in lines if "CPU Affinity" in line), None)
    if header is None:
        return {}
    names = [cell.strip() for cell in header]
    cpu_col, numa_col = names.index("CPU Affinity"), names.index("NUMA Affinity")
    gpus = {}
    for line in lines:
        cells = line.split("\t")
        match = re.fullmatch(r"GPU(\d+)", cells[0].strip())
        if not match or len(cells) <= numa_col:
            continue
        numa = cells[numa_col].strip()
        gpus[match.group(1)] = GpuAffinity(cells[cpu_col].strip(), int(numa) if numa.isdigit() else None)
    return gpus


def read_numa_nodes(root: Path = Path("/sys/devices/system/node")) -> dict[int, str]:
    nodes = {}
    for path in sorted(root.glob("node[0-9]*")):
        try:
            nodes[int(path.name[4:])] = (path / "cpulist").read_text().strip()
        except (OSError, ValueError):
            continue
    return nodes


def read_topology(env: dict[str, str]) -> Topology:
    """This node's topology; GPUs empty where there is no nvidia-smi (the local stack)."""
    gpus: dict[str, GpuAffinity] = {}
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))  # the job's PATH: run the one found there
    if smi:
        try:
            out = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=30).stdout
            gpus = parse_topo_matrix(out)
        except (OSError, subprocess.SubprocessError):
            gpus = {}
    return Topology(gpus, read_numa_nodes())


def point_gpus(env: dict[str, str], topology: Topology) -> list[str]:
    """The point's GPU indices (CUDA_VISIBLE_DEVICES by index), else every GPU seen."""
    return node_gpus.visible_indices(env) or sorted(topology.gpus, key=int)


def cpus_of(nodes: Sequence[int], topology: Topology) -> str:
    return ",".join(topology.numa_nodes[n] for n in nodes if n in topology.numa_nodes)


def placement_prefix(
    policy: NumaPolicy, topology: Topology, gpu_indices: Sequence[str], numactl: str | None
) -> list[str]:
    """The argv that goes before the LMCache server's own; empty for `none` or no NUMA nodes known."""
    if policy == "none":
        return []
    nodes = topology.nodes_of(gpu_indices)
    if not nodes:
        return []
    if numactl:
        return numactl_argv(policy, numactl, ",".join(str(n) for n in nodes))
    cpus = cpus_of(nodes, topology)
    return [sys.executable, "-m", "slurmx.node.numa", "--cpus", cpus, "--"] if cpus else []


def numactl_argv(policy: NumaPolicy, numactl: str, node_list: str) -> list[str]:
    memory = f"--membind={node_list}" if policy == "bind" else f"--interleave={node_list}"
    return [numactl, f"--cpunodebind={node_list}", memory]


def review_prefix(policy: NumaPolicy) -> list[str]:
    """The placement as `render` shows it: numactl, with the GPUs' NUMA nodes still to be read on the node."""
    return [] if policy == "none" else numactl_argv(policy, "numactl", REVIEW_NODES)


def placement(
    policy: NumaPolicy, env: dict[str, str], *, in_container: bool = False
) -> tuple[list[str], dict[str, Any]]:
    """(argv prefix, what the lock records: policy, tool, the topology seen and the nodes chosen).

    In a container the prefix runs inside it, so it names the image's numactl (vLLM's --numa-bind
    needs one there too); the topology is the node's (same kernel, same /sys)."""
    topology = read_topology(env)
    gpus = point_gpus(env, topology)
    numactl = "numactl" if in_container else shutil.which("numactl", path=env.get("PATH"))
    prefix = placement_prefix(policy, topology, gpus, numactl)
    tool = "numactl" if numactl else "cpu-affinity (numactl not found)"
    record = {
        "policy": policy,
        "tool": f"{tool} (inside the container)" if in_container else tool,
        "gpus": gpus,
        "nodes": topology.nodes_of(gpus) if policy != "none" else [],
        "prefix": prefix,
        "topology": topology.to_dict(),
    }
    return prefix, record


def parse_cpu_list(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.split(","):
        if "-" in part:
            low, high = part.split("-")
            cpus.update(range(int(low), int(high) + 1))
        elif part.strip():
            cpus.add(int(part))
    return cpus


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m slurmx.node.numa --cpus 0-15 -- ARGV`: pin to those CPUs, then become ARGV."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4 or args[0] != "--cpus" or args[2] != "--":
        sys.stderr.write("usage: python -m slurmx.node.numa --cpus LIST -- ARGV...\n")
        return 2
    os.sched_setaffinity(0, parse_cpu_list(args[1]))
    os.execvp(args[3], args[3:])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
