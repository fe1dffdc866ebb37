"""The reviewed render of the Kimi-K3 H200 aggregated multinode key (tests/golden/), read for its shape:
each node's commands, the vllm-simple connector on every node, and the TP16 points' ranks over two nodes."""

from __future__ import annotations

import re

from tests.helpers.golden import golden_path

KEY = "kimik3-fp4-h200-vllm-agentic"


def _points(text: str) -> dict[str, str]:
    """Each point's rendered block, by its exp name."""
    blocks = re.split(r"^(?=# point )", text, flags=re.M)
    return {b.split()[3]: b for b in blocks if b.startswith("# point ")}


def test_every_tp8_point_renders_four_nodes_head_serving_and_three_headless() -> None:
    points = _points(golden_path(KEY).read_text())
    tp8 = {name: b for name, b in points.items() if "p4x8" in name}
    assert len(tp8) == 25  # 12 none + 13 vllm-simple
    for name, block in tp8.items():
        engines = [line for line in block.splitlines() if " vllm serve " in line]
        assert len(engines) == 4, name
        head, *others = engines
        assert "--headless" not in head and "--port 8888" in head
        assert "--tensor-parallel-size 8 --data-parallel-size 4 --enable-expert-parallel" in head
        for rank, line in enumerate(others, 1):
            assert f"--headless --data-parallel-start-rank {rank}" in line, name
            assert "--data-parallel-size-local 1 --data-parallel-address '$HEAD_ADDRESS'" in line
        assert [f"## node {i} of 4: engine" in block for i in (1, 2, 3)] == [True] * 3
        # every node's engine advertises its own (Slurm's NodeAddr), not its default route's interface
        envs = [
            line
            for line in block.splitlines()
            if line.startswith("# env: ") and "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" in line
        ]
        assert len(envs) == 4 and all("VLLM_HOST_IP='$NODE_ADDRESS'" in line for line in envs), name
        connector = "SimpleCPUOffloadConnector" in block
        assert connector == ("vllm-simple" in block.splitlines()[0]), name
        if connector:  # the node's budget (1234 GB for a TP8 worker) over its 8 ranks, on every node
            assert all('"cpu_bytes_to_use_per_rank":154250000000' in line for line in engines), name


def test_tp16_points_span_two_nodes_per_rank_in_one_torch_world() -> None:
    """TP16 x DP2 on 8-GPU nodes: each rank over two nodes, vLLM's --nnodes/--node-rank launch with the
    head as torch.distributed master; every node but the head headless."""
    points = _points(golden_path(KEY).read_text())
    tp16 = {name: b for name, b in points.items() if "p2x16" in name}
    assert len(tp16) == 10
    for name, block in tp16.items():
        assert "# refused" not in block, name
        engines = [line for line in block.splitlines() if " vllm serve " in line]
        assert len(engines) == 4, name
        for rank, line in enumerate(engines):
            assert "--tensor-parallel-size 16 --data-parallel-size 2" in line
            assert f"--nnodes 4 --node-rank {rank} --master-addr '$HEAD_ADDRESS' --master-port 29501" in line
            assert ("--headless" in line) == (rank > 0) and ("--port 8888" in line)
            assert "--data-parallel-start-rank" not in line and "--data-parallel-size-local" not in line
