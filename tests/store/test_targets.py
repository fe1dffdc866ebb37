"""What a user names on the command line, found in a hand-made results tree: KEY, KEY/SWEEP, SWEEP or a unique
prefix of one (4 characters at least), a unique prefix of a point id; and what is not found, in one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurmx.errors import UserError
from slurmx.store.targets import Target, find_sweeps, resolve
from slurmx.store.tree import PointDir, ResultsTree, SweepDir

SWEEPS = {
    "kimik3-a": {"s0123456789": ["aaaa00000001"], "s0123ffffff": ["bbbb00000001"]},
    "kimik3-b": {"sabcdef0123": ["0a1b2c3d4e5f", "0a1b99999999", "ffee00112233"]},
    "qwen-c": {"s1234": [], "s12345": ["cccc00000001"]},  # one sweep id is a prefix of the other
}


@pytest.fixture
def results(tmp_path: Path) -> ResultsTree:
    root = tmp_path / "results"
    for key, sweeps in SWEEPS.items():
        for sweep_id, points in sweeps.items():
            (root / key / sweep_id).mkdir(parents=True)
            (root / key / sweep_id / "sweep.json").write_text("{}")
            for point_id in points:
                (root / key / sweep_id / "points" / point_id).mkdir(parents=True)
    (root / "empty-key").mkdir()  # a key whose first submit made its lock, no sweep yet
    (root / "empty-key" / ".submit.lock").write_text("")
    return ResultsTree(root)


def sweep(results: ResultsTree, key: str, sweep_id: str) -> SweepDir:
    return SweepDir(results.root / key / sweep_id)


def named(target: Target) -> list[str]:
    return [f"{s.config_key}/{s.sweep_id}" for s in target.sweeps]


def test_no_name_is_every_sweep_in_key_and_sweep_order(results: ResultsTree) -> None:
    target = resolve(results, None)
    assert named(target) == [
        "kimik3-a/s0123456789", "kimik3-a/s0123ffffff", "kimik3-b/sabcdef0123", "qwen-c/s1234", "qwen-c/s12345",
    ]  # fmt: skip
    assert target.point is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("kimik3-a", ["kimik3-a/s0123456789", "kimik3-a/s0123ffffff"]),  # a key: all its sweeps
        ("kimik3-a/", ["kimik3-a/s0123456789", "kimik3-a/s0123ffffff"]),  # as a shell completes a directory
        ("/kimik3-b/", ["kimik3-b/sabcdef0123"]),
        ("kimik3-a/s0123ffffff", ["kimik3-a/s0123ffffff"]),  # KEY/SWEEP
        ("s0123456789", ["kimik3-a/s0123456789"]),  # a sweep id alone
        ("sabc", ["kimik3-b/sabcdef0123"]),  # a unique prefix of 4 characters
        ("s1234", ["qwen-c/s1234"]),  # exact wins over the longer id it prefixes
        ("s123", None),  # a prefix of two sweeps (s1234, s12345): neither
    ],
)
def test_keys_and_sweeps(results: ResultsTree, name: str, expected: list[str] | None) -> None:
    if expected is None:
        with pytest.raises(
            UserError, match=f"^no config key, sweep or point {name!r} in {re.escape(str(results.root))}"
        ):
            resolve(results, name)
        return
    target = resolve(results, name)
    assert named(target) == expected and target.point is None
    assert find_sweeps(results, [name]) == (target.sweeps, [])


def test_a_unique_point_prefix_is_that_point_in_its_sweep(results: ResultsTree) -> None:
    target = resolve(results, "0a1b2")
    assert named(target) == ["kimik3-b/sabcdef0123"]
    assert target.point == PointDir(results.root / "kimik3-b/sabcdef0123/points/0a1b2c3d4e5f")
    assert resolve(results, "cccc00000001").point == PointDir(results.root / "qwen-c/s12345/points/cccc00000001")
    with pytest.raises(UserError) as caught:
        resolve(results, "0a1b")
    assert str(caught.value) == "'0a1b' matches 2 points; give more of the point id"


def test_names_of_three_characters_match_no_prefix(results: ResultsTree) -> None:
    for name in ("sab", "ffe"):  # a sweep prefix and a point prefix, each unique but too short
        with pytest.raises(UserError, match=f"^no config key, sweep or point '{name}' in "):
            resolve(results, name)
    assert find_sweeps(results, ["sab"]) == ([], ["sab"])


def test_without_points_a_point_prefix_is_not_found(results: ResultsTree) -> None:
    assert resolve(results, "ffee0").point == PointDir(results.root / "kimik3-b/sabcdef0123/points/ffee00112233")
    with pytest.raises(UserError) as caught:
        resolve(results, "ffee0", allow_point=False)
    assert str(caught.value) == f"no config key or sweep 'ffee0' in {results.root}"


def test_what_is_not_found_is_one_line_with_the_names_it_is_close_to(results: ResultsTree) -> None:
    with pytest.raises(UserError) as caught:
        resolve(results, "kimik3-c")
    # difflib: both keys score 7/8 against it; equal scores come highest name first
    assert (
        str(caught.value)
        == f"no config key, sweep or point 'kimik3-c' in {results.root} (did you mean 'kimik3-b', 'kimik3-a'?)"
    )
    with pytest.raises(UserError) as caught:
        resolve(results, "sabcdef0124")  # a sweep id mistyped
    assert str(caught.value).endswith("(did you mean 'sabcdef0123'?)")
    with pytest.raises(UserError) as caught:
        resolve(results, "kimik3-b/sabcdef0124")  # KEY/SWEEP with a sweep the key has not
    assert str(caught.value).startswith("no config key, sweep or point 'kimik3-b/sabcdef0124' in ")
    with pytest.raises(UserError) as caught:
        resolve(results, "kimik3-a/sabcdef0123")  # a sweep of another key
    assert str(caught.value).startswith("no config key, sweep or point 'kimik3-a/sabcdef0123' in ")
    with pytest.raises(UserError) as caught:
        resolve(results, "kimik3-b/sabcdef0123/points")  # a path below a sweep is no name
    assert str(caught.value).startswith("no config key, sweep or point 'kimik3-b/sabcdef0123/points' in ")


def test_a_key_without_sweeps_is_known_to_find_sweeps_but_not_a_target(results: ResultsTree) -> None:
    # collect and compare name it with nothing to do; status, cancel and logs have nothing to act on
    assert find_sweeps(results, ["empty-key"]) == ([], [])
    with pytest.raises(UserError, match="^no config key, sweep or point 'empty-key' in "):
        resolve(results, "empty-key")


def test_find_sweeps_keeps_the_order_named_once_each_and_returns_the_unknown(results: ResultsTree) -> None:
    assert find_sweeps(results, []) == (list(results.sweeps()), [])
    found, missing = find_sweeps(results, ["kimik3-b", "nope", "kimik3-a/s0123ffffff", "kimik3-a", "sabc", "s123"])
    assert [f"{s.config_key}/{s.sweep_id}" for s in found] == [
        "kimik3-b/sabcdef0123", "kimik3-a/s0123ffffff", "kimik3-a/s0123456789",
    ]  # fmt: skip
    assert missing == ["nope", "s123"]
    assert found[1] == sweep(results, "kimik3-a", "s0123ffffff")
