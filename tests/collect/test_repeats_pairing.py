"""The pairing rule of repeats: an arm's ratio over the baseline arm pairs repeat i with repeat i only when both ran
as separate tasks, round by round, with at least three repeats each; the pairs are matched by repeat number. A
round-to-round drift that both arms share then cancels, which the unpaired interval cannot see."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import pytest

from slurmx.collect.collect import Row, flatten
from slurmx.collect.repeats import PointAggregate, aggregate
from slurmx.store.tree import SweepDir
from tests.helpers.synthetic import make_result

KEY = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"
Mode = Literal["separate-tasks", "shared-server"]
# the rounds drift 2x from one to the next (1000, 2000, 4000 tok/s/GPU without offload); LMCache is 10 % faster
# in every round
NONE = {1: 1000.0, 2: 2000.0, 3: 4000.0}
LMCACHE = {1: 1100.0, 2: 2200.0, 3: 4400.0}


def _rows(tmp_path: Path, arm: str, values: dict[int, float], mode: Mode) -> list[Row]:
    sweep = SweepDir(tmp_path / KEY / "s1")
    rows = []
    for repeat, tput in values.items():
        result = make_result(point_id=f"p-{arm}", config_key=KEY, sweep_id="s1", conc=8, arm=arm, tput_per_gpu=tput)
        assert result.slurmx is not None
        result.slurmx.repeat, result.slurmx.repeats, result.slurmx.repeat_mode = repeat, len(values), mode
        rows.append(flatten(result, sweep.point(f"p-{arm}", repeat).result_json, sweep))
    return rows


def _lmcache_over_none(
    tmp_path: Path, none: dict[int, float], lmcache: dict[int, float], modes: tuple[Mode, Mode]
) -> PointAggregate:
    aggs = aggregate(_rows(tmp_path, "none", none, modes[0]) + _rows(tmp_path, "lmcache", lmcache, modes[1]))
    (arm,) = [a for a in aggs if a.first.arm == "lmcache"]
    assert arm.baseline_arm == "none"
    return arm


def test_separate_task_repeats_are_paired_and_the_shared_drift_cancels(tmp_path: Path) -> None:
    ratio = _lmcache_over_none(tmp_path, NONE, LMCACHE, ("separate-tasks", "separate-tasks")).ratios["tput_per_gpu"]
    # every pair is 1.1 (1100/1000, 2200/2000, 4400/4000): the log ratios have no spread, the interval is 1.1 itself
    assert ratio.paired and ratio.n == 3
    assert ratio.value == pytest.approx(1.1) and ratio.lo == pytest.approx(1.1) and ratio.hi == pytest.approx(1.1)
    assert ratio.verdict(higher_is_better=True) == "better"


# Unpaired, the drift is noise: each side's mean is 2333.3 or 2566.7 (ratio 1.1) with s = 1527.5 or 1680.3, so
# cv^2 = 3/7 on both sides; var(log ratio) = 2 x (3/7) / 3 = 2/7, Welch df = 4, t(0.975, 4) = 2.776445;
# exp(ln 1.1 -+ 2.776445 x sqrt(2/7)) = exp(0.095310 -+ 1.484072) = [0.249384, 4.851959]
UNPAIRED = (0.249384, 4.851959)


@pytest.mark.parametrize(
    "modes",
    [
        ("shared-server", "shared-server"),  # back to back on one server: repeat i of each did not run side by side
        ("separate-tasks", "shared-server"),
        ("shared-server", "separate-tasks"),
    ],
)
def test_repeats_not_run_as_separate_tasks_on_both_sides_are_not_paired(
    tmp_path: Path, modes: tuple[Mode, Mode]
) -> None:
    ratio = _lmcache_over_none(tmp_path, NONE, LMCACHE, modes).ratios["tput_per_gpu"]
    assert not ratio.paired
    assert ratio.value == pytest.approx(1.1)
    assert (ratio.lo, ratio.hi) == (pytest.approx(UNPAIRED[0], abs=1e-6), pytest.approx(UNPAIRED[1], abs=1e-6))
    assert ratio.verdict(higher_is_better=True) == "within noise"


def test_fewer_than_three_repeats_on_a_side_are_not_paired(tmp_path: Path) -> None:
    two = {1: 1100.0, 2: 2200.0}
    ratio = _lmcache_over_none(tmp_path, NONE, two, ("separate-tasks", "separate-tasks")).ratios["tput_per_gpu"]
    # unpaired: the means' ratio, 1650 / 2333.3 = 0.707143, with the drift in its interval
    assert not ratio.paired
    assert ratio.value == pytest.approx(1650.0 / (7000.0 / 3))
    assert ratio.verdict(higher_is_better=True) == "within noise"


def test_pairs_are_matched_by_repeat_number_not_by_position(tmp_path: Path) -> None:
    # LMCache's repeat 1 is missing; the baseline's repeat 1 ran on a slow round (500). Matching by position would
    # pair 1100/500, 2200/1000, 4400/2000 (2.2 each); by number it is 1100/1000, 2200/2000, 4400/4000: 1.1 each.
    none = {1: 500.0, 2: 1000.0, 3: 2000.0, 4: 4000.0}
    lmcache = {2: 1100.0, 3: 2200.0, 4: 4400.0}
    arm = _lmcache_over_none(tmp_path, none, lmcache, ("separate-tasks", "separate-tasks"))
    ratio = arm.ratios["tput_per_gpu"]
    assert ratio.paired and ratio.n == 3
    assert ratio.value == pytest.approx(1.1) and ratio.lo == pytest.approx(1.1) and ratio.hi == pytest.approx(1.1)
    assert math.isclose(arm.estimates["tput_per_gpu"].mean, 7700.0 / 3)  # (1100 + 2200 + 4400) / 3
