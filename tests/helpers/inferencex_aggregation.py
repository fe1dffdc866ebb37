"""InferenceX's own agentic aggregation and validation modules (utils/agentic/ of the fixture tree), imported in this
process as a test oracle: a mutant of slurmx's aggregation must be judged by the tests that call it in-process,
and the oracle subprocess of tests/helpers/inferencex_results.py is not. Nothing of InferenceX is copied."""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

import pytest

from tests.conftest import FIXTURES

REPO = FIXTURES / "repo-main"


def module(name: str, package: str = "aggregation") -> ModuleType:
    """utils.agentic.<package>.<name>, from the fixture tree (a skip without it; a failure in CI)."""
    if not (REPO / "utils" / "agentic" / package / f"{name}.py").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"InferenceX's repository not found at {REPO} (set SLURMX_FIXTURES)")
        pytest.skip(f"InferenceX's repository not found at {REPO}")
    sys.path.insert(0, str(REPO))
    try:
        return importlib.import_module(f"utils.agentic.{package}.{name}")
    finally:
        sys.path.remove(str(REPO))
