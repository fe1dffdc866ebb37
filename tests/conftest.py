from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures" / "inferencex"


@pytest.fixture
def fixtures() -> Path:
    if not FIXTURES.exists():
        pytest.skip(f"InferenceX fixtures not found at {FIXTURES}")
    return FIXTURES
