"""`submit --until-certified p90[,...] --max-point-minutes M --min-duration S`: the flags checked with one-line
errors, a budget the job's time limit cannot hold refused, the choice carried into point.json, and shown by
`submit --dry-run` and `render` (a point without the flags renders and records as it always did)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmx.cli import main
from slurmx.inputs import load_inputs
from slurmx.store import ledger
from slurmx.store.ledger import UntilCertified
from slurmx.store.tree import ResultsTree
from slurmx.submit.resolved import resolve_points

ROOT = Path(__file__).resolve().parents[1]
KEY = "tiny-fp32-local-vllm-agentic-lmcache"
CONFIG = ["--config", str(ROOT / "configs/local-master.yaml"), "--clusters", str(ROOT / "configs/clusters.yaml")]


def _submit(tmp_path: Path, *flags: str) -> list[str]:
    return ["submit", KEY, "--dry-run", "--results", str(tmp_path), *flags, *CONFIG]


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--until-certified", "p91"], "--until-certified 'p91': expected percentiles among p50, p75, p90, p95, p99"),
        (["--until-certified", ","], "--until-certified ',': expected percentiles among p50, p75, p90, p95, p99"),
        (["--max-point-minutes", "5"], "--max-point-minutes: only with --until-certified"),
        (["--min-duration", "60"], "--min-duration: only with --until-certified"),
        (["--rel-width", "0.2"], "--rel-width: only with --until-certified"),
        (
            ["--until-certified", "p90", "--max-point-minutes", "1", "--rel-width", "1"],
            "--rel-width 1: must be between 0 and 1 (0.10 is +-10 %)",
        ),
        (["--until-certified", "p90"], "--until-certified: needs --max-point-minutes M, each point's budget"),
        (["--until-certified", "p90", "--max-point-minutes", "0"], "--max-point-minutes 0: must be more than 0"),
        (
            ["--until-certified", "p90", "--max-point-minutes", "1", "--min-duration", "61"],
            "--min-duration 61: must be between 0 and the budget (60 s)",
        ),
        (
            # the local profile shares a server between an arm's two concurrencies: 2 x 15 min in a task whose
            # 30-minute limit less the 60 s warning leaves 29
            ["--until-certified", "p90", "--max-point-minutes", "15"],
            "--max-point-minutes 15: 2 points back to back in one task: 30 min do not fit the job's time limit of "
            "30 min less its 60 s warning (the cluster profile's slurm.time-limit-min, or the recipe's "
            "time-limit-min)",
        ),
    ],
)
def test_bad_flags_are_one_line_errors(
    flags: list[str], error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_submit(tmp_path, *flags)) == 2
    assert capsys.readouterr().err.strip() == f"slurmx: error: {error}"
    assert main(["render", KEY, *flags, *CONFIG]) == 2  # render checks them the same way
    assert capsys.readouterr().err.strip() == f"slurmx: error: {error}"
    assert not list(tmp_path.rglob("*.json"))


def test_dry_run_shows_the_rounds_and_a_plain_submit_is_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = [
        "--until-certified",
        "P90, p99",
        "--max-point-minutes",
        "14.5",
        "--min-duration",
        "120",
        "--rel-width",
        ".2",
    ]
    assert main([*_submit(tmp_path, *flags), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)[0]
    assert report["until-certified"] == {
        "percentiles": ["p90", "p99"],
        "max_point_minutes": 14.5,
        "min_duration_s": 120,
        "rel_width": 0.2,
    }
    assert main(_submit(tmp_path, *flags)) == 0
    out = capsys.readouterr().out
    line = "each point replayed until p90,p99 certified to +-20%: cold rounds aiperf/round-<k>/, budget 14.5 min, at least 120 s"
    assert line in out
    assert main([*_submit(tmp_path), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)[0]
    assert "until-certified" not in plain and {k: v for k, v in report.items() if k != "until-certified"} == plain
    assert main(_submit(tmp_path)) == 0
    assert "each point replayed" not in capsys.readouterr().out


def test_point_json_carries_the_choice_and_leaves_it_out_without_it(tmp_path: Path) -> None:
    inputs = load_inputs([ROOT / "configs/local-master.yaml"], ROOT / "configs/clusters.yaml", [KEY])
    item = resolve_points(inputs.points, inputs)[0]
    sweep = ResultsTree(tmp_path).sweep(KEY, "s1")
    until = UntilCertified(percentiles=("p90",), max_point_minutes=6.0, min_duration_s=30.0)
    asked, plain = sweep.point("aaaaaaaaaaaa"), sweep.point("bbbbbbbbbbbb")
    ledger.queue_point(asked, item.record("s1", 1, until))
    ledger.queue_point(plain, item.record("s1"))
    stored = json.loads(asked.point_json.read_text())["until_certified"]
    assert stored == {"percentiles": ["p90"], "max_point_minutes": 6.0, "min_duration_s": 30.0, "rel_width": None}
    assert ledger.read_point(asked).until_certified == until  # what the node reads back
    assert "until_certified" not in json.loads(plain.point_json.read_text())
    assert ledger.read_point(plain).until_certified is None


def test_render_shows_round_one_of_each_point(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", KEY, *CONFIG]) == 0
    plain = capsys.readouterr().out
    assert main(["render", KEY, "--until-certified", "p90", "--max-point-minutes", "10", *CONFIG]) == 0
    rounds = capsys.readouterr().out
    header = (
        "# replayed until p90 certified: cold rounds aiperf/round-<k>/, budget 10 min; the replay below is round 1's"
    )
    assert rounds.count(header) == 8 == plain.count("# point ")  # every point of the key
    assert "/aiperf/round-1' " in rounds and "/aiperf/round-1" not in plain
    # nothing else differs: the same processes, the replay writing into round 1's directory
    stripped = rounds.replace(f"\n{header}", "").replace("/aiperf/round-1'", "/aiperf'")
    assert stripped == plain
