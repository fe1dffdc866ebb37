"""procscan's marker readers on real children started with a chosen SLURMX_JOB_MARKER: what a requeued job
finds of its earlier attempt, and what it must leave alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmx.node import procscan
from slurmx.node.identity import MARKER_ENV

SLEEP = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def spawn(children: list[subprocess.Popen[bytes]], marker: str | None, extra: dict[str, str] | None = None) -> int:
    env = {k: v for k, v in os.environ.items() if k != MARKER_ENV}
    env.update(extra or {})
    if marker is not None:
        env[MARKER_ENV] = marker
    proc = subprocess.Popen(SLEEP, env=env, stdout=subprocess.PIPE, start_new_session=True)
    children.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    return proc.pid


def test_marker_of_reads_the_value_whatever_comes_around_it(children: list[subprocess.Popen[bytes]]) -> None:
    marked = spawn(children, "4242_3-1717", {"A_SLURMX_JOB_MARKER": "decoy", "Z": "x y"})
    plain = spawn(children, None)
    assert procscan.marker_of(marked) == "4242_3-1717"
    assert procscan.has_marker(marked, "4242_3-1717") and not procscan.has_marker(marked, "4242_3")
    assert procscan.marker_of(plain) is None and not procscan.has_marker(plain, "4242_3-1717")
    assert procscan.marker_of(2**22 + 1) is None  # above any pid_max: no such process


def test_a_requeue_finds_its_earlier_attempt_only(children: list[subprocess.Popen[bytes]]) -> None:
    earlier = spawn(children, "777-100")  # attempt 1 of job 777 (marker <job id>-<pid>)
    current = spawn(children, "777-200")  # this attempt's own
    other_job = spawn(children, "7770-100")  # job 7770: its prefix "7770-" is not "777-"
    spawn(children, None)
    found = procscan.earlier_attempts("777-", "777-200")
    assert [p.pid for p in found] == [earlier]
    (proc,) = found
    assert (proc.ppid, proc.pgid, proc.cmdline) == (os.getpid(), earlier, " ".join(SLEEP))
    assert current not in {p.pid for p in found} and other_job not in {p.pid for p in found}
    assert proc.to_dict() == {"pid": earlier, "ppid": os.getpid(), "pgid": earlier, "state": proc.state,
                              "cmdline": " ".join(SLEEP)}  # fmt: skip


def test_a_zombie_of_an_earlier_attempt_is_not_found(children: list[subprocess.Popen[bytes]]) -> None:
    zombie = spawn(children, "888-1")
    os.kill(zombie, 9)
    assert procscan.wait_gone([zombie], timeout_s=10) == []  # dead, and a zombie until the fixture reaps it
    stat = procscan.read_stat(zombie)
    assert stat is not None and stat[0] == "Z"
    assert procscan.earlier_attempts("888-", "888-2") == []


def test_this_process_and_its_ancestors_are_spared() -> None:
    chain = procscan.self_and_ancestors()
    assert os.getpid() in chain and os.getppid() in chain and 1 not in chain
    stat = procscan.read_stat(os.getppid())
    assert stat is not None and (stat[1] in chain or stat[1] <= 1)  # the grandparent too, up to init


def test_wait_gone_notices_an_end_within_a_short_poll(children: list[subprocess.Popen[bytes]]) -> None:
    pid = spawn(children, None)
    killer = threading.Timer(0.15, os.kill, (pid, signal.SIGKILL))
    killer.start()
    began = time.monotonic()
    assert procscan.wait_gone([pid], timeout_s=30) == []
    took = time.monotonic() - began
    killer.join()
    assert 0.1 <= took < 0.8  # polled every 0.05 s: seen soon after the kill, not a second later


def test_a_grace_asks_first_and_kills_only_what_stays(tmp_path: Path) -> None:
    marker = f"grace-{os.getpid()}-{time.monotonic_ns()}"
    said = tmp_path / "said"
    polite = (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (open({str(said)!r}, 'a').write('term\\n'), sys.exit(0)))\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    )
    env = {**os.environ, MARKER_ENV: marker}
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, start_new_session=True)
        for code in (polite, stubborn)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        found = procscan.kill_survivors(marker, grace_s=0.5, wait_s=5)
        assert sorted(p.pid for p in found) == sorted(p.pid for p in procs)
        assert [proc.wait(timeout=10) for proc in procs] == [0, -signal.SIGKILL]  # one asked, one killed
        assert said.read_text() == "term\n"
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def test_a_marker_that_is_not_utf8_is_read_with_a_replacement(children: list[subprocess.Popen[bytes]]) -> None:
    env = {k.encode(): v.encode() for k, v in os.environ.items() if k != MARKER_ENV}
    proc = subprocess.Popen(SLEEP, env={**env, MARKER_ENV.encode(): b"job-\xff"}, stdout=subprocess.PIPE)
    children.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    assert procscan.marker_of(proc.pid) == "job-\ufffd"


def test_the_group_read_is_the_process_group_not_the_session(children: list[subprocess.Popen[bytes]]) -> None:
    proc = subprocess.Popen(SLEEP, stdout=subprocess.PIPE, process_group=0)  # its own group, this session
    children.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    stat = procscan.read_stat(proc.pid)
    assert stat is not None and stat[1:] == (os.getpid(), os.getpgid(proc.pid)) and os.getsid(proc.pid) != proc.pid


def test_a_group_member_without_the_marker_is_killed_too(children: list[subprocess.Popen[bytes]]) -> None:
    pid = spawn(children, None)  # its own session and group, no marker
    found = procscan.kill_survivors(f"absent-{os.getpid()}", pgids=[pid], wait_s=5)
    assert [p.pid for p in found] == [pid]
    assert children[-1].wait(timeout=10) == -signal.SIGKILL
