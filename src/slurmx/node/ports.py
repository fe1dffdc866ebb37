"""Free TCP ports for a point's servers, chosen below the kernel's ephemeral range.

A port the kernel hands out for bind(0) comes from the ephemeral range, the same range every outgoing
connection on the node takes its source port from: between choosing it and the server binding it, a
connection of any process (another node's engine rank, torch's store, a scrape) may take it. Ports
below that range are never handed out that way, so a chosen port stays free until its server binds
it unless another job binds it on purpose; every port is checked by binding it while the rest are chosen.
"""

from __future__ import annotations

import random
import socket
from contextlib import ExitStack
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000  # above the ports services usually claim
TRIES = 200


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768 when it cannot be read)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _bound_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct free ports: all sockets stay bound until every port is chosen. Below the ephemeral
    range where it leaves room; from the kernel (bind 0) for any the range could not give."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    high = ephemeral_low()
    with ExitStack() as stack:
        socks: list[socket.socket] = []
        candidates = random.sample(range(LOWEST, high), min(TRIES, high - LOWEST)) if high - LOWEST > count else []
        for port in candidates:
            if len(socks) == count:
                break
            try:
                socks.append(stack.enter_context(_bound_socket(host, port)))
            except OSError:  # taken: the next candidate
                continue
        while len(socks) < count:
            socks.append(stack.enter_context(_bound_socket(host, 0)))
        return [int(s.getsockname()[1]) for s in socks]


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]
