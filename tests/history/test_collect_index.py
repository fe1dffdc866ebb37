"""`slurmx collect --index`: the rows read back from the history index give the same table, JSON and files as
collect reading every result.json, over a tree with repeats, two arms, a rerun in a later sweep, a result the gate
refuses, uncertified percentiles, a corrupt file and a misplaced one; a second call rewrites nothing, and a
changed result rewrites its own sweep only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from slurmx.cli import main
from slurmx.results.schema import Certification, PercentileCertificate
from slurmx.store.tree import SweepDir
from tests.helpers.synthetic import make_result, write_result, write_sweep

KEY = "kimik3-fp4-b300-vllm-agentic-index"
OTHER = "other-key"


def _tree(root: Path) -> None:
    for sweep_id, day in (("s1", 0.0), ("s2", 1000.0)):
        sweep = SweepDir(write_sweep(root, KEY, sweep_id, []))
        for conc in (4, 8):
            for arm in ("none", "lmcache"):
                point_id = f"{arm}{conc}"
                if sweep_id == "s2" and conc == 8:
                    continue  # s2 reruns conc 4 only: s1's conc 4 rows are superseded, its conc 8 rows stay
                for repeat in (1, 2, 3):
                    r = make_result(point_id=point_id, config_key=KEY, sweep_id=sweep_id, conc=conc, arm=arm,
                                    ended_at=1.79e9 + day + repeat,
                                    errors=150 if (arm, conc, repeat) == ("lmcache", 8, 2) else 0)  # fmt: skip
                    assert r.slurmx is not None and r.request_metrics.throughput.per_gpu.total_tput_tps is not None
                    r.request_metrics.throughput.per_gpu.total_tput_tps *= (0.97, 1.0, 1.04)[repeat - 1]
                    r.slurmx.repeat, r.slurmx.repeats, r.slurmx.repeat_mode = repeat, 3, "separate-tasks"
                    if arm == "lmcache":  # its TTFT p90 is not certified: the ratio carries the caveat
                        cert = PercentileCertificate(count=120, need=368, certified=False)
                        r.slurmx.certification = Certification(
                            confidence=0.95, rel_width=0.1, metrics={"ttft": {"p90": cert}}
                        )
                    write_result(sweep.point(point_id, repeat).result_json, r)
        broken = sweep.point("broken").result_json
        broken.parent.mkdir(parents=True)
        broken.write_text('{"conc": ', encoding="utf-8")
        misplaced = make_result(point_id="elsewhere", config_key=KEY, sweep_id=sweep_id)
        write_result(sweep.point("here").result_json, misplaced)
    write_sweep(
        root, OTHER, "o1", [make_result(point_id=f"p{c}", config_key=OTHER, sweep_id="o1", conc=c) for c in (2, 4)]
    )


def _collect(capsys: pytest.CaptureFixture[str], root: Path, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["collect", "--results", str(root), "--no-plots", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _files(root: Path) -> dict[str, str]:
    """summary.csv, summary.json (less its time) and aggregates.json of every sweep, the tree's path as ROOT."""
    out = {}
    for path in sorted(root.rglob("*")):
        text = path.read_text().replace(str(root), "ROOT") if path.is_file() else ""
        if path.name in ("summary.csv", "aggregates.json"):
            out[str(path.relative_to(root))] = text
        elif path.name == "summary.json":
            data = json.loads(text)
            data.pop("collected_at")
            out[str(path.relative_to(root))] = json.dumps(data)
    return out


def test_collect_through_the_index_matches_collect_from_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "source"
    _tree(source)
    for i, argv in enumerate(((), ("--json",), (KEY,), (f"{KEY}/s1", "--json"))):
        # each first call on a fresh copy: the index writes every sweep's files, as collect does
        plain, indexed = tmp_path / f"plain{i}" / "results", tmp_path / f"indexed{i}" / "results"
        shutil.copytree(source, plain)
        shutil.copytree(source, indexed)
        code, out, err = _collect(capsys, plain, "--no-report", *argv)
        code_i, out_i, err_i = _collect(capsys, indexed, "--no-report", "--index", *argv)
        assert (code_i, out_i.replace(str(indexed), str(plain)), err_i.replace(str(indexed), str(plain))) == (
            code,
            out,
            err,
        ), argv
        assert _files(indexed) == _files(plain)
    assert (indexed.parent / "results-index.sqlite").is_file()
    data = json.loads(_collect(capsys, indexed, "--no-report", "--index", "--json")[1])
    # what the tree holds: s1's conc 4 rows superseded by s2's, two unreadable files per sweep, one refused row
    kinds = sorted((s["kind"], s["reason"].split(" ")[0]) for s in data["skipped"])
    assert kinds == [("invalid", "not")] * 2 + [("invalid", "point")] * 2 + [("superseded", "superseded")] * 6
    rows = [r for s in data["sweeps"] for r in s["rows"]]
    assert len(rows) == 14 and sum(not r["valid"] for r in rows) == 1
    assert sum(bool(r["ratio_uncertified"]) for r in rows) == 5  # the lmcache rows beside a valid baseline

    # nothing changed: the table again, no file rewritten
    stamps = {p: p.stat().st_mtime_ns for p in indexed.rglob("summary.*")}
    code, out, err = _collect(capsys, indexed, "--no-report", "--index")
    assert code == 0 and err.strip().splitlines()[-1] == "wrote 0 file(s):"
    assert out == _collect(capsys, plain, "--no-report")[1].replace(str(plain), str(indexed))
    assert {p: p.stat().st_mtime_ns for p in indexed.rglob("summary.*")} == stamps

    # one result of s2 changes: s2's files are rewritten (as collect from the files writes them), s1's are not
    for root in (plain, indexed):
        path = SweepDir(root / KEY / "s2").point("none4", 2).result_json
        data = json.loads(path.read_text())
        data["request_metrics"]["throughput"]["per_gpu"]["total_tput_tps"] = 1234.5
        path.write_text(json.dumps(data), encoding="utf-8")
    code, out, err = _collect(capsys, indexed, "--no-report", "--index")
    code_p, out_p, _ = _collect(capsys, plain, "--no-report")
    assert code == code_p and out == out_p.replace(str(plain), str(indexed))
    s2 = SweepDir(indexed / KEY / "s2")
    assert ",1234.5," in s2.summary_csv.read_text()
    wrote = err.strip().splitlines()[-1]
    assert wrote.startswith("wrote 3 file(s): ") and f"{KEY}/s2/summary.csv" in wrote and "/s1/" not in wrote
    changed = {p for p in indexed.rglob("summary.*") if p.stat().st_mtime_ns != stamps[p]}
    assert changed == {s2.summary_csv, s2.summary_json}
    assert _files(indexed) == _files(plain)


def test_the_reports_of_changed_sweeps_are_written_from_their_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "results"
    _tree(root)
    code, _, err = _collect(capsys, root, "--index", KEY)
    s1, s2 = SweepDir(root / KEY / "s1"), SweepDir(root / KEY / "s2")
    assert code == 0 and f"report: {s1.report_html}" in err and f"report: {s2.report_html}" in err
    html = s2.report_html.read_text()
    assert "vllm" in html and "p90 not certified" in html  # facts and certification read from the files
    code, _, err = _collect(capsys, root, "--index", KEY)
    assert code == 0 and "report: " not in err and "wrote 0 file(s)" in err
