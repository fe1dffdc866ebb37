"""Before sbatch: can the cluster ever run this request? Partition, GRES, features and memory."""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurmx.errors import UserError
from slurmx.slurm.commands import run_slurm
from slurmx.slurm.request import SlurmRequest


@dataclass(frozen=True)
class NodeInfo:
    name: str
    partitions: frozenset[str]
    gpus_by_type: dict[str, int]
    features: frozenset[str]
    real_memory_mb: int


def _fields(line: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


def _parse_gres(gres: str) -> dict[str, int]:
    """'gpu:b300:8(S:0),gpu:h100:2' -> {'b300': 8, 'h100': 2}; untyped GPUs count under ''."""
    counts: dict[str, int] = {}
    for part in gres.split(","):
        match = re.match(r"gpu(?::([^:(]+))?:(\d+)", part)
        if match:
            counts[match.group(1) or ""] = counts.get(match.group(1) or "", 0) + int(match.group(2))
    return counts


def query_nodes() -> list[NodeInfo]:
    out = run_slurm(["scontrol", "show", "node", "--oneliner"]).stdout
    nodes = []
    for line in out.splitlines():
        fields = _fields(line)
        if "NodeName" not in fields:
            continue
        nodes.append(
            NodeInfo(
                name=fields["NodeName"],
                partitions=frozenset(p for p in fields.get("Partitions", "").split(",") if p),
                gpus_by_type=_parse_gres(fields.get("Gres", "")),
                features=frozenset(f for f in fields.get("AvailableFeatures", "").split(",") if f and f != "(null)"),
                real_memory_mb=int(fields.get("RealMemory", "0") or 0),
            )
        )
    return nodes


def query_partitions() -> set[str]:
    out = run_slurm(["scontrol", "show", "partition", "--oneliner"]).stdout
    return {f["PartitionName"] for f in map(_fields, out.splitlines()) if "PartitionName" in f}


def mem_mb(mem: str) -> int:
    """sbatch --mem syntax to MB; 0 means all of a node's memory."""
    match = re.fullmatch(r"(\d+)([KMGT]?)B?", mem.strip().upper())
    if not match:
        raise UserError(f"invalid Slurm memory request {mem!r} (use e.g. 16G, 500M or 0)")
    scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[match.group(2)]
    return int(int(match.group(1)) * scale)


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
    need_mb = mem_mb(request.mem)
    if need_mb and not any(n.real_memory_mb >= need_mb for n in with_features):
        most = max(n.real_memory_mb for n in with_features)
        return f"no matching node has {request.mem} of memory (at most {most} MB)"
    return None


def why_memory_short(request: SlurmRequest, need_mb: int, what: str, nodes: list[NodeInfo]) -> str | None:
    """The reason no node that could take `request` has the host memory a point needs, with the figures."""
    if need_mb <= 0:
        return None
    gpu_type = request.gres_type or ""
    fitting = [
        n
        for n in nodes
        if request.partition in n.partitions
        and n.name not in request.exclude
        and (n.gpus_by_type.get(gpu_type, 0) if gpu_type else sum(n.gpus_by_type.values())) >= request.gpus
        and set(request.features) <= n.features
    ]
    if not fitting or any(n.real_memory_mb >= need_mb for n in fitting):
        return None
    largest = max(fitting, key=lambda n: n.real_memory_mb)
    return (
        f"host memory: the point needs {need_mb} MB ({what}), the largest node that fits its request "
        f"({largest.name}) has RealMemory={largest.real_memory_mb} MB"
    )
