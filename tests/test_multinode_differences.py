"""docs/multinode-differences.yaml: every declared difference from InferenceX's multinode flow points at
evidence on both sides (the launcher or master in the fixtures, and `slurmx render` of the Kimi-K3 H200 key
or of the row's `key`: the Dynamo disaggregated one), so a row
that went stale fails here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import FIXTURES
from tests.helpers.golden import render

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "multinode-differences.yaml"
KEY = "kimik3-fp4-h200-vllm-agentic"
KINDS = {"deliberate", "run-time", "cluster-layout", "open"}
FIELDS = {"key", "concern", "upstream", "upstream-source", "slurmx", "render-shows", "render-lacks", "kind", "why"}


def _rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = yaml.safe_load(TABLE.read_text())["differences"]
    return rows


ROWS = _rows()


@pytest.fixture(scope="module")
def renders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each key the table names (default: the Kimi-K3 H200 key), rendered once."""
    keys = {row.get("key", KEY) for row in ROWS}
    return {key: render(key, tmp_path_factory.mktemp("render") / "results") for key in keys}


def test_rows_are_complete() -> None:
    assert len({row["concern"] for row in ROWS}) == len(ROWS)
    for row in ROWS:
        assert set(row) <= FIELDS, row["concern"]
        assert row["kind"] in KINDS, row["concern"]
        assert row["upstream"] and row["slurmx"] and row["why"], row["concern"]
        assert row.get("render-shows") or row.get("render-lacks"), row["concern"]


@pytest.mark.parametrize("row", ROWS, ids=[row["concern"] for row in ROWS])
def test_upstream_side_is_in_the_launcher(row: dict[str, Any]) -> None:
    source = row["upstream-source"]
    text = (FIXTURES / source["file"]).read_text()
    for needle in source["contains"]:
        assert needle in text, f"{row['concern']}: {source['file']} no longer has {needle!r}"


@pytest.mark.parametrize("row", ROWS, ids=[row["concern"] for row in ROWS])
def test_slurmx_side_is_in_the_render(row: dict[str, Any], renders: dict[str, str]) -> None:
    key = row.get("key", KEY)
    rendered = renders[key]
    for needle in row.get("render-shows", []):
        assert needle in rendered, f"{row['concern']}: render of {key} no longer shows {needle!r}"
    for needle in row.get("render-lacks", []):
        assert needle not in rendered, f"{row['concern']}: render of {key} now has {needle!r}"


def test_the_issue_s_concerns_are_declared() -> None:
    """The srt-slurm path, SRT_SLURM_* variables, head discovery and the replay as a client each have a row."""
    text = " ".join(f"{row['upstream']} {row['upstream-source']['contains']}" for row in ROWS)
    for needle in ("srtctl apply", "SRT_SLURM_MODEL_PREFIX", "job id", "agentic_srt.sh"):
        assert needle in text
