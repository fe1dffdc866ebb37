"""The code's own habits hold: ruff's lint and format are clean, and every `type: ignore` says why."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed (it is in slurmx[test]: scripts/dev-env.sh)")
    return [found]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff_is_clean(command: list[str]) -> None:
    proc = subprocess.run([*_ruff(), *command, "."], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_type_ignore_names_its_code_and_reason() -> None:
    bare = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "type: ignore" in line and not re.search(r"type: ignore\[[a-z-, ]+\]\s+#\s*\S", line):
                bare.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bare, "a type: ignore without [code] and a reason:\n" + "\n".join(bare)
