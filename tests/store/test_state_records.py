"""state.json on its own: a point's stages over a hand-set clock, what each kind of bad file reads as, and the
file and sidecar lock update_state leaves."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import time
from pathlib import Path

import pytest

from slurmx.store.state import PointState, load_state, read_state, update_state


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_a_points_stages_and_times_over_a_hand_set_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", Clock(100.0))  # each reading one second after the last: 101, 102, ...
    fresh = PointState(point_id="p1")
    queued = fresh.advance("queued")
    first = queued.advance("preflight")
    engine = first.advance("engine", "slow start")
    again = engine.advance("preflight")  # a second preflight (an attempt's restart) keeps the first start
    failed = again.advance("failed", "engine died")
    assert [(c.stage, c.at) for c in failed.history] == [
        ("queued", 101.0), ("preflight", 102.0), ("engine", 103.0), ("preflight", 104.0), ("failed", 105.0),
    ]  # fmt: skip
    assert (failed.stage, failed.started_at, failed.ended_at, failed.reason) == ("failed", 102.0, 105.0, "engine died")
    assert (engine.started_at, engine.ended_at, engine.reason) == (102.0, None, "slow start")
    assert again.reason == "slow start"  # no new reason: the last one stays
    assert (queued.started_at, queued.ended_at) == (None, None)
    assert fresh.history == [] and fresh.stage == "queued"  # advance returns a new record, the old one is unchanged


@pytest.mark.parametrize(
    ("stage", "ended"),
    [("queued", False), ("preflight", False), ("lmcache", False), ("engine", False), ("replay", False),
     ("aggregate", False), ("done", True), ("failed", True), ("cancelled", True)],
)  # fmt: skip
def test_only_done_failed_and_cancelled_end_a_point(stage: str, ended: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: 500.0)
    after = PointState(point_id="p1").advance(stage)  # type: ignore[arg-type]  # each Stage, as a parameter
    assert (after.ended, after.ended_at) == (ended, 500.0 if ended else None)
    assert after.started_at == (500.0 if stage == "preflight" else None)


def test_a_missing_state_is_none_without_a_reason(tmp_path: Path) -> None:
    assert load_state(tmp_path / "state.json") == (None, None)
    assert read_state(tmp_path / "state.json") is None


def test_a_state_that_cannot_be_read_says_so_with_its_path(tmp_path: Path) -> None:
    directory = tmp_path / "state.json"
    directory.mkdir()  # a directory where the file should be
    assert load_state(directory) == (None, f"{directory}: unreadable: [Errno 21] Is a directory: '{directory}'")
    binary = tmp_path / "binary" / "state.json"
    binary.parent.mkdir()
    binary.write_bytes(b"\xff\xfe{}")  # not UTF-8
    assert load_state(binary) == (
        None,
        f"{binary}: unreadable: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
    )
    assert read_state(binary) is None


def test_a_state_that_does_not_parse_names_what_is_wrong_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"point_id": "p1", "stage": "running"}')  # no such stage
    assert load_state(path) == (None, f"{path}: not a valid state file (stage)")
    path.write_text('{"point_id": "p1", "attempt": "two"}')
    assert load_state(path) == (None, f"{path}: not a valid state file (attempt)")
    path.write_text('{"point_id": "p1", "sta')  # torn by another tool
    state, why = load_state(path)
    assert state is None and why is not None and "\n" not in why
    assert why.startswith(f"{path}: not a valid state file (Invalid JSON: EOF while parsing") and why.endswith(")")


def test_update_state_writes_indented_json_and_keeps_its_lock_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "points" / "p1" / "state.json"  # no directory yet
    seen: list[PointState | None] = []

    def first(current: PointState | None) -> PointState:
        seen.append(current)
        return PointState(point_id="p1", node="node01")

    old = os.umask(0o022)
    try:
        written = update_state(path, first)
    finally:
        os.umask(old)
    assert seen == [None] and read_state(path) == written
    text = path.read_text()
    assert text.startswith('{\n  "point_id": "p1",\n  "stage": "queued",\n  "attempt": 1,\n') and text.endswith("}\n")
    assert json.loads(text)["node"] == "node01"
    lock = path.with_name(".state.json.lock")  # a sidecar: state.json itself is replaced on every write
    assert sorted(os.listdir(path.parent)) == [".state.json.lock", "state.json"]
    assert stat.filemode(lock.stat().st_mode) == "-rw-r--r--" and lock.read_bytes() == b""

    def then(current: PointState | None) -> PointState:
        seen.append(current)
        assert current is not None  # the file exists now
        return current.advance("preflight")

    second = update_state(path, then)
    assert seen[1] == written and read_state(path) == second and second.stage == "preflight"


def test_the_sidecar_lock_is_held_while_the_change_runs(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    held: list[bool] = []

    def probe(current: PointState | None) -> PointState:
        fd = os.open(path.with_name(".state.json.lock"), os.O_RDWR)
        try:  # a second open file description of the lock: it must not get the lock now
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.append(False)
        except BlockingIOError:
            held.append(True)
        finally:
            os.close(fd)
        return PointState(point_id="p1")

    update_state(path, probe)
    assert held == [True]
    fd = os.open(path.with_name(".state.json.lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # and let go after: free again
    finally:
        os.close(fd)
