"""Storage faults: a full disk, corrupt ledger files, a read-only tree, paths with spaces and a lock left
by a killed submit. Each ends with a clear line and nothing torn, lost or half-written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmx.inputs import load_inputs
from slurmx.store import atomic, ledger
from slurmx.store.lock import locked
from slurmx.store.state import PointState, read_state, update_state
from slurmx.store.tree import ResultsTree, SweepDir
from slurmx.submit.resolved import resolve_points
from tests.helpers.synthetic import make_result, write_sweep

ROOT = Path(__file__).resolve().parents[2]
KEY = "tiny-fp32-local-vllm-agentic-lmcache"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")


def slurmx(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "slurmx", *argv], capture_output=True, text=True, env=env, check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> None:
    with pytest.raises(OSError, match="No space left"), (disk / "filler").open("wb", buffering=0) as handle:
        while True:
            handle.write(b"\0" * 4096)
            handle.flush()
            os.fsync(handle.fileno())


def ledger_sweep(root: Path) -> tuple[SweepDir, list[str]]:
    """A real sweep ledger of the local key (what submit writes before sbatch), no Slurm needed."""
    inputs = load_inputs(None, None, [KEY])
    resolved = resolve_points(inputs.points, inputs)
    sweep = ResultsTree(root).sweep(KEY, ledger.sweep_id_for(KEY, inputs.points))
    ledger.write_sweep(
        sweep, ledger.new_sweep(sweep, inputs.points, inputs.masters.files, inputs.clusters.path, resolved[0].profile)
    )
    for item in resolved:
        ledger.queue_point(sweep.point(item.point.point_id), item.record(sweep.sweep_id))
    return sweep, [r.point.point_id for r in resolved]


@needs_root
def test_a_full_disk_keeps_the_old_state_whole(small_disk: Path) -> None:
    path = small_disk / "points" / "p1" / "state.json"
    update_state(path, lambda _: PointState(point_id="p1").advance("queued"))
    fill(small_disk)
    with pytest.raises(atomic.StorageError, match="No space left on device") as caught:
        update_state(path, lambda s: (s or PointState(point_id="p1")).advance("preflight", "x" * 300_000))
    assert caught.value.exit_code == 1 and str(caught.value).startswith(f"{path}: cannot write")
    state = read_state(path)
    assert state is not None and state.stage == "queued"  # the old file, whole
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


@needs_root
def test_a_full_disk_under_collect_is_one_line_and_no_torn_file(small_disk: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_sweep(results, "k", "s1", [make_result(point_id=f"p{i}", conc=2**i) for i in range(3)])
    fill(small_disk)
    proc = slurmx("collect", "--results", str(results), "--no-plots", "--csv", str(small_disk / "all.csv"))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"slurmx: error: {small_disk / 'all.csv'}: cannot write")
    assert "Traceback" not in proc.stderr
    assert not (small_disk / "all.csv").exists() and not list(small_disk.glob(".all.csv.*"))


def test_corrupt_ledger_files_are_named_and_skipped(tmp_path: Path) -> None:
    results = tmp_path / "results"
    sweep, point_ids = ledger_sweep(results)
    truncated, garbled, fine = (sweep.point(p) for p in point_ids[:3])
    truncated.state_json.write_text(truncated.state_json.read_text()[:40])
    garbled.point_json.write_text("{not json")
    fine.result_json.write_text('{"hw": "b300", "conc": ')  # a torn result from another tool
    other = ResultsTree(results).sweep("other-key", "s1")
    other.path.mkdir(parents=True)
    other.sweep_json.write_text("[]")

    proc = slurmx("status", "--json", "--results", str(results))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    by_id = {p["point_id"]: p for p in json.loads(proc.stdout)}
    assert by_id[truncated.point_id]["state"] == "unreadable"
    assert by_id[truncated.point_id]["reason"].startswith(f"{truncated.state_json}: not a valid state file")
    assert by_id[garbled.point_id]["state"] == "unreadable"
    assert by_id[garbled.point_id]["reason"].startswith(f"{garbled.point_json}: not a PointRecord")
    assert by_id[fine.point_id]["state"] == "unsubmitted"  # its ledger is fine
    assert any(p["config_key"] == "other-key" and str(other.sweep_json) in p["reason"] for p in by_id.values())

    table = slurmx("status", "--results", str(results))
    assert (
        table.returncode == 0
        and "unreadable" in table.stdout
        and str(other.sweep_json) in table.stdout.replace("\n", "")
    )

    collected = slurmx("collect", "--results", str(results), "--json", "--no-plots")
    assert collected.returncode == 0, collected.stderr
    skipped = json.loads(collected.stdout)["skipped"]
    assert [(s["path"], s["reason"].split(" (")[0]) for s in skipped] == [(str(fine.result_json), "not valid JSON")]


@needs_root
def test_a_read_only_tree_still_answers_status_and_collect(tmp_path: Path) -> None:
    results = tmp_path / "results with spaces"
    sweep, _ = ledger_sweep(results)
    write_sweep(
        results,
        "synthetic key",
        "s 1",
        [make_result(point_id=f"p{i}", config_key="synthetic key", sweep_id="s 1", conc=2**i) for i in range(3)],
    )
    view = tmp_path / "read only view"
    view.mkdir()
    subprocess.run(["mount", "--bind", str(results), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        status = slurmx("status", "--json", "--results", str(view))
        assert status.returncode == 0, status.stderr
        states = {(p["config_key"], p["state"]) for p in json.loads(status.stdout)}
        # the synthetic sweep.json is no ledger: listed as unreadable, the real sweep beside it answers
        assert states == {(KEY, "unsubmitted"), ("synthetic key", "unreadable")}
        collected = slurmx("collect", "--results", str(view), "--no-plots")
        assert collected.returncode == 0, collected.stderr
        assert "synthetic key: 3 points" in collected.stdout
        assert "summaries and plots not written beside the sweeps" in collected.stderr
        assert "Read-only file system" in collected.stderr
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)
    # the same tree, writable, with spaces in every name
    collected = slurmx("collect", "--results", str(results), "--no-plots")
    assert collected.returncode == 0 and (results / "synthetic key" / "s 1" / "summary.csv").exists()


def test_a_lock_left_by_a_killed_submit_is_taken_at_once(tmp_path: Path) -> None:
    lock = tmp_path / "key" / ".submit.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\nfrom slurmx.store.lock import locked\n"
         f"with locked(Path({str(lock)!r})):\n    print('held', flush=True)\n    time.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    start = time.monotonic()
    with pytest.raises(Exception, match="holds this lock"), locked(lock, timeout_s=0.5):
        pass
    holder.send_signal(signal.SIGKILL)
    holder.wait(10)
    with locked(lock, timeout_s=5.0):  # the kernel dropped the dead holder's flock: no stale lock to break
        took = time.monotonic() - start
    assert took < 5.0
