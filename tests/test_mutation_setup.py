"""scripts/mutation runs the fast suite from mutants/, a copy holding only what pyproject's mutmut section names:
a top-level file or folder the tests read and the copy lacks fails collection there (docs/ once, benchmarks/
later), and the whole run reports nothing. Every tracked top-level entry must be in the copy."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTMUT_COPIES = {"src", "tests", "pyproject.toml"}  # mutmut copies these itself (source_paths, tests/, its config)


def test_mutmut_copies_every_tracked_top_level_entry() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    top = {line.split("/", 1)[0] for line in tracked.splitlines() if line}
    section = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"]
    copied = {entry.rstrip("/") for entry in section["also_copy"]} | MUTMUT_COPIES
    assert top - copied == set(), f"add to [tool.mutmut] also_copy: {sorted(top - copied)}"
    assert copied - top == set(), f"also_copy names what git does not track: {sorted(copied - top)}"
