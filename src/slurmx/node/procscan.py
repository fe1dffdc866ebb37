"""Find a job's processes in /proc by env marker and by process group, and kill them.

A process can leave its process group (setsid) but not its initial environment, so the env
marker is the net that catches what group signals miss. Usable from any process as root.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from slurmx.node.identity import MARKER_ENV

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    pgid: int
    state: str  # one letter from /proc/<pid>/stat: R, S, D, Z, T, ...
    cmdline: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pids() -> Iterator[int]:
    for entry in os.listdir(PROC):
        if entry.isdigit():
            yield int(entry)


def read_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) of a process, or None if it is gone."""
    try:
        raw = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # comm may hold spaces and parentheses; the fields after its last ')' are fixed.
    fields = raw[raw.rfind(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1]), int(fields[2])


def read_cmdline(pid: int) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:300]


def has_marker(pid: int, marker: str) -> bool:
    """True if the process was started with SLURMX_JOB_MARKER=<marker> in its environment."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, or another user's process when not root
        return False
    return f"{MARKER_ENV}={marker}".encode() in environ.split(b"\0")


def marker_of(pid: int) -> str | None:
    """The process's SLURMX_JOB_MARKER, or None."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    prefix = f"{MARKER_ENV}=".encode()
    for item in environ.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode(errors="replace")
    return None


def earlier_attempts(job_marker_prefix: str, current_marker: str) -> list[ProcInfo]:
    """Live processes of an earlier run of the same Slurm job (a requeue on this node): their markers
    start with the job id, and they are not this run's."""
    spared = self_and_ancestors()
    found = []
    for pid in _pids():
        if pid in spared:
            continue
        marker = marker_of(pid)
        if marker is not None and marker.startswith(job_marker_prefix) and marker != current_marker:
            proc = info(pid)
            if proc is not None and proc.state != "Z":
                found.append(proc)
    return found


def info(pid: int) -> ProcInfo | None:
    stat = read_stat(pid)
    if stat is None:
        return None
    state, ppid, pgid = stat
    return ProcInfo(pid=pid, ppid=ppid, pgid=pgid, state=state, cmdline=read_cmdline(pid))


def is_running(pid: int) -> bool:
    """Exists and is not a zombie (a zombie holds no memory and cannot be killed further)."""
    stat = read_stat(pid)
    return stat is not None and stat[0] != "Z"


def self_and_ancestors() -> frozenset[int]:
    """This process and its parents: never ours to kill, even if they carry the marker."""
    chain = {os.getpid()}
    pid = os.getppid()
    while pid > 1 and pid not in chain:
        chain.add(pid)
        stat = read_stat(pid)
        pid = stat[1] if stat else 0
    return frozenset(chain)


def find_job_processes(marker: str, pgids: Iterable[int] = ()) -> list[ProcInfo]:
    """Live processes carrying the marker or belonging to one of the given process groups."""
    groups = set(pgids)
    spared = self_and_ancestors()
    found: list[ProcInfo] = []
    for pid in _pids():
        if pid in spared:
            continue
        proc = info(pid)
        if proc is None or proc.state == "Z":
            continue
        if proc.pgid in groups or has_marker(pid, marker):
            found.append(proc)
    return found


def running_by_group(pgids: Iterable[int]) -> dict[int, list[int]]:
    """Live (non-zombie) members of each given process group, in one pass over /proc."""
    members: dict[int, list[int]] = {pgid: [] for pgid in pgids}
    for pid in _pids():
        stat = read_stat(pid)
        if stat is not None and stat[2] in members and stat[0] != "Z":
            members[stat[2]].append(pid)
    return members


def send(pid: int, signum: int) -> bool:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def wait_gone(pids: Iterable[int], timeout_s: float, interval_s: float = 0.05) -> list[int]:
    """Wait until none of the pids runs; return those still running at the deadline."""
    pending = [pid for pid in pids if is_running(pid)]
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        time.sleep(interval_s)
        pending = [pid for pid in pending if is_running(pid)]
    return pending


def kill_survivors(
    marker: str, *, pgids: Iterable[int] = (), grace_s: float = 0.0, wait_s: float = 5.0, rounds: int = 5
) -> list[ProcInfo]:
    """SIGTERM (if grace_s > 0), then SIGKILL, every live process of the job; return all found.

    For `slurmx cancel`, an epilog or a test: needs only the marker, not the supervisor's state.
    """
    found = find_job_processes(marker, pgids)
    if grace_s > 0 and found:
        for proc in found:
            send(proc.pid, signal.SIGTERM)
        wait_gone([p.pid for p in found], grace_s)
    killed: dict[int, ProcInfo] = {}
    # rescan after each round: a process may have forked between the scan and its SIGKILL
    for _ in range(rounds):
        live = find_job_processes(marker, pgids)
        if not live:
            break
        for proc in live:
            send(proc.pid, signal.SIGKILL)
            killed.setdefault(proc.pid, proc)
        wait_gone([p.pid for p in live], wait_s / rounds)
    merged = {p.pid: p for p in found} | killed
    return list(merged.values())
