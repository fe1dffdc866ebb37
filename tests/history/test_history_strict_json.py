"""`slurmx history --json` parses with a strict parser when a result.json of the series holds a figure that is not
finite (written before result.json nulled them: Python's json wrote `Infinity`): that figure is no value (null), the
others are those their result.json files hold."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from slurmx.cli import main
from slurmx.store.tree import SweepDir
from tests.helpers.history import KEY, write_series
from tests.helpers.strict_json import strict


def test_history_json_is_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "results"
    ids = write_series(root, [1000.0, 1000.0, 1000.0], noise=0.0, point_id="p8")
    old = SweepDir(root / KEY / ids[1]).point("p8", 1).result_json
    data = json.loads(old.read_text())
    data["request_metrics"]["throughput"]["per_gpu"]["total_tput_tps"] = math.inf
    old.write_text(json.dumps(data))
    capsys.readouterr()
    code = main(["history", KEY, "--results", str(root), "--metric", "tput_per_gpu", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (series,) = strict(out)["series"]
    values = {s["sweep_id"]: s["values"] for s in series["sweeps"]}
    assert values[ids[0]] == values[ids[2]] == [1000.0]
    means = {s["sweep_id"]: s["mean"] for s in series["sweeps"]}
    assert (values[ids[1]], means[ids[1]]) == ([None], None)
    assert means[ids[0]] == means[ids[2]] == 1000.0
