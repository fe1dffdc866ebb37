"""procscan's /proc readers on real processes it can know the truth of: a child of this test, live,
zombie or gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from slurmx.node.procscan import info, is_running, read_cmdline, read_stat, send, wait_gone

SLEEP = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(SLEEP, start_new_session=True, stdout=subprocess.PIPE)
    # up and asleep: a child still starting Python can be seen in D (disk wait) on a loaded machine
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    yield proc
    proc.kill()
    proc.wait()
    proc.stdout.close()


def test_stat_and_cmdline_of_a_live_child(child: subprocess.Popen[bytes]) -> None:
    stat = read_stat(child.pid)
    assert stat is not None and stat[1:] == (os.getpid(), child.pid)  # ppid, pgid (its own session)
    assert stat[0] in ("R", "S")
    assert read_cmdline(child.pid) == " ".join(SLEEP)
    found = info(child.pid)
    assert found is not None and (found.ppid, found.pgid, found.cmdline) == (os.getpid(), child.pid, " ".join(SLEEP))
    assert is_running(child.pid) and send(child.pid, 0)


def test_a_zombie_is_not_running_and_a_reaped_process_is_gone(child: subprocess.Popen[bytes]) -> None:
    os.kill(child.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while (stat := read_stat(child.pid)) is not None and stat[0] != "Z":  # dead, not yet reaped
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not is_running(child.pid)
    assert wait_gone([child.pid], timeout_s=0.0) == []
    child.wait()
    assert read_stat(child.pid) is None and read_cmdline(child.pid) == "" and info(child.pid) is None
    assert not send(child.pid, 0)


def test_wait_gone_returns_when_the_process_ends_and_names_those_left_at_the_deadline(
    child: subprocess.Popen[bytes],
) -> None:
    started = time.monotonic()
    assert wait_gone([child.pid], timeout_s=0.3) == [child.pid]
    assert 0.3 <= time.monotonic() - started < 5
    child.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert wait_gone([child.pid], timeout_s=30) == []  # a zombie counts as gone: no reap needed
    assert time.monotonic() - started < 5
