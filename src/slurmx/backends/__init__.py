"""KV-offload backends as typed builders: one module per kv-offload-backend name.

Each turns a point's DRAM budget into its own size by the recipe's recorded policy, and builds its
server argv and vLLM connector config by one function, so no config is ever written by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict


@dataclass(frozen=True)
class ServerPorts:
    """Ports chosen on the node (free ones), or InferenceX's fixed ones when rendering for review."""

    engine: int  # where clients connect: the engine, or the router in front of it
    lmcache: int
    lmcache_http: int
    mooncake_master: int
    engine_behind_router: int = 0  # the engine's own port when a router fronts it


class BackendSpec(BaseModel):
    """A backend resolved for one point at submit time; stored in point.json."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str  # none, vllm-simple, lmcache, mooncake
    version: str | None = None
    total_cpu_dram_gb: int = 0
    gpus: int = 1
    tp: int = 1
    # lmcache
    l1_size_gb: int | None = None
    l1_fraction: float | None = None
    chunk_size: int | None = None
    transfer_mode: str | None = None
    mq_timeout_s: float | None = None
    server_flags: list[str] = []
    startup_timeout_s: int = 600
    # vllm-simple
    cpu_bytes_per_rank: int | None = None
    # mooncake
    per_rank_gb: float | None = None
    master_flags: list[str] = []
    load_failure_policy: str | None = None

    @property
    def runs_server(self) -> bool:
        return self.name in ("lmcache", "mooncake")


def kv_transfer_config(spec: BackendSpec, ports: ServerPorts) -> dict[str, Any] | None:
    """vLLM's --kv-transfer-config for the backend, or None for no offload."""
    from slurmx.backends import lmcache, mooncake, vllm_simple

    if spec.name == "lmcache":
        return lmcache.connector_config(spec, ports)
    if spec.name == "vllm-simple":
        return vllm_simple.connector_config(spec)
    if spec.name == "mooncake":
        return mooncake.connector_config(spec, ports)
    return None
