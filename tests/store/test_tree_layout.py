"""store.tree against the drawing in results/README.md, read from the file: every path the drawing names is the
one tree.py gives, and tree.py gives no name the drawing lacks. Then the walks (sweeps, points, rounds) and the
member ids of repeats on hand-made trees."""

from __future__ import annotations

import re
from pathlib import Path

from slurmx.store import tree
from slurmx.store.tree import PointDir, ResultsTree, SweepDir, member_id, parse_member, round_dirs

README = Path(__file__).resolve().parents[2] / "results" / "README.md"
# What each placeholder of the drawing stands for in this test.
VALUES = {
    "<config-key>": "kimik3-fp4-b300-vllm-agentic-dspark-lmcache",
    "<sweep-id>": "s0123456789",
    "<point-id>": "0123456789ab",
    "<stamp>": "20261205T130000",
    "<k>": "7",
    "<n>": "3",
    "<node>": "node07",
    "<job>": "4242",
    "<task>": "5",
}


def drawing() -> dict[str, str]:
    """The drawn paths (placeholders filled in, '/' ending a directory), each with its description."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"^```\n(results/\n.*?)^```$", text, re.S | re.M)
    assert block, "results/README.md has no drawing of the tree"
    lines = block.group(1).splitlines()
    column = re.search(r"\S\s{2,}(?=\S)", lines[1])
    assert column is not None
    at = column.end()  # where the descriptions start: the drawing's second column
    paths: dict[str, str] = {}
    parents = {0: "results/"}
    for line in lines[1:]:
        entry, description = line[:at], line[at:].strip()
        if not entry.strip():
            continue  # a description's second line
        depth = (len(entry) - len(entry.lstrip(" "))) // 2
        for name in entry.split():
            path = parents[depth - 1] + name
            paths[path] = description
            parents[depth] = path
    for placeholder, value in VALUES.items():
        paths = {p.replace(placeholder, value): d.replace(placeholder, value) for p, d in paths.items()}
    return paths


def test_every_path_drawn_in_results_readme_is_the_one_tree_py_gives(tmp_path: Path) -> None:
    drawn = drawing()
    results = ResultsTree(tmp_path / "results")
    key, sweep_id, point_id = VALUES["<config-key>"], VALUES["<sweep-id>"], VALUES["<point-id>"]
    sweep = results.sweep(key, sweep_id)
    point = sweep.point(point_id)
    k, n = int(VALUES["<k>"]), int(VALUES["<n>"])
    given = {
        # a trailing "/" marks a directory, as the drawing does
        results.root / key: "/",
        results.key_lock(key): "",
        sweep.lock: "",
        sweep.path: "/",
        sweep.sweep_json: "",
        sweep.submitit: "/",
        point.path: "/",
        point.point_json: "",
        point.state_json: "",
        point.lock_json: "",
        point.result_json: "",
        point.previous_result(VALUES["<stamp>"]): "",
        point.commands: "/",
        point.logs: "/",
        point.aiperf: "/",
        point.aiperf_round(k): "/",
        point.trace_jsonl: "",
        point.path / tree.TEARDOWN_JSON: "",
        point.path / tree.TEARDOWN_REPLAY_JSON: "",
        point.attempt(n): "/",
        point.telemetry: "/",
        point.nodes / VALUES["<node>"]: "/",
        point.repeat_dir(n).path: "/",
        sweep.summary_csv: "",
        sweep.summary_json: "",
        sweep.aggregates_json: "",
        sweep.plots: "/",
        sweep.report_html: "",
        sweep.inferencex_json: "",  # collect --format inferencex's file
    }
    as_drawn = {str(p.relative_to(tmp_path)) + end for p, end in given.items()}
    assert sorted(as_drawn) == sorted(drawn)


def test_the_attempt_files_and_slurms_log_are_the_drawn_ones(tmp_path: Path) -> None:
    drawn = drawing()
    point_dir = f"results/{VALUES['<config-key>']}/{VALUES['<sweep-id>']}/points/{VALUES['<point-id>']}/"
    in_point = {p[len(point_dir) :].rstrip("/") for p in drawn if p.startswith(point_dir)}
    # what a requeue moves aside is a subset of a point's drawn files (the ledger's point.json, state.json stay)
    assert set(tree.ATTEMPT_FILES) <= in_point
    assert {tree.POINT_JSON, tree.STATE_JSON}.isdisjoint(tree.ATTEMPT_FILES)
    submitit = drawn[f"results/{VALUES['<config-key>']}/{VALUES['<sweep-id>']}/submitit/"]
    log_name = re.search(r"\((\S+_0_log\.out)\)", submitit)  # "Slurm's logs (<job>_<task>_0_log.out)"
    assert log_name is not None, submitit
    sweep = SweepDir(tmp_path / "k" / "s1")
    assert sweep.slurm_log("4242_5") == sweep.submitit / log_name.group(1)


def test_repeat_n_of_a_point_is_under_repeats_and_names_its_point(tmp_path: Path) -> None:
    sweep = SweepDir(tmp_path / "k" / "s1")
    first = sweep.point("0123456789ab")
    second = sweep.point("0123456789ab", 2)
    assert (first.repeat, first.root, first.member_id) == (1, first.path, "0123456789ab")
    assert second.path == tmp_path / "k/s1/points/0123456789ab/repeats/2"
    assert (second.repeat, second.root, second.point_id, second.member_id) == (
        2, first.path, "0123456789ab", "0123456789ab.r2",
    )  # fmt: skip
    assert second.point_json == tmp_path / "k/s1/points/0123456789ab/point.json"  # the point's, not the repeat's
    assert second.state_json == tmp_path / "k/s1/points/0123456789ab/repeats/2/state.json"
    assert second.attempt(1) == tmp_path / "k/s1/points/0123456789ab/repeats/2/attempts/1"
    assert second.repeat_dir(1) == first and first.repeat_dir(2) == second and second.repeat_dir(2) == second
    # a point id of digits only is still a point, not a repeat: only a digit directory under repeats/ is one
    digits = sweep.point("012345678901")
    assert (digits.repeat, digits.root, digits.point_id) == (1, digits.path, "012345678901")
    not_a_repeat = PointDir(first.path / "repeats" / "x")
    assert (not_a_repeat.repeat, not_a_repeat.root) == (1, not_a_repeat.path)
    elsewhere = PointDir(tmp_path / "other" / "4")
    assert (elsewhere.repeat, elsewhere.point_id) == (1, "4")


def test_member_ids_name_the_point_and_the_repeat() -> None:
    cases = {
        "0123456789ab": ("0123456789ab", 1),
        "0123456789ab.r2": ("0123456789ab", 2),
        "0123456789ab.r12": ("0123456789ab", 12),
        "a.r2.r5": ("a.r2", 5),  # the last ".r<n>" is the repeat
        "0123456789ab.r": ("0123456789ab.r", 1),  # no digits after it: no repeat
        "0123456789ab.rx": ("0123456789ab.rx", 1),
        "0123456789ab.2": ("0123456789ab.2", 1),
        "012345678901": ("012345678901", 1),  # a point id of digits only (hex can be): repeat 1, not repeat 12345678901
    }
    assert {m: parse_member(m) for m in cases} == cases
    assert [member_id("0123456789ab", r) for r in (1, 2, 12)] == ["0123456789ab", "0123456789ab.r2", "0123456789ab.r12"]
    assert member_id("0123456789ab") == "0123456789ab"  # no repeat named: the point itself
    sweep = SweepDir(Path("/r/k/s1"))
    assert sweep.member("0123456789ab.r12") == PointDir(Path("/r/k/s1/points/0123456789ab/repeats/12"))
    assert sweep.member("0123456789ab") == PointDir(Path("/r/k/s1/points/0123456789ab"))


def test_sweeps_are_the_directories_holding_a_sweep_json_in_name_order(tmp_path: Path) -> None:
    root = tmp_path / "results"
    assert list(ResultsTree(root).sweeps()) == []  # no tree yet
    for key, sweep_id in (("b-key", "s2"), ("b-key", "s1"), ("a-key", "s9")):
        (root / key / sweep_id).mkdir(parents=True)
        (root / key / sweep_id / "sweep.json").write_text("{}")
    (root / "b-key" / "s3").mkdir()  # no sweep.json: not a sweep (yet)
    (root / "b-key" / "notes.txt").write_text("a file beside the sweeps")
    (root / "README.md").write_text("a file beside the keys")
    (root / "empty-key").mkdir()
    results = ResultsTree(root)
    names = [(s.config_key, s.sweep_id) for s in results.sweeps()]
    assert names == [("a-key", "s9"), ("b-key", "s1"), ("b-key", "s2")]
    assert [s.sweep_id for s in results.sweeps("b-key")] == ["s1", "s2"]
    assert list(results.sweeps("no-such-key")) == [] and list(results.sweeps("README.md")) == []
    assert results.key_lock("b-key") == root / "b-key" / ".submit.lock" == results.sweep("b-key", "s1").lock


def test_points_are_the_directories_under_points_in_name_order(tmp_path: Path) -> None:
    sweep = SweepDir(tmp_path / "k" / "s1")
    assert list(sweep.points()) == []  # no points/ yet
    for point_id in ("ff00", "0a00", "1b00"):
        (sweep.path / "points" / point_id).mkdir(parents=True)
    (sweep.path / "points" / "0b-not-a-dir").write_text("")
    assert [p.point_id for p in sweep.points()] == ["0a00", "1b00", "ff00"]


def test_rounds_come_in_round_order_not_name_order(tmp_path: Path) -> None:
    aiperf = tmp_path / "aiperf"
    assert round_dirs(aiperf) == []  # a point replayed once has no rounds
    for name in ("round-10", "round-2", "round-1", "round-x", "round-", "profile_export.jsonl"):
        (aiperf / name).mkdir(parents=True)
    assert [d.name for d in round_dirs(aiperf)] == ["round-1", "round-2", "round-10"]
    assert PointDir(tmp_path).aiperf_round(10) == aiperf / "round-10"
