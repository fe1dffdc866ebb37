"""Free TCP ports picked by the kernel, so two jobs sharing a node never collide on a fixed port."""

from __future__ import annotations

import socket
from contextlib import ExitStack


def _bound_socket(host: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.bind((host, 0))
    return sock


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct free ports: all sockets stay bound until every port is chosen."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    with ExitStack() as stack:
        socks = [stack.enter_context(_bound_socket(host)) for _ in range(count)]
        return [int(s.getsockname()[1]) for s in socks]


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]
