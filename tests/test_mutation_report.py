"""scripts/mutation_report.py's sample and interval: a module too big to mutate whole here is judged by a fixed
sample of its mutants, and its score is only as good as the interval printed beside it."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_report(monkeypatch: pytest.MonkeyPatch, sample: str) -> Any:
    monkeypatch.setenv("SLURMX_MUTATION_SAMPLE", sample)
    spec = importlib.util.spec_from_file_location("mutation_report_under_test", ROOT / "scripts/mutation_report.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wilson_interval_matches_newcombes_published_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    report = load_report(monkeypatch, "")
    # Newcombe (1998), Stat. Med. 17:857, table I, method 3 (score interval without continuity correction).
    low, high = report.wilson(81, 263)
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)
    low, high = report.wilson(15, 148)
    assert (round(low, 4), round(high, 4)) == (0.0624, 0.1605)
    low, high = report.wilson(0, 20)
    assert (low, round(high, 4)) == (0.0, 0.1611)


def test_sample_is_fixed_uniform_and_the_same_whatever_the_order(monkeypatch: pytest.MonkeyPatch) -> None:
    report = load_report(monkeypatch, "")
    names = [f"slurmx.node.f{f}.x_g__mutmut_{i}" for f in range(40) for i in range(1, 51)]
    drawn = report.sample(names, 200)
    assert len(drawn) == 200 and set(drawn) <= set(names)
    assert report.sample(list(reversed(names)), 200) == drawn
    # Uniform over functions: 40 functions of 50 mutants each, 5 expected from each; none gets a fifth of the sample.
    per_function = [sum(1 for n in drawn if n.startswith(f"slurmx.node.f{f}.")) for f in range(40)]
    assert max(per_function) < 40 and sum(1 for c in per_function if c) > 30
    assert report.sample(names, 0) == sorted(names)


def test_report_scores_only_the_sample(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    report = load_report(monkeypatch, "10")
    names = [f"slurmx.results.m.x_f__mutmut_{i}" for i in range(1, 101)]
    drawn = set(report.sample(names, 10))
    lines = [f"    {n}: {'killed' if n in drawn else 'not checked'}" for n in names]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    assert report.main(["slurmx.results"]) == 0
    out = capsys.readouterr().out
    assert "10/10" in out and "100.0%" in out and "a sample of 10: 95 % interval 72.2-100.0%" in out
