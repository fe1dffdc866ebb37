"""slurmx's expansion matches InferenceX's own generator output row for row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmx.config.load import load_clusters, load_masters
from slurmx.plan import expand

BRANCH_KEYS = [
    ("kimik3-b300-lmcache", "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"),
    ("lmcache-agentix", "dsv4-fp4-b200-vllm-agentic-lmcache"),
]


def test_full_sweep_matches_inferencex_row_for_row(fixtures: Path) -> None:
    masters = load_masters([fixtures / "nvidia-master.yaml", fixtures / "amd-master.yaml"])
    clusters = load_clusters(fixtures / "runners.yaml")
    points = expand(list(masters.configs), masters, clusters)
    expected = json.loads((fixtures / "expected" / "full-sweep-nvidia-amd.json").read_text())
    assert len(points) == len(expected) == 1820
    for index, (point, row) in enumerate(zip(points, expected)):
        assert point.row() == row, f"row {index} ({row['exp-name']}) differs"
    ids = [p.point_id for p in points]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(("branch", "key"), BRANCH_KEYS)
def test_branch_key_matches_inferencex(fixtures: Path, branch: str, key: str) -> None:
    masters = load_masters([fixtures / "branches" / branch / "nvidia-master.yaml"])
    clusters = load_clusters(fixtures / "runners.yaml")
    points = expand([key], masters, clusters)
    expected = json.loads((fixtures / "expected" / f"{key}.json").read_text())
    assert [p.row() for p in points] == expected
    assert len({p.point_id for p in points}) == len(points)


def test_exp_name_collision_gets_distinct_point_ids(fixtures: Path) -> None:
    masters = load_masters([fixtures / "branches" / "lmcache-agentix" / "nvidia-master.yaml"])
    points = expand(["dsv4-fp4-b200-vllm-agentic-lmcache"], masters, load_clusters(fixtures / "runners.yaml"))
    tp8, dep8 = points[2], points[3]
    assert tp8.exp_name == dep8.exp_name == "dsv4_tp8_conc16_kvdram-lmcache"
    assert tp8.point_id != dep8.point_id
    assert (tp8.parallelism, dep8.parallelism) == ("TP8", "DEP8")
