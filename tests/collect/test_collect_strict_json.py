"""Every JSON `slurmx collect` writes (summary.json, aggregates.json, agg_<key>.json) and prints (--json) parses with a
strict parser when a result.json holds floats that are not finite: one written before result.json nulled them
(Python's json wrote `Infinity` and `NaN`). Such a figure is null; a finite one is the figure its result.json holds."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from slurmx.cli import main
from tests.helpers.strict_json import strict
from tests.helpers.synthetic import make_result, write_sweep

KEY = "kimik3-fp4-b300-vllm-agentic-strict"


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    results = [make_result(point_id=f"{arm}{c}", config_key=KEY, conc=c, arm=arm) for arm in ("none", "lmcache")
               for c in (4, 8)]  # fmt: skip
    path = write_sweep(tmp_path / "results", KEY, "s1", results)
    old = path / "points" / "none4" / "result.json"
    data = json.loads(old.read_text())
    data["request_metrics"]["latency"]["intvty"]["p50"] = math.inf
    data["server_metrics"]["cache"]["gpu_cache_hit_rate"] = math.nan
    old.write_text(json.dumps(data))  # as an older slurmx wrote it: Infinity and NaN
    assert "Infinity" in old.read_text() and "NaN" in old.read_text()
    return path


def _figures(path: Path) -> tuple[float, float]:
    data = json.loads(path.read_text())
    return data["request_metrics"]["latency"]["intvty"]["p50"], data["server_metrics"]["cache"]["gpu_cache_hit_rate"]


def _row(rows: list[dict[str, Any]], point_id: str) -> dict[str, Any]:
    return next(r for r in rows if r["point_id"] == point_id)


def test_collects_files_and_its_output_are_json(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = sweep.parent.parent
    capsys.readouterr()
    assert main(["collect", "--results", str(root), "--format", "inferencex", "--no-plots", "--json"]) == 0
    printed = strict(capsys.readouterr().out)
    summary = strict((sweep / "summary.json").read_text())
    aggregates = strict((sweep / "aggregates.json").read_text())
    agg = strict((sweep / f"agg_{KEY}.json").read_text())
    intvty, hit = _figures(sweep / "points" / "none8" / "result.json")  # a point whose figures are finite
    for rows in (summary["rows"], printed["sweeps"][0]["rows"]):
        assert (_row(rows, "none4")["intvty_p50"], _row(rows, "none4")["gpu_hit_rate"]) == (None, None)
        assert (_row(rows, "none8")["intvty_p50"], _row(rows, "none8")["gpu_hit_rate"]) == (intvty, hit)
    by_point = {p["point_id"]: p["metrics"] for p in aggregates["points"]}
    assert by_point["none4"]["intvty_p50"]["mean"] is None
    assert by_point["none8"]["intvty_p50"]["mean"] == intvty
    four = next(o for o in agg if o["conc"] == 4 and o["kv_offloading"] == "none")
    assert four["request_metrics"]["latency"]["intvty"]["p50"] is None
