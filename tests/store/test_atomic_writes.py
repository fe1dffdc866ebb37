"""Atomic writes with real processes killed mid-write: a reader sees the old file or the new one,
never a torn one, for the plain writer and for the ledger and state files built on it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmx.store.ledger import read_sweep
from slurmx.store.state import read_state
from slurmx.store.tree import SweepDir
from tests.store.atomic_writer import SIZES, text_version, writer

WRITER = Path(__file__).with_name("atomic_writer.py")
TARGETS = {"text": "data.txt", "sweep": "sweep.json", "state": "state.json"}
READ_BOUND_S = 5.0


def read_version(kind: str, target: Path) -> int:
    """The version a reader finds in `target`; fails the test on anything else (a torn file)."""
    if kind == "text":
        text = target.read_text()
        matches = [v for v in (0, 1) if text == text_version(v)]
        assert matches, f"torn file: {len(text)} characters, starts {text[:20]!r}"
        return matches[0]
    if kind == "sweep":
        record = read_sweep(SweepDir(target.parent))  # raises on a partial file
        return SIZES.index(len(record.point_ids))
    state = read_state(target)
    assert state is not None, "state.json did not parse (torn?)"
    return state.attempt - 1


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        code = proc.poll()
        assert code is None, f"the writer exited with {code} before it got there: {proc.stderr.read()!r}"  # type: ignore[union-attr]  # stderr is a pipe
        assert time.monotonic() < deadline, "the writer never got there"
        time.sleep(0.005)


@pytest.fixture
def spawn() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:  # a failed assertion must not leave a writer running
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _start(
    spawn: list[subprocess.Popen[bytes]], kind: str, mode: str, target: Path
) -> tuple[subprocess.Popen[bytes], Path]:
    ready = target.parent / f"ready-{mode}"
    argv = [sys.executable, str(WRITER), kind, mode, str(target), str(ready)]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
    spawn.append(proc)
    return proc, ready


@pytest.mark.parametrize("kind", list(TARGETS))
def test_a_writer_killed_before_the_commit_leaves_the_old_file(
    kind: str, tmp_path: Path, spawn: list[subprocess.Popen[bytes]]
) -> None:
    target = tmp_path / TARGETS[kind]
    writer(kind, target)(0)
    proc, ready = _start(spawn, kind, "block", target)
    _wait_for(ready, proc)  # the new version is completely written, just not committed
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert read_version(kind, target) == 0
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in (target.name, ready.name)]
    assert all(name.startswith(".") for name in leftovers), leftovers  # no half file under a reader's name


@pytest.mark.parametrize("kind", list(TARGETS))
def test_readers_never_see_a_torn_file_while_a_writer_runs_and_is_killed(
    kind: str, tmp_path: Path, spawn: list[subprocess.Popen[bytes]]
) -> None:
    target = tmp_path / TARGETS[kind]
    writer(kind, target)(0)
    proc, ready = _start(spawn, kind, "loop", target)
    _wait_for(ready, proc)
    seen: set[int] = set()
    reads = 0
    deadline = time.monotonic() + READ_BOUND_S
    # Read until the writer has visibly replaced the file both ways, so reads overlapped real writes.
    while not (seen >= {0, 1} and reads >= 20) and time.monotonic() < deadline:
        seen.add(read_version(kind, target))
        reads += 1
    assert seen == {0, 1}, f"the writer made no progress in {READ_BOUND_S} s"
    proc.send_signal(signal.SIGKILL)  # wherever it is in its write
    proc.wait()
    assert read_version(kind, target) in (0, 1)
