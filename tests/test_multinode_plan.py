"""Multinode points: the nodes their workers need, the Slurm request per node, the per-node engine flags,
what submit refuses, and the cluster check for N nodes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slurmx.config.clusters import ClusterProfile
from slurmx.config.load import load_clusters, load_masters
from slurmx.config.master import WorkerSpec
from slurmx.engines.base import NodePart
from slurmx.engines.vllm import ENGINE
from slurmx.errors import UserError
from slurmx.inputs import load_inputs
from slurmx.plan import NodeLayout, Point, expand, node_layout
from slurmx.slurm.cluster_check import NodeInfo, why_unrunnable
from slurmx.slurm.sbatch import ArrayPlan, render_sbatch, slurm_parameters
from slurmx.submit.resolved import check_submittable, resolve_points, why_not_runnable

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path("/work/shared/fixtures/inferencex")
LOCAL_KEY = "tiny-fp32-local-vllm-agentic-multinode"
KIMI_H200 = "kimik3-fp4-h200-vllm-agentic"


def _node(name: str, gpus: int = 8, mem_mb: int = 16000) -> NodeInfo:
    return NodeInfo(name, frozenset({"local"}), {"b300": gpus}, frozenset({"b300"}), mem_mb)


def test_the_local_key_asks_for_two_nodes_with_one_gpu_each() -> None:
    inputs = load_inputs(None, None, [LOCAL_KEY])
    (item,) = resolve_points(inputs.points, inputs)
    assert (item.request.nodes, item.request.gres) == (2, "gpu:b300:1")
    assert item.serving is not None and (item.serving.nodes, item.serving.ranks_per_node) == (2, 1)
    assert item.serving.engine_flags[-6:] == [
        "--tensor-parallel-size", "1", "--data-parallel-size", "2", "--max-num-seqs", "4",
    ]  # fmt: skip
    params = slurm_parameters(
        ArrayPlan(
            folder=Path("/tmp/x"),
            request=item.request,
            job_name="j",
            groups=[["p"]],
            array_parallelism=1,
            signal_delay_s=60,
        )  # fmt: skip
    )
    assert (params["nodes"], params["ntasks_per_node"]) == (2, 1)
    script = render_sbatch(ArrayPlan(folder=Path("/tmp/x"), request=item.request, job_name="j", groups=[["p"]],
                                     array_parallelism=1, signal_delay_s=60))  # fmt: skip
    assert "#SBATCH --nodes=2" in script and "#SBATCH --gres=gpu:b300:1" in script


@pytest.mark.skipif(not FIXTURES.exists(), reason="InferenceX fixtures not present")
def test_kimi_k3_h200_shapes_need_four_nodes() -> None:
    masters = load_masters([FIXTURES / "nvidia-master.yaml"])
    clusters = load_clusters(FIXTURES / "runners.yaml")
    points = [p for p in expand([KIMI_H200], masters, clusters)]
    layouts = {(p.prefill.num_worker, p.prefill.tp): node_layout(p, 8) for p in points if p.prefill}
    assert layouts[(2, 16)] == NodeLayout(nodes=4, gpus_per_node=8, ranks_per_node=0, ranks=2)
    assert layouts[(4, 8)] == NodeLayout(nodes=4, gpus_per_node=8, ranks_per_node=1, ranks=4)


@pytest.mark.skipif(not FIXTURES.exists(), reason="InferenceX fixtures not present")
def test_disaggregated_points_plan_but_are_not_submitted() -> None:
    masters = load_masters([FIXTURES / "nvidia-master.yaml"])
    clusters = load_clusters(FIXTURES / "runners.yaml")
    point = expand(["dsv4-fp4-gb200-dynamo-vllm-agentic-mtp-disagg"], masters, clusters)[0]
    assert point.scenario == "agentic-coding" and point.disagg
    assert node_layout(point, 8).nodes >= 2
    with pytest.raises(UserError, match="disaggregated multinode points cannot be submitted yet") as refused:
        check_submittable([point])
    assert "needs GPUs and RDMA" in str(refused.value)


def test_per_node_engine_flags_make_the_head_serve_and_the_others_headless() -> None:
    assert ENGINE.node_flags(NodePart(0, "10.0.0.1", 4000, 5000), 4, 1) == [
        "--data-parallel-size-local", "1", "--data-parallel-address", "10.0.0.1", "--data-parallel-rpc-port", "4000",
    ]  # fmt: skip
    flags = ENGINE.node_flags(NodePart(3, "10.0.0.1", 4000, 5000), 4, 2)
    assert flags[-3:] == ["--headless", "--data-parallel-start-rank", "6"] and "--nnodes" not in flags


def test_a_rank_wider_than_a_node_joins_one_torch_world_with_its_node_rank() -> None:
    head = ENGINE.node_flags(NodePart(0, "10.0.0.1", 4000, 5000), 2, 0)
    assert head == [
        "--data-parallel-address", "10.0.0.1", "--data-parallel-rpc-port", "4000",
        "--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port", "5000",
    ]  # fmt: skip
    assert ENGINE.node_flags(NodePart(1, "10.0.0.1", 4000, 5000), 2, 0) == [*head[:7], "1", *head[8:], "--headless"]


def test_a_rank_that_does_not_fill_whole_nodes_is_not_runnable() -> None:
    point = load_inputs(None, None, [LOCAL_KEY]).points[0]
    assert point.prefill is not None
    eight_gpu_nodes = ClusterProfile(available_cpu_dram_mib=1024, gpus_per_node=8)

    def with_tp(tp: int) -> Point:
        return dataclasses.replace(point, prefill=point.prefill.model_copy(update={"tp": tp, "num_worker": 1}))

    assert why_not_runnable(with_tp(12), eight_gpu_nodes) == (
        "a data-parallel rank of 12 GPUs does not fill whole 8-GPU nodes "
        "(vLLM's --nnodes launch gives each node an equal share of the rank)"
    )
    assert why_not_runnable(with_tp(16), eight_gpu_nodes) is None


def test_the_cluster_check_wants_enough_nodes_that_each_fit() -> None:
    inputs = load_inputs(None, None, [LOCAL_KEY])
    request = resolve_points(inputs.points, inputs)[0].request
    assert why_unrunnable(request, {"local"}, [_node("node01"), _node("node02")]) is None
    assert why_unrunnable(request, {"local"}, [_node("node01"), _node("node02", gpus=0)]) == (
        "the point needs 2 nodes with gpu:b300:1, 6G of memory and features b300 each in partition 'local'; "
        "1 have it (node01)"
    )


def test_each_node_advertises_its_own_address_and_a_single_node_engine_nothing() -> None:
    assert ENGINE.node_env(NodePart(1, "10.0.0.1", 4000, 5000, "10.0.0.2")) == {"VLLM_HOST_IP": "10.0.0.2"}
    assert ENGINE.node_env(NodePart(1, "10.0.0.1", 4000, 5000)) == {}  # unknown: vLLM's own choice


@pytest.mark.skipif(not FIXTURES.exists(), reason="InferenceX fixtures not present")
def test_a_recipes_time_limit_wins_over_its_profiles_on_that_recipes_points_only() -> None:
    # srtctl asks agg-h200-*.yaml's slurm.time_limit (8:00:00); the single-node branch's salloc asks 180
    keys = [KIMI_H200, "minimaxm3-fp8-h200-vllm-agentic-mtp"]
    inputs = load_inputs(None, None, keys, inferencex=FIXTURES / "repo-main")
    limits = {(i.point.config_key, i.request.time_limit_min) for i in resolve_points(inputs.points, inputs)}
    assert limits == {(KIMI_H200, 480), ("minimaxm3-fp8-h200-vllm-agentic-mtp", 180)}


@pytest.mark.skipif(not FIXTURES.exists(), reason="InferenceX fixtures not present")
def test_no_engine_is_given_up_on_before_its_own_ready_timeout() -> None:
    # the scripts wait for the engine unbounded; vLLM gives up after VLLM_ENGINE_READY_TIMEOUT_S (3 h on dsv4 mi355x)
    keys = ["dsv4-fp4-mi355x-vllm-agentic-mtp", "minimaxm3-fp4-b200-vllm-agentic-mtp"]
    inputs = load_inputs(None, None, keys, inferencex=FIXTURES / "repo-main")
    waits = {(i.point.config_key, i.serving.env["VLLM_ENGINE_READY_TIMEOUT_S"], i.serving.startup_timeout_s)
             for i in resolve_points(inputs.points, inputs) if i.serving is not None}  # fmt: skip
    assert waits == {
        ("dsv4-fp4-mi355x-vllm-agentic-mtp", "10800", 10800),
        ("minimaxm3-fp4-b200-vllm-agentic-mtp", "3600", 3600),
    }


def _workers(prefill: tuple[int, int, int], decode: tuple[int, int, int]) -> Point:
    """A multinode point by hand; each side as (workers, tp, pp)."""
    p, d = (WorkerSpec(num_worker=n, tp=tp, pp=pp, ep=1, dp_attn=False) for n, tp, pp in (prefill, decode))
    return Point(config_key="k", scenario="agentic-coding", image="i", model="m", model_prefix="p", precision="fp4",
                 framework="dynamo-vllm", runner="cluster:t", multinode=True, disagg=True, spec_decoding="none", conc=4,
                 prefill=p, decode=d)  # fmt: skip


@pytest.mark.parametrize(
    ("prefill", "decode", "layout"),
    [
        # one side empty: the other side's layout
        ((1, 8, 1), (0, 8, 1), NodeLayout(1, 8, 1, 1)),
        ((0, 8, 1), (2, 4, 1), NodeLayout(1, 8, 2, 2)),  # two 4-GPU workers tile one 8-GPU node
        ((3, 2, 1), (0, 8, 1), NodeLayout(1, 6, 3, 3)),  # three 2-GPU workers: 6 of a node's 8 GPUs
        ((5, 2, 1), (0, 8, 1), NodeLayout(2, 8, 4, 5)),  # five: four on the first node, one on the second
        ((2, 16, 1), (0, 8, 1), NodeLayout(4, 8, 0, 2)),  # a 16-GPU worker spans two whole nodes; two of them
        ((1, 4, 3), (0, 8, 1), NodeLayout(2, 8, 0, 1)),  # tp4 x pp3 = 12 GPUs: two nodes
        ((2, 6, 1), (0, 8, 1), NodeLayout(2, 6, 1, 2)),  # a 6-GPU worker leaves 2 of a node's GPUs: one per node
        ((0, 8, 1), (0, 8, 1), NodeLayout(0, 0, 0, 0)),  # no worker on either side: nothing asked
        # both sides: nodes added, the larger ask per node, ranks of both, none per node
        ((1, 4, 1), (2, 8, 1), NodeLayout(3, 8, 0, 3)),
        ((1, 8, 1), (1, 4, 1), NodeLayout(2, 8, 0, 2)),
    ],
)
def test_the_nodes_of_a_multinode_point_by_hand(
    prefill: tuple[int, int, int], decode: tuple[int, int, int], layout: NodeLayout
) -> None:
    assert node_layout(_workers(prefill, decode), 8) == layout
    assert layout.multinode is (layout.nodes > 1)


def test_a_single_node_point_is_one_node_of_its_servers_gpus() -> None:
    point = dataclasses.replace(_workers((1, 8, 1), (1, 8, 1)), multinode=False, disagg=False, prefill=None,
                                decode=None, tp=2, pp=2, pcp_size=1, exp_name="", point_id="")  # fmt: skip
    assert node_layout(point, 8) == NodeLayout(1, 4, 1, 1)
    assert not NodeLayout(1, 4, 1, 1).multinode and NodeLayout(2, 8, 0, 2).multinode


def test_a_multinode_point_has_no_single_server_of_its_own() -> None:
    """Its workers carry the parallelism: the point's own tp is 0 (no server of tp x pp x pcp GPUs: 0 GPUs), and
    the server its DRAM budget is for is one prefill worker."""
    (point,) = load_inputs(None, None, [LOCAL_KEY]).points[:1]
    assert point.multinode and point.prefill is not None
    assert (point.tp, point.pp, point.dcp_size, point.pcp_size, point.ep, point.dp_attn) == (0, 1, 1, 1, 1, False)
    assert point.gpus == 0
    assert point.server_gpus == point.prefill.tp * point.prefill.pp * point.prefill.pcp_size == 1
