"""A point replayed until certified, on the node: its rounds replay into aiperf/round-<k>/ with the caches reset
between them, and the budget ends them. Driven in-process with the real stand-ins for vLLM and aiperf; every round
replays the same 12 recorded requests (tests/data/aiperf/lmcache-replay)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmx.store.ledger import UntilCertified
from tests.helpers.serving_group import serving_group

RESET = "/reset_prefix_cache?reset_external=true"  # vLLM's reset, the engine's prefix cache and its connector's


def test_a_budget_spent_by_the_first_round_stops_after_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """p99 of 12 requests is never certified: a distribution-free 95 % interval of the 99th percentile needs at least
    299 samples (1 - 0.99^n >= 0.95), so the budget (0.001 min = 60 ms, spent by any round) ends the point."""
    until = UntilCertified(percentiles=("p99",), max_point_minutes=0.001)
    group = serving_group(tmp_path, monkeypatch, until=until)
    assert group.run(2) == {group.ids[2]: "done"}
    point = group.point(2)
    assert sorted(p.name for p in point.aiperf.iterdir() if p.is_dir()) == ["round-1"]
    assert (point.aiperf_round(1) / "profile_export.jsonl").exists()
    result = group.result(2)
    assert result is not None and result.slurmx is not None
    assert (result.slurmx.rounds, result.slurmx.stopped_by) == (1, "budget")
    assert result.num_requests_successful == 12
    assert group.resets() == []  # one round on a fresh server: nothing to reset


def test_rounds_go_on_until_one_more_would_overrun_the_budget_each_on_reset_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1.5 s budget (0.025 min) holds several rounds of the stand-in (each well under a second, its start included);
    every round after the first starts on reset caches, and the rounds' records are pooled."""
    until = UntilCertified(percentiles=("p99",), max_point_minutes=0.025)
    group = serving_group(tmp_path, monkeypatch, until=until)
    assert group.run(2) == {group.ids[2]: "done"}
    point = group.point(2)
    rounds = sorted(p.name for p in point.aiperf.iterdir() if p.is_dir())
    k = len(rounds)
    assert k >= 2 and rounds == sorted(f"round-{i}" for i in range(1, k + 1))
    assert group.resets() == [RESET] * (k - 1)
    result = group.result(2)
    assert result is not None and result.slurmx is not None
    assert (result.slurmx.rounds, result.slurmx.stopped_by) == (k, "budget")
    assert result.num_requests_successful == 12 * k
    assert result.slurmx.started_at is not None and result.slurmx.ended_at is not None
    # the window spans every round, from the first one's start: more than one round's worth, within the budget plus
    # the one round the stop rule lets start just inside it
    assert result.slurmx.ended_at - result.slurmx.started_at < 1.5 * 2


def test_a_failed_reset_between_rounds_fails_the_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round on a warm cache would measure hits the point never earned: the reset failing fails the point."""
    until = UntilCertified(percentiles=("p99",), max_point_minutes=0.05)
    group = serving_group(tmp_path, monkeypatch, until=until)
    monkeypatch.setenv("FAKE_ENGINE_RESET", "500")
    reason = "could not reset the engine's prefix cache between points (set VLLM_SERVER_DEV_MODE=1)"
    assert group.run(2) == {group.ids[2]: reason}
    assert [p.name for p in group.point(2).aiperf.iterdir() if p.is_dir()] == ["round-1"]
    assert group.result(2) is None
