"""Intervals on known inputs: Student's t against table values, means and ratios against hand-computed values."""

from __future__ import annotations

import math

import pytest

from slurmx.collect.stats import mean_interval, ratio_paired, ratio_unpaired, t_cdf, t_quantile

# t(0.975, df) from any table (and scipy.stats.t.ppf)
T_975 = {1: 12.706204736, 2: 4.302652730, 3: 3.182446305, 4: 2.776445105, 9: 2.262157163, 30: 2.042272456}


@pytest.mark.parametrize(("df", "expected"), sorted(T_975.items()))
def test_t_quantile_matches_the_table(df: int, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, rel=1e-7)
    assert t_quantile(0.025, df) == pytest.approx(-expected, rel=1e-7)


def test_t_quantile_inverts_the_cdf_at_fractional_degrees_of_freedom() -> None:
    for df in (1.5, 3.7, 12.25):
        assert t_cdf(t_quantile(0.975, df), df) == pytest.approx(0.975, abs=1e-10)
    assert t_quantile(0.975, 4) < t_quantile(0.975, 3.7) < t_quantile(0.975, 3)


def test_mean_interval_is_t_based_from_three_repeats() -> None:
    est = mean_interval([10.0, 12.0, 14.0])  # mean 12, s 2, half = 4.302653 * 2 / sqrt(3)
    assert (est.mean, est.n) == (12.0, 3)
    assert est.lo == pytest.approx(7.031725, abs=1e-5) and est.hi == pytest.approx(16.968275, abs=1e-5)
    assert est.half_width_pct == pytest.approx(41.40229, abs=1e-4)
    assert est.text(".1f") == "12.0 ±41.4%"


def test_fewer_than_three_repeats_say_n_instead_of_an_interval() -> None:
    one = mean_interval([5.0])
    assert not one.has_interval and one.text(".1f") == "5.0 (n=1)"
    assert mean_interval([5.0, 7.0]).text(".1f") == "6.0 (n=2)"
    assert ratio_unpaired([2.0], [1.0]) is not None and ratio_unpaired([2.0], [1.0]).text() == "2.00x (n=1)"  # type: ignore[union-attr]  # checked not None first


def test_a_ratio_whose_interval_contains_one_is_within_noise_never_a_win_or_loss() -> None:
    # per-repeat log ratios 0.1, 0.2, 0.3: mean 0.2, s 0.1 -> exp(0.2 +- 4.302653 * 0.1 / sqrt(3))
    r = ratio_paired([math.exp(0.1), math.exp(0.2), math.exp(0.3)], [1.0, 1.0, 1.0])
    assert r is not None and r.paired
    assert r.value == pytest.approx(math.exp(0.2))
    assert r.lo == pytest.approx(0.952739, abs=1e-6) and r.hi == pytest.approx(1.565826, abs=1e-6)
    assert r.within_noise
    assert r.verdict(higher_is_better=True) == "within noise" == r.verdict(higher_is_better=False)
    assert r.text().endswith("within noise")


def test_a_ratio_clear_of_one_is_better_or_worse_by_the_metric_direction() -> None:
    r = ratio_paired([2.0, 4.1, 7.9], [1.0, 2.0, 4.0])
    assert r is not None and not r.within_noise and r.lo is not None and r.lo > 1
    assert r.verdict(higher_is_better=True) == "better" and r.verdict(higher_is_better=False) == "worse"


def test_unpaired_ratio_uses_the_delta_method_with_welch_degrees_of_freedom() -> None:
    # means 12 and 6, cv^2 = 1/36 on both sides: var(log) = 2 * (1/36) / 3, Welch df = 4
    r = ratio_unpaired([10.0, 12.0, 14.0], [5.0, 6.0, 7.0])
    assert r is not None and not r.paired
    assert r.value == pytest.approx(2.0)
    assert r.lo == pytest.approx(1.370699, abs=1e-6) and r.hi == pytest.approx(2.918219, abs=1e-6)


def test_a_baseline_run_once_borrows_the_measured_sides_spread() -> None:
    # var(log) = (1/36)/3 + (1/36)/1, df = 2
    r = ratio_unpaired([10.0, 12.0, 14.0], [6.0])
    assert r is not None and r.lo == pytest.approx(0.873804, abs=1e-6) and r.hi == pytest.approx(4.577684, abs=1e-6)
    assert r.verdict(higher_is_better=True) == "within noise"


def test_without_an_interval_a_tolerance_decides_and_no_tolerance_gives_no_verdict() -> None:
    r = ratio_unpaired([1.03], [1.0])
    assert r is not None and r.verdict(True) == "n=1"
    assert r.verdict(True, tolerance=0.05) == "within noise"
    assert r.verdict(False, tolerance=0.02) == "worse"
