from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("SLURMX_FIXTURES", ROOT.parent / "shared" / "fixtures" / "inferencex"))


@pytest.fixture
def fixtures() -> Path:
    # InferenceX's own configs and generator output: too large to copy in, so CI must provide them
    # (a skip there would let a DRAM-formula or expansion break pass), as for Slurm and the stack.
    if not (FIXTURES / "expected").is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"InferenceX fixtures not found at {FIXTURES} (set SLURMX_FIXTURES)")
        pytest.skip(f"InferenceX fixtures not found at {FIXTURES}")
    return FIXTURES


def pytest_configure(config: pytest.Config) -> None:
    # No parse cache unless a test asks for one (tests/test_yaml_cache.py): a mutant of the YAML builder must be
    # run, not answered from a cache its unmutated twin filled (mutmut's copies share one file's bytes).
    os.environ["SLURMX_CACHE_DIR"] = ""
    # mutmut's stats run (scripts/mutation) marks its own process "stats"; a CLI child started from a fresh
    # directory inherited that and tried to record hits with no mutmut config there (its hits are never read):
    # children run the plain code, the tests' own process keeps mutmut's process-local mark
    if os.environ.get("MUTANT_UNDER_TEST") == "stats":
        del os.environ["MUTANT_UNDER_TEST"]
