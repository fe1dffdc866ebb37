"""`slurmx collect --index` once indexed with nothing changed prints what it recorded (history/replay.py): the same
bytes as collect from the files, for the table, --json and one key; a changed result, a removed summary or other
options compute again; the record lives in PostgreSQL as in SQLite."""

from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path

import pytest
import sqlalchemy as sa

from slurmx.history import index
from slurmx.store.tree import SweepDir
from tests.history.test_collect_index import KEY, _collect, _tree


def _plant(db: Path, text: str) -> int:
    """Overwrite every recorded output with `text` on stdout: a call that prints it replayed the record."""
    blob = zlib.compress(json.dumps([[1, text]]).encode())
    with sqlite3.connect(db) as conn:
        return conn.execute("UPDATE slurmx_replays SET output = ?", (blob,)).rowcount


@pytest.mark.parametrize("argv", [(), ("--json",), (KEY,)])
def test_an_unchanged_tree_prints_the_recorded_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    root = tmp_path / "results"
    _tree(root)
    db = tmp_path / "results-index.sqlite"
    first = _collect(capsys, root, "--no-report", "--index", *argv)  # writes every sweep's files
    assert first[0] == 0 and "wrote 0 file(s)" not in first[2]
    replayed = _collect(capsys, root, "--no-report", "--index", *argv)  # what the writing call recorded
    with sqlite3.connect(db) as conn:
        assert conn.execute("DELETE FROM slurmx_replays").rowcount == 1
    computed = _collect(capsys, root, "--no-report", "--index", *argv)  # no record: read, ranked, printed
    assert computed == replayed == _collect(capsys, root, "--no-report", "--index", *argv)
    plain = _collect(capsys, root, "--no-report", *argv)[1]  # collect from the files (it writes them again)
    if "--json" in argv:
        shown, want = json.loads(computed[1]), json.loads(plain)
        assert shown.pop("written") == [] and want.pop("written") and shown == want
    else:
        assert computed[1] == plain and computed[2].splitlines()[-1].strip() == "wrote 0 file(s):"
    db = tmp_path / "results-index.sqlite"
    assert _plant(db, "replayed\n") == 1
    assert _collect(capsys, root, "--no-report", "--index", *argv) == (0, "replayed\n", "")


def test_a_change_or_other_options_compute_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "results"
    _tree(root)
    db = tmp_path / "results-index.sqlite"
    _collect(capsys, root, "--no-report", "--index")
    _plant(db, "replayed\n")
    assert _collect(capsys, root, "--no-report", "--index")[1] == "replayed\n"
    # other options: their own record, not this one
    other = _collect(capsys, root, "--no-report", "--index", "--x-metric", "intvty_p50")
    assert other[1] != "replayed\n" and "frontier" in other[1]

    # a summary removed: computed again, the summary written back
    s2 = SweepDir(root / KEY / "s2")
    s2.summary_json.unlink()
    _plant(db, "replayed\n")
    code, out, err = _collect(capsys, root, "--no-report", "--index")
    assert out != "replayed\n" and s2.summary_json.is_file() and f"{KEY}/s2/summary.json" in err

    # a changed result: computed again, its new figure in the table
    _plant(db, "replayed\n")
    path = s2.point("none4", 2).result_json
    data = json.loads(path.read_text())
    data["request_metrics"]["throughput"]["per_gpu"]["total_tput_tps"] = 1234.5
    path.write_text(json.dumps(data), encoding="utf-8")
    code, out, err = _collect(capsys, root, "--no-report", "--index")
    assert out != "replayed\n" and "wrote 3 file(s)" in err
    data = json.loads(_collect(capsys, root, "--no-report", "--index", "--json")[1])
    assert 1234.5 in [r["tput_per_gpu"] for s in data["sweeps"] for r in s["rows"]]


def test_the_record_lives_in_postgresql_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], postgres_url: str
) -> None:
    root = tmp_path / "results"
    _tree(root)
    _collect(capsys, root, "--no-report", "--db", postgres_url)  # writes every sweep's files
    replayed = _collect(capsys, root, "--no-report", "--db", postgres_url)
    engine = index.open_index(index.url_of(postgres_url, root))
    try:
        with engine.begin() as conn:
            assert conn.execute(sa.delete(index.replays)).rowcount == 1
        computed = _collect(capsys, root, "--no-report", "--db", postgres_url)
        assert computed == replayed and computed[2].splitlines()[-1].strip() == "wrote 0 file(s):"
        with engine.begin() as conn:
            blob = zlib.compress(json.dumps([[1, "replayed\n"]]).encode())
            assert conn.execute(sa.update(index.replays).values(output=blob)).rowcount == 1
    finally:
        engine.dispose()
    assert _collect(capsys, root, "--no-report", "--db", postgres_url) == (0, "replayed\n", "")
