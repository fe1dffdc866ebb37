"""The local stack is reused whichever Python environment is active: a venv first on PATH is the same
interpreter, and must not make the 5 GB of venvs look stale."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.stack


def status(env: dict[str, str]) -> str:
    proc = subprocess.run([str(ROOT / "scripts" / "local-stack.sh"), "status"], capture_output=True, text=True, env=env)
    return proc.stdout + proc.stderr


def test_another_venv_first_on_path_reuses_the_stack(tmp_path: Path) -> None:
    plain = status(dict(os.environ))
    if "engine: ok" not in plain:
        if os.environ.get("CI"):
            pytest.fail(f"the CPU stack is not built: {plain}")
        pytest.skip("the CPU stack is not built (scripts/local-stack.sh)")
    venv = tmp_path / "user venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    assert (venv / "bin" / "python3.11").exists() or (venv / "bin" / "python3").exists()
    with_venv = status(env)
    for part in ("engine", "aiperf", "model"):
        assert f"{part}: ok" in with_venv, with_venv
