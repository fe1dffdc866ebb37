"""Two writers of one point's state.json, the second a real process: while one holds the point's lock in its
read-modify-write, the other waits, then reads what the first wrote; no update is lost. The submit lock likewise
keeps a second submit out until the first lets go."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from slurmx.store.lock import locked
from slurmx.store.state import PointState, read_state, update_state

ROOT = Path(__file__).resolve().parents[2]
HOLDER = ROOT / "tests" / "helpers" / "lock_holder.py"
WAIT_S = 1.0  # how long the waiting writer is watched while the other holds the lock: an unlocked one is done in ms


@contextmanager
def holder(kind: str, path: Path, release: Path) -> Iterator[subprocess.Popen[str]]:
    """The helper process, holding the lock of `path` once this yields; it lets go when `release` appears."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.Popen([sys.executable, str(HOLDER), kind, str(path), str(release)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding", proc.stderr
        yield proc
    finally:
        release.touch()
        proc.wait(20)


def in_thread(work: Callable[[], None]) -> tuple[threading.Thread, threading.Event]:
    done = threading.Event()

    def run() -> None:
        work()
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done


def add_main(state: PointState | None) -> PointState:
    assert state is not None
    return state.model_copy(update={"requeues": [*state.requeues, "main"]})


def test_a_second_writer_waits_for_the_first_and_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "points" / "p1" / "state.json"
    update_state(path, lambda _: PointState(point_id="p1"))
    with holder("state", path, tmp_path / "release") as proc:
        thread, done = in_thread(lambda: update_state(path, add_main))
        assert not done.wait(WAIT_S), "the second writer did not wait for the lock"
        (tmp_path / "release").touch()
        assert proc.wait(20) == 0, proc.stderr.read() if proc.stderr else ""
        assert done.wait(20)
        thread.join()
    state = read_state(path)
    # each writer's change is there, in lock order: the second read the first's write
    assert state is not None and state.requeues == ["holder", "main"]


def test_a_second_submit_waits_for_the_submit_lock(tmp_path: Path) -> None:
    lock = tmp_path / "key" / ".submit.lock"
    order: list[str] = []

    def second() -> None:
        with locked(lock, timeout_s=20.0):
            order.append("second")

    with holder("submit", lock, tmp_path / "release") as proc:
        thread, done = in_thread(second)
        assert not done.wait(WAIT_S) and order == [], "the second submit did not wait for the lock"
        order.append("first let go")
        (tmp_path / "release").touch()
        assert proc.wait(20) == 0
        assert done.wait(20)
        thread.join()
    assert order == ["first let go", "second"]
