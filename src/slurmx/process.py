"""What starts on a node, as data: a process's argv, env delta and readiness URL, and the ports chosen."""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field

# Every process logs unbuffered, so a failure's log tail shows its last words.
COMMON_ENV = {"PYTHONUNBUFFERED": "1"}


@dataclass(frozen=True)
class Process:
    name: str  # lmcache, mooncake-master, engine, router, replay
    argv: list[str]
    env: dict[str, str]
    health_url: str | None = None
    ready_timeout_s: float = 600.0
    # what teardown sends first, before SIGKILL after the grace: SIGTERM, or the signal on which the
    # process stops gracefully (aiperf: SIGINT, on which it writes what it measured)
    stop_signal: signal.Signals = signal.SIGTERM
    # files the node writes before starting it (path -> text): a config its env names (Mooncake's store)
    files: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ServerPorts:
    """Ports chosen on the node (free ones), or InferenceX's fixed ones when rendering for review."""

    engine: int  # where clients connect: the engine, or the router in front of it
    engine_behind_router: int = 0  # the engine's own port when a router fronts it
    router_metrics: int = 0  # the router's Prometheus port
    rendezvous: int = 0  # where an engine on one node joins its ranks (Engine.local_rendezvous_flags)
    named: Mapping[str, int] = field(default_factory=dict)  # a backend's own ports, by the names it declares
    # a multinode point's backend servers that run on the head for every node's ranks (Backend.head_servers): the
    # head's address, where they listen and every node's ranks reach them (None: on this node, on loopback)
    store_host: str | None = None
    store_here: bool = True  # this node starts them (the head); the others only connect

    def __getitem__(self, name: str) -> int:
        return self.named[name]


def loopback(port: int, path: str = "") -> str:
    return f"http://127.0.0.1:{port}{path}"
