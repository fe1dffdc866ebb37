"""A serving engine: how its server is started for a point, and where it answers health, metrics and resets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from slurmx.plan import Point


@dataclass(frozen=True)
class NodePart:
    """One node's part of a multinode engine: its index (0: the head, which serves the API), where the
    head listens (data-parallel RPC port; torch.distributed master port when a rank spans nodes), and the
    address other nodes reach this one at."""

    index: int
    head_address: str
    rpc_port: int
    master_port: int = 0
    address: str = ""


class Engine(Protocol):
    name: str  # the master config's `framework`
    # Flags the engine module computes from the point or the node; a recipe that set one would put it twice.
    computed_flags: frozenset[str]
    metrics_path: str
    # The master config's spec-decoding methods this engine's recipes can serve ("none" included).
    spec_methods: frozenset[str]

    def parallel_flags(self, point: Point) -> list[str]: ...

    def argv(
        self, head: list[str], model: str, model_flag: str | None, served_model_name: str, port: int,
        flags: list[str], connector: dict[str, Any] | None,
    ) -> list[str]: ...  # fmt: skip

    def node_flags(self, part: NodePart, nodes: int, ranks_per_node: int) -> list[str]:
        """`part`'s flags in an engine over `nodes` nodes with `ranks_per_node` whole data-parallel ranks on
        each (0: each rank spans several nodes)."""
        ...

    def node_env(self, part: NodePart) -> dict[str, str]:
        """`part`'s env: the address the engine advertises to the other nodes."""
        ...

    def cache_reset_path(self) -> str | None:
        """POST path that empties the engine's prefix cache (and the external tier's view of it)."""
        ...
