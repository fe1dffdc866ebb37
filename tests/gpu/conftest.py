"""A node without NVML, simulated: these tests run here and on a real GPU machine, so none relies on the host
lacking NVML or nvidia-smi."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# put first on a child's PYTHONPATH: its sitecustomize makes `import pynvml` fail in that interpreter
NO_NVML = Path(__file__).resolve().parent / "no_nvml"


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as on a node without NVML: `import pynvml` fails (ModuleNotFoundError)."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
