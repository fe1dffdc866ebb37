"""The rendered production commands of the seed keys, kept as reviewed golden files.

Regenerate after an intended change with UPDATE_GOLDEN=1 and review the diff like code.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from slurmx import paths
from slurmx.commands.common import load_points
from slurmx.commands.render import render_key

GOLDEN = Path(__file__).parent / "golden"
KEYS = ["kimik3-fp4-b300-vllm-agentic-dspark-lmcache", "dsv4-fp4-b200-vllm-agentic-lmcache"]


class _Args:
    config = None
    clusters = None


def _normalise(text: str, results: Path) -> str:
    # Machine-specific paths become placeholders; everything else must match byte for byte.
    return (
        text.replace(str(results.resolve()), "<results>")
        .replace(sys.executable, "<python>")
        .replace(str(Path(sys.executable).resolve()), "<python>")
    )


@pytest.mark.parametrize("key", KEYS)
def test_rendered_production_commands_match_golden(key: str, tmp_path: Path) -> None:
    loaded = load_points(_Args(), [key])  # type: ignore[arg-type]
    results = tmp_path / "results"
    text = _normalise(render_key(key, loaded, results), results)
    golden = GOLDEN / f"{key}.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), f"rendered commands of {key} changed; review and UPDATE_GOLDEN=1"


def test_golden_files_hold_the_fixed_seed_bugs() -> None:
    """What the seeds' reviews found broken is visibly right in the reviewed files."""
    for key in KEYS:
        text = (GOLDEN / f"{key}.txt").read_text()
        engine_lines = [line for line in text.splitlines() if " serve " in line]
        assert engine_lines, key
        for line in engine_lines:
            assert "--enable-auto-tool-choice" in line and "--tool-call-parser" in line
            assert "--enable-cumem-allocator" not in line or "LMCacheMPConnector" not in line
            if "LMCacheMPConnector" in line:
                assert '"kv_connector_module_path":"lmcache.integration.vllm.lmcache_mp_connector"' in line
        assert "#SBATCH --exclusive" in text and "--container-image=" in text
    assert paths.jobs_dir().is_dir()
