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
