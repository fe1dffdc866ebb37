"""Certified percentiles through collect: the marker on an uncertified point, the TTFT p90 ratio's caveat, the
report's section, and results written before the block (they still collect, unmarked)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from slurmx.collect import collect as col
from slurmx.collect import report
from slurmx.results import certify
from slurmx.results.requests import certification
from slurmx.store.tree import SweepDir
from tests.helpers.synthetic import make_result, write_sweep

KEY = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"


def _records(n: int, seed: int, spread: float = 0.3) -> list[dict[str, Any]]:
    """aiperf-shaped per-request records (metrics in ms) of n requests with lognormal latencies."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        metrics = {
            "time_to_first_token": rng.lognormvariate(5.0, spread),
            "request_latency": rng.lognormvariate(8.0, spread),
            "inter_token_latency": rng.lognormvariate(3.0, spread),
            "output_sequence_length": float(rng.randint(100, 200)),
        }
        out.append({"metrics": {k: {"value": v} for k, v in metrics.items()}})
    return out


def _with_records(n: int, seed: int, spread: float = 0.3, **kwargs: Any) -> Any:
    result = make_result(**kwargs)
    assert result.slurmx is not None
    result.slurmx.certification = certification(_records(n, seed, spread))
    return result


def test_an_uncertified_p99_is_marked_with_its_count_and_need(tmp_path: Path) -> None:
    result = _with_records(115, 1, point_id="p1", config_key=KEY, sweep_id="s1")
    sweep = SweepDir(write_sweep(tmp_path, KEY, "s1", [result]))
    (row,) = col.collect([sweep]).rows
    marks = row.uncertified.split("; ")
    # 115 requests cannot bound a p99 from above at 95 %: at least the 368 that make its upper rank exist
    p99 = next(m for m in marks if m.startswith("p99"))
    need = certify.certify([1.0] * 115, 99).need
    assert need == 368 and p99 == "p99 not certified: 115 requests, need 368"
    assert row.columns()["uncertified"] == row.uncertified


def test_a_large_tight_sample_is_certified_everywhere(tmp_path: Path) -> None:
    result = _with_records(3000, 2, spread=0.02, point_id="p1", config_key=KEY, sweep_id="s1")
    sweep = SweepDir(write_sweep(tmp_path, KEY, "s1", [result]))
    (row,) = col.collect([sweep]).rows
    assert row.uncertified == ""


def test_a_result_without_the_block_still_collects_unmarked(tmp_path: Path) -> None:
    result = make_result(point_id="p1", config_key=KEY, sweep_id="s1")
    assert result.slurmx is not None and result.slurmx.certification is None
    data_dir = write_sweep(tmp_path, KEY, "s1", [result])
    text = (data_dir / "points" / "p1" / "result.json").read_text()
    assert "certification" not in text or '"certification": null' in text
    (row,) = col.collect([SweepDir(data_dir)]).rows
    assert row.valid and row.uncertified == "" and row.ratio_uncertified is None


def test_the_ttft_ratio_says_which_side_is_uncertified(tmp_path: Path) -> None:
    base = _with_records(3000, 3, spread=0.02, point_id="b", config_key=KEY, sweep_id="s1", arm="none")
    small = _with_records(40, 4, point_id="s", config_key=KEY, sweep_id="s1", arm="lmcache")
    sweep = SweepDir(write_sweep(tmp_path, KEY, "s1", [base, small]))
    rows = {r.point_id: r for r in col.collect([sweep]).rows}
    assert rows["s"].ttft_p90_ratio is not None
    c = certification(_records(40, 4)).metrics["ttft"]["p90"]
    assert not c.certified
    assert rows["s"].ratio_uncertified == f"TTFT p90 not certified on this arm (40 requests, need {c.need})"
    assert rows["b"].ratio_uncertified is None


def test_the_report_lists_uncertified_points(tmp_path: Path) -> None:
    if not report.available():
        pytest.skip("jinja2/matplotlib not installed (extra `report`)")
    result = _with_records(115, 1, point_id="p1", config_key=KEY, sweep_id="s1")
    sweep = SweepDir(write_sweep(tmp_path, KEY, "s1", [result]))
    (sr,) = col.collect([sweep]).sweeps
    section = report.certification(sr)
    assert section["rules"] == ["order-statistics at 95% confidence, ±10%"]
    (entry,) = section["uncertified"]
    assert "p99 not certified: 115 requests, need 368" in entry["marks"]
    html = report.render(sr, [])
    assert "p99 not certified: 115 requests, need 368" in html


def test_marks_come_in_percentile_order_and_name_the_metrics_when_not_all_fail() -> None:
    result = _with_records(115, 4, point_id="p1")
    marks = col.uncertified_marks(result)
    pcts = [float(m.split(" ", 1)[0].removeprefix("p")) for m in marks]
    assert pcts == sorted(pcts) and marks[-1] == "p99 not certified: 115 requests, need 368"
    cert = result.slurmx.certification
    assert cert is not None
    for mark in marks:
        pct = mark.split(" ", 1)[0]
        failing = [m for m, by_p in cert.metrics.items() if not by_p[pct].certified]
        named = f" ({', '.join(failing)})" if len(failing) < len(cert.metrics) else ""
        assert mark.startswith(f"{pct} not certified{named}: 115 requests, need ")
