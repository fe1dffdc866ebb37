"""Parallelism labels (one spelling in plan, status and collect) and the server groups that share-server
runs on one set of servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmx.config.load import load_clusters, load_masters
from slurmx.plan import expand, parallelism_label, server_gpus, server_groups

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("args", "label"),
    [
        ((8, 1, False), "TP8"),
        ((8, 8, True), "DEP8"),
        ((8, 2, True), "DEP8"),  # any expert parallelism with data-parallel attention
        ((8, 1, True), "TP8"),  # data-parallel attention alone is not DEP
        ((8, 8, False), "TP8-EP8"),
        ((8, 2, False), "TP8-EP2"),
        ((4, 1, False, 2), "TP4-PP2"),
        ((8, 1, False, 1, 8), "TP8-DCP8"),
        ((4, 1, False, 1, 1, 2), "TP4-PCP2"),
        ((2, 2, False, 2, 2, 2), "TP2-EP2-PP2-DCP2-PCP2"),
    ],
)
def test_parallelism_label(args: tuple[int, int, bool], label: str) -> None:
    assert parallelism_label(*args) == label


@pytest.mark.parametrize(("args", "gpus"), [((8,), 8), ((4, 2), 8), ((2, 1, 4), 8), ((2, 2, 2), 8), ((1,), 1)])
def test_server_gpus_without_pipeline_or_context_parallelism_are_its_tensor_parallel_gpus(
    args: tuple[int, ...], gpus: int
) -> None:
    """A plain TP8 server is 8 GPUs; pipeline and prefill-context parallelism multiply them (vLLM's world size)."""
    assert server_gpus(*args) == gpus


def test_points_that_differ_only_in_concurrency_share_a_server_group() -> None:
    masters = load_masters([ROOT / "configs" / "local-master.yaml"])
    points = expand(list(masters.configs), masters, load_clusters(ROOT / "configs" / "clusters.yaml"))
    groups = server_groups(points)
    assert [[(p.backend_name, p.conc) for p in group] for group in groups] == [
        [("none", 2), ("none", 4)],
        [("lmcache", 2), ("lmcache", 4)],
        [("vllm-simple", 2), ("vllm-simple", 4)],
        [("mooncake", 2), ("mooncake", 4)],
    ]
    assert [p for group in groups for p in group] == points  # plan order kept, nothing lost
