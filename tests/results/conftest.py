"""The InferenceX results oracle, one process per test module that asks it (tests/helpers/inferencex_results.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.helpers.inferencex_results import REPO, Oracle


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    if not (REPO / "utils" / "agentic" / "validation").is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"InferenceX's repository is missing at {REPO}")
        pytest.skip(f"InferenceX's repository not found at {REPO}")
    running = Oracle()
    yield running
    assert running.proc.stdin
    running.proc.stdin.close()
    running.proc.wait(timeout=30)
