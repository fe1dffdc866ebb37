"""Before sbatch: can the cluster ever run this request? Partition, GRES, features and memory."""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurmx.slurm.commands import run_slurm
from slurmx.slurm.request import SlurmRequest, mem_mb


@dataclass(frozen=True)
class NodeInfo:
    name: str
    partitions: frozenset[str]
    gpus_by_type: dict[str, int]
    features: frozenset[str]
    real_memory_mb: int
    sockets: int = 1


def scontrol_fields(line: str) -> dict[str, str]:
    """`scontrol show ... --oneliner` output as KEY=VALUE pairs."""
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


def _parse_gres(gres: str) -> dict[str, int]:
    """'gpu:b300:8(S:0),gpu:h100:2' -> {'b300': 8, 'h100': 2}; untyped GPUs count under ''."""
    counts: dict[str, int] = {}
    for part in gres.split(","):
        match = re.match(r"gpu(?::([^:(]+))?:(\d+)", part)
        if match:
            counts[match.group(1) or ""] = counts.get(match.group(1) or "", 0) + int(match.group(2))
    return counts


def nodes_argv() -> list[str]:
    return ["scontrol", "show", "node", "--oneliner"]


def partitions_argv() -> list[str]:
    return ["scontrol", "show", "partition", "--oneliner"]


def config_argv() -> list[str]:
    return ["scontrol", "show", "config"]


def parse_nodes(out: str) -> list[NodeInfo]:
    """`scontrol show node --oneliner` output to the nodes, in its order."""
    nodes = []
    for line in out.splitlines():
        fields = scontrol_fields(line)
        if "NodeName" not in fields:
            continue
        nodes.append(
            NodeInfo(
                name=fields["NodeName"],
                partitions=frozenset(p for p in fields.get("Partitions", "").split(",") if p),
                gpus_by_type=_parse_gres(fields.get("Gres", "")),
                features=frozenset(f for f in fields.get("AvailableFeatures", "").split(",") if f and f != "(null)"),
                real_memory_mb=int(fields.get("RealMemory", "0") or 0),
                sockets=int(fields.get("Sockets", "1") or 1),
            )
        )
    return nodes


def parse_kill_wait_s(out: str) -> int | None:
    """KillWait of `scontrol show config` ("KillWait = 30 sec"), or None if it does not say."""
    match = re.search(r"^KillWait\s*=\s*(\d+)", out, re.M)
    return int(match.group(1)) if match else None


def parse_partitions(out: str) -> set[str]:
    """The partition names of `scontrol show partition --oneliner` output."""
    return {f["PartitionName"] for f in map(scontrol_fields, out.splitlines()) if "PartitionName" in f}


def query_nodes() -> list[NodeInfo]:
    return parse_nodes(run_slurm(nodes_argv()).stdout)


def query_kill_wait_s() -> int | None:
    """The cluster's KillWait (`scontrol show config`: "KillWait = 30 sec"), or None if it does not say."""
    return parse_kill_wait_s(run_slurm(config_argv()).stdout)


def query_partitions() -> set[str]:
    return parse_partitions(run_slurm(partitions_argv()).stdout)


def why_unrunnable(request: SlurmRequest, partitions: set[str], nodes: list[NodeInfo]) -> str | None:
    """The reason no node of the cluster can ever run `request`, or None if one can."""
    if request.partition not in partitions:
        return f"partition {request.partition!r} does not exist (have: {', '.join(sorted(partitions)) or 'none'})"
    candidates = [n for n in nodes if request.partition in n.partitions and n.name not in request.exclude]
    if not candidates and request.exclude:
        return (
            f"every node of partition {request.partition!r} is excluded ({','.join(request.exclude)} failed this point)"
        )
    gpu_type = request.gres_type or ""
    with_gpus = [
        n
        for n in candidates
        if (n.gpus_by_type.get(gpu_type, 0) if gpu_type else sum(n.gpus_by_type.values())) >= request.gpus
    ]
    if not with_gpus:
        best = max(
            (n.gpus_by_type.get(gpu_type, 0) if gpu_type else sum(n.gpus_by_type.values()) for n in candidates),
            default=0,
        )
        return f"no node in partition {request.partition!r} has {request.gres} (at most {best})"
    with_features = [n for n in with_gpus if set(request.features) <= n.features]
    if not with_features:
        return f"no node with {request.gres} has features {','.join(request.features)}"
    sockets = request.sockets_per_node or 0
    if not any(n.sockets >= sockets for n in with_features):
        most = max(n.sockets for n in with_features)
        return f"no node with {request.gres} has {sockets} sockets (--sockets-per-node; at most {most})"
    if request.nodes > 1:  # a multinode point: that many nodes must each have all of it
        need_mb = mem_mb(request.mem)
        fitting = [n for n in with_features if n.sockets >= sockets and n.real_memory_mb >= need_mb]
        if len(fitting) < request.nodes:
            names = ",".join(n.name for n in fitting) or "none"
            return (
                f"the point needs {request.nodes} nodes with {request.gres}"
                + (f", {request.mem} of memory" if need_mb else "")
                + (f" and features {','.join(request.features)}" if request.features else "")
                + f" each in partition {request.partition!r}; {len(fitting)} have it ({names})"
            )
    return None


def _fits(request: SlurmRequest, node: NodeInfo) -> bool:
    """Everything of `request` but memory: partition, not excluded, GPUs, features, sockets."""
    gpu_type = request.gres_type or ""
    gpus = node.gpus_by_type.get(gpu_type, 0) if gpu_type else sum(node.gpus_by_type.values())
    return (
        request.partition in node.partitions
        and node.name not in request.exclude
        and gpus >= request.gpus
        and set(request.features) <= node.features
        and node.sockets >= (request.sockets_per_node or 0)
    )


def why_memory_short(request: SlurmRequest, need_mb: int, what: str, nodes: list[NodeInfo]) -> str | None:
    """The reason no node that could take `request` has the memory the point needs, with the figures.

    The need is the request's --mem where it names one (made of the profile's memory plus the point's
    pool and margin, as `what` says), else (--mem=0, the whole node) the point's pool and margin."""
    asked = mem_mb(request.mem)
    if asked:
        what = f"--mem={request.mem}" + (f" = profile mem {asked - need_mb} MB + {what}" if what else "")
        need_mb = asked
    if need_mb <= 0:
        return None
    fitting = [n for n in nodes if _fits(request, n)]
    if not fitting or any(n.real_memory_mb >= need_mb for n in fitting):
        return None
    largest = max(fitting, key=lambda n: n.real_memory_mb)
    return (
        f"host memory: the point needs {need_mb} MB ({what}), the largest node that fits its request "
        f"({largest.name}) has RealMemory={largest.real_memory_mb} MB"
    )
