"""Every benchmark script loads: its module-level code (defaults, constants) runs without error, so a broken
default is caught in CI rather than by the next person who times something."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

SCRIPTS = sorted(p for p in (Path(__file__).resolve().parents[1] / "benchmarks").iterdir() if p.is_file())


def test_there_are_benchmarks() -> None:
    assert len(SCRIPTS) >= 5


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_module_level_code_runs(script: Path) -> None:
    names = runpy.run_path(str(script), run_name="benchmark_load_test")  # not __main__: main() stays unrun
    assert callable(names.get("main")), f"{script.name}: no main()"
