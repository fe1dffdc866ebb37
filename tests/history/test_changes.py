"""Change detection on generated series: a known step is flagged at its sweep, noise alone is not (at the
false-alarm rate history/changes.py states), and without a measurable floor nothing is flagged."""

from __future__ import annotations

import math
import random

import pytest

from slurmx.history import changes as ch


def _series(rng: random.Random, n: int, noise: float, step_at: int | None = None, step: float = 1.0) -> list[float]:
    return [1000.0 * (step if step_at is not None and k >= step_at else 1.0) * math.exp(rng.gauss(0, noise))
            for k in range(n)]  # fmt: skip


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("step", [0.85, 1.15])
def test_a_step_is_flagged_once_at_the_sweep_where_it_happened(seed: int, step: float) -> None:
    rng = random.Random(seed)
    at = rng.randrange(6, 25)
    means = _series(rng, 30, 0.02, at, step)
    found = ch.changes(means, ch.noise_floor(means))
    assert [c.index for c in found] == [at], (at, found)
    assert found[0].pct == pytest.approx(100 * (step - 1), abs=5.0)  # the windows' means: a few sigma


def test_a_step_at_the_newest_sweep_is_flagged_there() -> None:
    rng = random.Random(7)
    means = _series(rng, 20, 0.02, 19, 0.8)
    found = ch.changes(means, ch.noise_floor(means))
    assert [c.index for c in found] == [19] and found[0].ratio < 1


def test_noise_only_series_of_30_sweeps_flag_at_most_one_percent() -> None:
    rng = random.Random(2026)
    runs = 2000
    flagged = 0
    for i in range(runs):
        noise = (0.005, 0.02, 0.08)[i % 3]  # the rate does not depend on the noise level
        means = _series(rng, 30, noise)
        flagged += bool(ch.changes(means, ch.noise_floor(means)))
    assert flagged / runs <= 0.01, f"{flagged} of {runs} noise-only series flagged"


def test_noise_only_series_with_repeats_give_no_flag() -> None:
    rng = random.Random(5)
    for _ in range(100):
        repeats = [[1000.0 * math.exp(rng.gauss(0, 0.03)) for _ in range(3)] for _ in range(30)]
        means = [sum(r) / 3 for r in repeats]
        floor = ch.noise_floor(means, repeats)
        assert floor.source == "history and repeats"
        assert ch.changes(means, floor) == []


def test_repeats_give_a_floor_where_the_history_is_too_short() -> None:
    repeats = [[100.0, 101.0, 99.0], [100.5, 99.5, 100.0], [80.0, 81.0, 79.0], [80.5, 79.5, 80.0]]
    means = [sum(r) / 3 for r in repeats]
    assert ch.noise_floor(means).sigma is None  # four sweeps, no repeats: no floor, nothing flagged
    assert ch.changes(means, ch.noise_floor(means)) == []
    floor = ch.noise_floor(means, repeats)
    assert floor.source == "repeats" and floor.pct is not None and floor.pct < 1.0
    # three sweeps before a candidate are needed: a step at sweep 2 of 4 is not judged, one at sweep 3 is
    means2 = [means[0], means[1], means[0], means[2]]
    assert [c.index for c in ch.changes(means2, floor)] == [3]
