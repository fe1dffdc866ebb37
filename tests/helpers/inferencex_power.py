"""InferenceX's own aggregate_power.py, loaded from the shared fixtures as a test oracle (never copied
into the project): slurmx's energy fields must equal what it computes on the same samples."""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

import pytest

from tests.conftest import FIXTURES


def aggregate_power() -> ModuleType:
    path = FIXTURES / "upstream-code" / "aggregate_power.py"
    if not path.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"InferenceX's aggregate_power.py not found at {path} (set SLURMX_FIXTURES)")
        pytest.skip(f"InferenceX's aggregate_power.py not found at {path}")
    spec = importlib.util.spec_from_file_location("ix_aggregate_power", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
