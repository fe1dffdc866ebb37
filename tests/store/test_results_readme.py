"""The tracked results/README.md sits in the default results tree: no command takes it for a key or a sweep."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from slurmx.cli import main
from slurmx.store.targets import find_sweeps
from slurmx.store.tree import ResultsTree
from tests.helpers.synthetic import make_result, write_sweep

README = Path(__file__).resolve().parents[2] / "results" / "README.md"
KEY = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"


def test_the_readme_is_tracked_and_describes_the_layout_tree_py_owns() -> None:
    text = README.read_text(encoding="utf-8")
    for name in (
        "sweep.json",
        "point.json",
        "state.json",
        "result.json",
        "summary.csv",
        "report.html",
        "store/tree.py",
    ):
        assert name in text, name


def test_a_results_root_holding_the_readme_has_only_its_sweeps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "results"
    root.mkdir()
    shutil.copy(README, root / "README.md")
    assert list(ResultsTree(root).sweeps()) == []
    assert main(["collect", "--results", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sweeps"] == []  # nothing to collect, README or not
    assert main(["status", "--results", str(root)]) == 0
    capsys.readouterr()

    write_sweep(root, KEY, "s1", [make_result(point_id="p1", config_key=KEY, sweep_id="s1")])
    assert [s.path for s in ResultsTree(root).sweeps()] == [root / KEY / "s1"]
    assert find_sweeps(ResultsTree(root), ["README.md"])[1] == ["README.md"]  # not a key, not a sweep
    assert main(["collect", "--results", str(root), "--json", "--no-plots", "--no-report"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(s["config_key"], len(s["rows"])) for s in out["sweeps"]] == [(KEY, 1)] and out["skipped"] == []
    assert main(["status", "--results", str(root)]) == 0
    assert "README" not in capsys.readouterr().out
