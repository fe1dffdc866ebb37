"""`slurmx collect` over a real results tree: valid, invalid, partial and duplicate result files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurmx.cli import main
from slurmx.results.schema import Result
from tests.helpers.synthetic import make_result, write_result, write_sweep

KEY = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"


def _r(point_id: str, *, sweep: str = "s1", **kw: Any) -> Result:
    return make_result(point_id=point_id, config_key=KEY, sweep_id=sweep, **kw)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    s1 = write_sweep(
        root,
        KEY,
        "s1",
        [
            _r("tp8none4", conc=4, tput_per_gpu=1000.0, ttft_p90_s=2.0),
            _r("tp8lmc4", conc=4, arm="lmcache", tput_per_gpu=1100.0, ttft_p90_s=0.5),
            _r("tp8none8", conc=8, tput_per_gpu=1600.0, ttft_p90_s=4.0, ended_at=1000.0),
            _r("tp8lmc8", conc=8, arm="lmcache", tput_per_gpu=1200.0, ttft_p90_s=1.0),
            # a group without a no-offload arm: ratios are over the first arm (lmcache)
            _r("dep8lmc16", conc=16, tp=8, ep=8, dp_attn=True, arm="lmcache", tput_per_gpu=2000.0, ttft_p90_s=3.0),
            _r("dep8moon16", conc=16, tp=8, ep=8, dp_attn=True, arm="mooncake", tput_per_gpu=3000.0, ttft_p90_s=1.5),
            # alone at its parallelism and concurrency: no ratio
            _r("dep8lmc32", conc=32, tp=8, ep=8, dp_attn=True, arm="lmcache", tput_per_gpu=2500.0),
        ],
    )
    points = s1 / "points"
    good = _r("schemabad", conc=64).model_dump(mode="json")
    good["tokens_per_dollar"] = 3  # a field newer than the schema is fine ...
    good["request_accounting"]["records_total"] = "many"  # ... a wrong type in a known one is not
    (points / "schemabad").mkdir()
    (points / "schemabad" / "result.json").write_text(json.dumps(good))
    text = _r("truncated", conc=64).model_dump_json()
    (points / "truncated").mkdir()
    (points / "truncated" / "result.json").write_text(text[: len(text) // 2])
    (points / "empty").mkdir()
    (points / "empty" / "result.json").write_text("")
    write_result(points / "errors" / "result.json", _r("errors", conc=64, requests=50, errors=50))
    (points / "running").mkdir()  # a point without result.json yet is not a file to report
    # the same point run again in a later sweep: the newer result wins
    write_sweep(
        root, KEY, "s2", [_r("tp8none8", sweep="s2", conc=8, tput_per_gpu=1500.0, ttft_p90_s=3.0, ended_at=2000.0)]
    )
    return root


def _collect_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["collect", *args, "--json", "--no-plots"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def _rows(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["point_id"]: r for s in out["sweeps"] for r in s["rows"]}


def test_every_skipped_file_is_named_with_its_reason(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _collect_json(capsys, "--results", str(tree))
    skipped = {Path(s["path"]).parent.name: s for s in out["skipped"]}
    assert set(skipped) == {"schemabad", "truncated", "empty", "tp8none8"}
    reason = skipped["schemabad"]["reason"]
    assert "request_accounting.records_total" in reason and "schema" in reason and "tokens_per_dollar" not in reason
    assert "not valid JSON" in skipped["truncated"]["reason"]
    assert skipped["empty"]["reason"] == "empty file"
    # refused by the gate: kept as a row with its reason, never skipped, never in a ratio
    errors = _rows(out)["errors"]
    assert errors["valid"] is False and "50.000%" in errors["invalid_reason"] and errors["tput_ratio"] is None
    assert skipped["tp8none8"]["kind"] == "superseded"
    assert "/s1/points/tp8none8/" in skipped["tp8none8"]["path"]
    assert "/s2/points/tp8none8/" in skipped["tp8none8"]["reason"]


def test_newest_valid_result_per_point_wins(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows(_collect_json(capsys, "--results", str(tree)))
    assert len(rows) == 8  # seven valid points (tp8none8 counted once) and the invalid one
    assert rows["tp8none8"]["sweep_id"] == "s2"
    assert rows["tp8none8"]["tput_per_gpu"] == pytest.approx(1500.0)


def test_ratio_columns_on_known_inputs(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows(_collect_json(capsys, "--results", str(tree), f"{KEY}/s1"))
    # only sweep s1 selected: tp8none8 of s1 is the baseline at conc 8
    assert rows["tp8none4"]["tput_ratio"] == pytest.approx(1.0)
    assert rows["tp8lmc4"]["tput_ratio"] == pytest.approx(1.1)
    assert rows["tp8lmc4"]["ttft_p90_ratio"] == pytest.approx(0.25)
    assert rows["tp8lmc8"]["tput_ratio"] == pytest.approx(0.75)
    assert rows["tp8lmc8"]["ttft_p90_ratio"] == pytest.approx(0.25)
    assert rows["tp8lmc8"]["baseline_arm"] == "none"
    assert rows["dep8moon16"]["baseline_arm"] == "lmcache"
    assert rows["dep8moon16"]["tput_ratio"] == pytest.approx(1.5)
    assert rows["dep8moon16"]["ttft_p90_ratio"] == pytest.approx(0.5)
    assert rows["dep8lmc32"]["tput_ratio"] is None and rows["dep8lmc32"]["baseline_arm"] is None


def test_table_groups_by_parallelism_and_arm(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collect", "--results", str(tree), f"{KEY}/s1", "--no-plots"]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if line.startswith("│")]
    labels = [tuple(c.strip() for c in line.strip("│").split("│")[:3]) for line in lines]
    assert labels == [
        ("DEP8", "lmcache", "16"), ("DEP8", "lmcache", "32"), ("DEP8", "mooncake", "16"),
        ("TP8", "none", "4"), ("TP8", "none", "8"), ("TP8", "none", "64"), ("TP8", "lmcache", "4"),
        ("TP8", "lmcache", "8"),
    ]  # fmt: skip
    tp8_lmc_8 = lines[-1]
    assert "0.75x" in tp8_lmc_8 and "0.25x" in tp8_lmc_8
    # InferenceX's message (issue 23): the gate applies its rule first
    assert "INVALID: aiperf request error rate" in lines[5]
    assert "1 invalid point(s) shown but left out of every ratio" in captured.err
    assert "errors/result.json: aiperf request error rate exceeded the benchmark limit: 50/100 = 50.000%" in " ".join(
        captured.err.split()
    )
    assert "3 result file(s) not counted" in captured.err
    assert "truncated/result.json: not valid JSON" in captured.err


def test_summaries_are_written_beside_each_sweep(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _collect_json(capsys, "--results", str(tree), "--csv", str(tree / "all.csv"))
    summary = json.loads((tree / KEY / "s1" / "summary.json").read_text())
    assert {r["point_id"] for r in summary["rows"]} == {
        "tp8none4", "tp8lmc4", "tp8lmc8", "dep8lmc16", "dep8moon16", "dep8lmc32", "errors"}  # fmt: skip
    assert len(summary["skipped"]) == 4
    csv_lines = (tree / KEY / "s2" / "summary.csv").read_text().splitlines()
    assert csv_lines[0].startswith("config_key,sweep_id,point_id,")
    assert len(csv_lines) == 2 and ",tp8none8," in csv_lines[1]
    assert len((tree / "all.csv").read_text().splitlines()) == 1 + 8


def test_unknown_key_or_sweep_exits_2(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collect", "--results", str(tree), "no-such-key"]) == 2
    err = capsys.readouterr().err
    assert "no-such-key" in err and KEY in err
    assert main(["collect", "--results", str(tree), f"{KEY}/s9"]) == 2


def test_sweep_id_alone_selects_that_sweep(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _collect_json(capsys, "--results", str(tree), "s2")
    assert [s["sweep_id"] for s in out["sweeps"]] == ["s2"]


def test_nothing_to_collect_is_a_note_and_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collect", "--results", str(tmp_path / "empty")]) == 0
    assert "nothing to collect" in capsys.readouterr().err
    write_sweep(tmp_path / "r", KEY, "s1", [])
    assert main(["collect", "--results", str(tmp_path / "r"), KEY]) == 0
    assert "nothing to collect" in capsys.readouterr().err
