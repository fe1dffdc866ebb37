"""`slurmx history` over generated results trees: the index (SQLite beside the tree, and the real PostgreSQL
server), incremental and atomic ingest, corrupt files, two trees in one database, --fail-on-regression."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from slurmx.cli import main
from slurmx.history import index
from slurmx.store.tree import SweepDir
from tests.helpers.history import KEY, write_series

ROOT = Path(__file__).resolve().parents[2]
STEP = [1000.0] * 14 + [850.0] * 10  # a 15 % throughput drop at sweep 14
SRC = ROOT / "src"


def _history(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    capsys.readouterr()
    code = main(["history", KEY, "--metric", "tput_per_gpu", "--json", *argv])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else {}, err


def _flags(data: dict[str, Any]) -> list[str]:
    return [c["sweep_id"] for s in data["series"] for c in s["changes"]]


def test_the_step_is_flagged_at_its_sweep_with_what_changed_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "results"
    images = ["vllm/vllm-openai:v0.32.0"] * 14 + ["vllm/vllm-openai:v0.33.0"] * 10
    ids = write_series(root, STEP, noise=0.02, repeats=3, seed=1, images=images)
    code, data, err = _history(capsys, "--results", str(root))
    assert code == 0, err
    assert (tmp_path / "results-index.sqlite").is_file()  # the default: SQLite beside the tree
    (series,) = data["series"]
    assert [s["sweep_id"] for s in series["sweeps"]] == ids  # oldest first
    assert all(s["n"] == 3 and s["ci95_lo"] is not None for s in series["sweeps"])  # intervals over repeats
    (change,) = series["changes"]
    assert change["sweep_id"] == ids[14] and change["verdict"] == "worse"
    assert change["change_pct"] == pytest.approx(-15, abs=3)
    assert change["what_changed"]["image"] == {"before": images[0], "after": images[14]}


def test_thirty_noise_only_sweeps_give_no_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "results"
    write_series(root, [1000.0] * 30, noise=0.03, repeats=2, seed=4)
    code, data, _ = _history(capsys, "--results", str(root), "--fail-on-regression", "1%")
    assert code == 0 and _flags(data) == [] and data["regressions"] == []
    assert data["series"][0]["noise_floor"]["pct"] > 1.0  # measured, not assumed


def test_fail_on_regression_exits_1_when_the_newest_sweep_is_worse_beyond_noise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "results"
    ids = write_series(root, [1000.0] * 15 + [800.0], noise=0.02, seed=3)
    code, data, _ = _history(capsys, "--results", str(root), "--fail-on-regression", "5%")
    assert code == 1 and _flags(data) == [ids[-1]] and len(data["regressions"]) == 1
    # the same drop under a threshold larger than it: flagged, but not a failure
    code, data, _ = _history(capsys, "--results", str(root), "--fail-on-regression", "30%")
    assert code == 0 and _flags(data) == [ids[-1]]


def _counts(url: str) -> dict[str, int]:
    engine = index.open_index(url)
    with engine.connect() as conn:
        out = {
            t.name: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
            for t in (index.results, index.files, index.sweeps)
        }
    engine.dispose()
    return out


def test_ingest_is_incremental_idempotent_and_skips_a_corrupt_file(tmp_path: Path) -> None:
    root = tmp_path / "results"
    ids = write_series(root, [1000.0] * 6, repeats=2)
    bad = root / KEY / ids[2] / "points" / "broken" / "result.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"hw": "b300", "conc": ', encoding="utf-8")  # truncated mid-write
    url = index.url_of(None, root)
    engine = index.open_index(url)
    first = index.ingest(engine, [root])
    assert (first.sweeps_written, first.files_read, first.rows) == (6, 13, 12)
    assert [(s.path, s.reason.split(":")[0]) for s in first.skipped] == [
        (bad, "not valid JSON (truncated or partial?)")
    ]
    again = index.ingest(engine, [root])
    assert (again.sweeps_written, again.files_read, again.rows) == (0, 0, 0)
    assert _counts(url) == {"slurmx_results": 12, "slurmx_files": 13, "slurmx_sweeps": 6}
    # one result rewritten (a rebuild): only its sweep is written, only that file read
    changed = SweepDir(root / KEY / ids[4]).point(f"p{4:04d}c8", 2).result_json
    data = json.loads(changed.read_text())
    data["request_metrics"]["throughput"]["per_gpu"]["total_tput_tps"] = 1234.5
    changed.write_text(json.dumps(data), encoding="utf-8")
    third = index.ingest(engine, [root])
    assert (third.sweeps_written, third.files_read, third.rows) == (1, 1, 1)
    with engine.connect() as conn:
        assert (
            conn.execute(
                sa.select(index.results.c.tput_per_gpu).where(
                    index.results.c.sweep_id == ids[4], index.results.c.repeat == 2
                )
            ).scalar_one()
            == 1234.5
        )
    # a removed file and a removed sweep leave the index with them
    bad.unlink()
    shutil.rmtree(root / KEY / ids[0])
    fourth = index.ingest(engine, [root])
    assert fourth.removed == 3
    assert index.skipped_files(engine) == []
    engine.dispose()
    assert _counts(url) == {"slurmx_results": 10, "slurmx_files": 10, "slurmx_sweeps": 5}


def test_two_trees_in_one_database_show_both_clusters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a" / "results", tmp_path / "b" / "results"
    write_series(a, [1000.0] * 5, cluster="alpha", seed=1)
    write_series(b, [1000.0] * 5, cluster="beta", seed=2, first_day=5)
    db = tmp_path / "team.sqlite"
    code, data, _ = _history(capsys, "--results", str(a), "--results", str(b), "--db", str(db))
    assert code == 0
    (series,) = data["series"]  # the same identity across both trees
    assert [s["cluster"] for s in series["sweeps"]] == ["alpha"] * 5 + ["beta"] * 5
    # read back without touching either tree
    code, again, _ = _history(capsys, "--db", str(db), "--no-ingest")
    assert code == 0 and again["series"] == data["series"]
    # the table names each sweep's cluster beside its id
    capsys.readouterr()
    assert main(["history", KEY, "--db", str(db), "--no-ingest", "--metric", "tput_per_gpu"]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert [(cells[2], cells[3]) for cells in lines] == [("alpha", f"alpha-{d:04d}") for d in range(5)] + [
        ("beta", f"beta-{d:04d}") for d in range(5, 10)
    ]


def test_point_and_identity_filters_pick_their_series(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "results"
    write_series(root, [1000.0] * 4, conc=8, point_id="tp8c8", seed=1)
    write_series(root, [2000.0] * 4, conc=16, point_id="tp8c16", seed=2, cluster="other")
    code, both, _ = _history(capsys, "--results", str(root))
    assert code == 0 and sorted(s["identity"]["conc"] for s in both["series"]) == [8, 16]
    code, one, _ = _history(capsys, "--point", "tp8c16", "--no-ingest", "--db", str(tmp_path / "results-index.sqlite"))
    assert code == 0 and [s["identity"]["conc"] for s in one["series"]] == [16]
    assert all(abs(v["mean"] / 2000.0 - 1) < 0.1 for v in one["series"][0]["sweeps"])
    code, one, _ = _history(capsys, "--results", str(root), "--conc", "8", "--arm", "none")
    assert code == 0 and [s["identity"]["conc"] for s in one["series"]] == [8]
    assert [len(s["sweeps"]) for s in one["series"]] == [4]
    capsys.readouterr()
    assert main(["history", KEY, "--results", str(root), "--arm", "lmcache", "--conc", "8"]) == 2
    assert "with arm lmcache, conc 8" in capsys.readouterr().err


def test_a_killed_ingest_leaves_every_sweep_whole_or_absent(tmp_path: Path) -> None:
    root = tmp_path / "results"
    for day in range(0, 40, 4):  # 40 sweeps of 25 results (25 repeats): long enough to kill mid-way
        write_series(root, [1000.0] * 4, repeats=25, first_day=day, seed=day)
    url = index.url_of(None, root)
    code = f"from pathlib import Path; from slurmx.history import index; index.ingest(index.open_index({url!r}), [Path({str(root)!r})])"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    engine = index.open_index(url)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            if conn.execute(sa.select(sa.func.count()).select_from(index.sweeps)).scalar_one() >= 3:
                break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with engine.connect() as conn:
        done = conn.execute(sa.select(sa.func.count()).select_from(index.sweeps)).scalar_one()
        per_sweep = conn.execute(
            sa.select(index.results.c.sweep, sa.func.count()).group_by(index.results.c.sweep)
        ).all()
    assert 3 <= done < 40, done  # killed mid-way
    assert sorted(n for _, n in per_sweep) == [25] * done  # each sweep whole
    resumed = index.ingest(engine, [root])  # and the next ingest writes only what is missing
    assert resumed.sweeps_written == 40 - done
    engine.dispose()
    assert _counts(url)["slurmx_results"] == 1000


def test_the_same_history_from_sqlite_and_from_postgresql(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], postgres_url: str
) -> None:
    root = tmp_path / "results"
    ids = write_series(root, STEP, noise=0.02, repeats=3, seed=9)
    bad = root / KEY / ids[0] / "points" / "broken" / "result.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("", encoding="utf-8")
    code, lite, _ = _history(capsys, "--results", str(root))
    assert code == 0
    code, pg, _ = _history(capsys, "--results", str(root), "--db", postgres_url)
    assert code == 0
    assert pg == lite
    assert _flags(pg) == [ids[14]] and pg["skipped"] == [{"path": str(bad), "reason": "empty file", "kind": "invalid"}]
    # incremental on the server too
    engine = index.open_index(index.url_of(postgres_url, root))
    assert index.ingest(engine, [root]).files_read == 0
    engine.dispose()


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "results"
    write_series(root, [1000.0] * 3)
    cases = [
        (["history", "no-such-key", "--results", str(root)], "no valid result of key 'no-such-key' in the index"),
        (["history", KEY, "--results", str(tmp_path / "nowhere")], "no such directory"),
        (["history", KEY, "--db", "postgresql://slurmx@127.0.0.1:1/none", "--no-ingest"], "cannot open"),
        (["history", KEY, "--results", str(root), "--fail-on-regression", "lots"], "expected a percentage"),
    ]
    for argv, needle in cases:
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err and needle in err[-1] and err[-1].startswith("slurmx: error: "), (argv, err)


def test_two_ingests_at_once_leave_one_copy_of_each_sweep(tmp_path: Path) -> None:
    root = tmp_path / "results"
    for day in range(0, 24, 4):
        write_series(root, [1000.0] * 4, repeats=10, first_day=day, seed=day)
    url = index.url_of(None, root)
    index.open_index(url).dispose()  # the tables exist before the two race
    code = f"from pathlib import Path; from slurmx.history import index; index.ingest(index.open_index({url!r}), [Path({str(root)!r})])"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert _counts(url) == {"slurmx_results": 240, "slurmx_files": 240, "slurmx_sweeps": 24}
