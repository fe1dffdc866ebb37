"""The Slurm request derives from the point: --mem from its host-DRAM need on a profile that does not take
whole nodes, the NUMA options from the profile's policy; the rendered sbatch script carries them; inside a
pyxis container the LMCache server is placed by numactl after the container flags; vLLM's --numa-bind next
to a pool the profile leaves unplaced is refused."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from slurmx.cli import main
from slurmx.config.clusters import NodeProfile
from slurmx.errors import UserError
from slurmx.inputs import load_inputs
from slurmx.node import numa
from slurmx.node.launch import launch_plan, placed
from slurmx.node.preflight import check_memory, memory_margin_bytes
from slurmx.process import Process, ServerPorts
from slurmx.runtimes import runtime_for
from slurmx.slurm import cluster_check
from slurmx.slurm.cluster_check import NodeInfo
from slurmx.slurm.request import SlurmRequest, mem_mb, point_mem, slurm_request
from slurmx.slurm.sbatch import render_sbatch
from slurmx.submit import stage as submit
from slurmx.submit.arrays import array_plans, largest_mem
from slurmx.submit.resolved import Resolved, host_memory_need_mb, point_request, resolve_points

LOCAL = "tiny-fp32-local-vllm-agentic-lmcache"
B300 = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"
ROOT = Path(__file__).resolve().parents[1]


def local_points() -> list[Resolved]:
    inputs = load_inputs(None, None, [LOCAL])
    return resolve_points(inputs.points, inputs)


def test_an_lmcache_point_asks_the_profile_memory_plus_its_pool_and_margin() -> None:
    items = local_points()
    pooled = next(r for r in items if r.point.kv_offloading == "dram")
    plain = next(r for r in items if r.point.kv_offloading == "none")
    need_mb, what = host_memory_need_mb(pooled.serving)
    assert need_mb > 0 and what.startswith("lmcache pool ")
    assert pooled.request.mem == f"{6 * 1024 + need_mb}M"
    assert plain.request.mem == "6G"  # no pool: the profile's figure as written


def test_a_vllm_simple_point_asks_for_the_cpu_pool_its_connector_json_sizes() -> None:
    """vLLM's own CPU offload pins its pool in the engine's ranks: the job asks Slurm for it as for LMCache's L1."""
    item = next(r for r in local_points() if r.point.backend_name == "vllm-simple")
    assert item.serving is not None
    plan = launch_plan(item.serving, ServerPorts(engine=8888), runtime_for(item.profile, item.point.image))
    argv = plan.engine.argv
    connector = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert connector["kv_connector"] == "SimpleCPUOffloadConnector"
    # what the engine's ranks allocate: the connector JSON's per-rank bytes on each of the point's GPUs
    pool = connector["kv_connector_extra_config"]["cpu_bytes_to_use_per_rank"] * item.serving.gpus
    need_mb, what = host_memory_need_mb(item.serving)
    assert pool > 0 and need_mb == (pool + memory_margin_bytes(pool)) // 2**20
    assert what.startswith(f"vllm-simple pool {pool // 2**20} MB + margin ")
    assert item.request.mem == f"{6 * 1024 + need_mb}M"
    assert check_memory(item.serving, pool) is not None  # preflight: the node must hold the pool and the margin
    assert check_memory(item.serving, pool + memory_margin_bytes(pool)) is None


def test_a_profile_that_takes_whole_nodes_keeps_mem_0() -> None:
    assert point_mem("0", 5000) == "0"
    assert point_mem("1G", 0) == "1G"
    assert point_mem("1G", 500) == "1524M"
    assert mem_mb(point_mem("16G", 2861)) == 16 * 1024 + 2861


def test_the_local_profile_policy_asks_gpus_with_their_cores_and_local_memory() -> None:
    for item in local_points():
        assert (item.request.gres_flags, item.request.mem_bind) == ("enforce-binding", "local")
    item = local_points()[0]
    interleave = item.profile.model_copy(update={"node": NodeProfile(numa_policy="interleave")})
    none = item.profile.model_copy(update={"node": NodeProfile(numa_policy="none")})
    request = point_request(item.point, interleave, item.serving)
    assert (request.gres_flags, request.mem_bind) == ("enforce-binding", None)
    request = point_request(item.point, none, item.serving)
    assert (request.gres_flags, request.mem_bind) == (None, None)


def test_one_array_for_both_arms_asking_the_largest_memory(tmp_path: Path) -> None:
    items = local_points()
    plans = array_plans(items, tmp_path)
    assert len(plans) == 1
    assert plans[0].request.mem == max((r.request.mem for r in items), key=mem_mb)
    assert largest_mem(["6G", "9005M", "1G"]) == "9005M" and largest_mem(["6G", "0"]) == "0"
    script = render_sbatch(plans[0])
    assert "#SBATCH --gres-flags=enforce-binding" in script
    assert f"#SBATCH --mem={plans[0].request.mem}" in script
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert "--mem-bind=local" in srun.split(" -u -m submitit")[0]


def test_sockets_per_node_reaches_sbatch_and_is_checked_against_the_nodes(tmp_path: Path) -> None:
    item = local_points()[0]
    assert item.profile.slurm is not None
    slurm = item.profile.slurm.model_copy(update={"sockets_per_node": 2})
    request = slurm_request(slurm, 1, numa_policy="bind")
    assert request.sockets_per_node == 2 and "sockets>=2" in request.summary()
    plan = array_plans([dataclasses.replace(item, request=request)], tmp_path)[0]
    assert "#SBATCH --sockets-per-node=2" in render_sbatch(plan)
    one_socket = NodeInfo("n1", frozenset({"local"}), {"b300": 8}, frozenset({"b300"}), 16000, sockets=1)
    two_sockets = dataclasses.replace(one_socket, name="n2", sockets=2)
    assert cluster_check.why_unrunnable(request, {"local"}, [one_socket, two_sockets]) is None
    reason = cluster_check.why_unrunnable(request, {"local"}, [one_socket])
    assert reason == "no node with gpu:b300:1 has 2 sockets (--sockets-per-node; at most 1)"


def test_a_request_larger_than_every_node_is_refused_with_the_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    item = next(r for r in local_points() if r.point.kv_offloading == "dram")
    need_mb, what = host_memory_need_mb(item.serving)
    asked = mem_mb(item.request.mem)
    node = NodeInfo("small1", frozenset({"local"}), {"b300": 8}, frozenset({"b300"}), asked - 1, sockets=2)
    monkeypatch.setattr(cluster_check, "query_partitions", lambda: {"local"})
    monkeypatch.setattr(cluster_check, "query_nodes", lambda: [node])
    monkeypatch.setattr(cluster_check, "query_kill_wait_s", lambda: None)
    with pytest.raises(UserError) as caught:
        submit.check_cluster([item], load_inputs(None, None, [LOCAL]))
    assert (
        f"host memory: the point needs {asked} MB (--mem={item.request.mem} = profile mem 6144 MB + {what}), "
        f"the largest node that fits its request (small1) has RealMemory={asked - 1} MB"
    ) in str(caught.value)
    assert need_mb == asked - 6144


def test_inside_a_pyxis_container_numactl_goes_after_the_container_flags() -> None:
    inputs = load_inputs(None, None, [B300])
    item = resolve_points(inputs.points, inputs)[0]
    runtime = runtime_for(item.profile, item.point.image)
    assert not runtime.tools_on_host
    wrapped = runtime.wrap(["lmcache", "server", "--port", "1"], "lmcache")
    prefix = ["numactl", "--cpunodebind=1", "--membind=1"]
    argv = placed(Process("lmcache", wrapped, {}), runtime, prefix).argv
    head = runtime.wrap([], "lmcache")
    assert argv == [*head, *prefix, "lmcache", "server", "--port", "1"]
    assert argv[0] == "srun" and argv.index("numactl") > argv.index("--export=ALL")
    # the engine is left to vLLM's own placement
    engine = Process("engine", runtime.wrap(["vllm", "serve"], "engine"), {})
    assert placed(engine, runtime, prefix) == engine
    # on the host (venv) the launcher simply goes first
    first = local_points()[0]
    venv = runtime_for(first.profile, first.point.image)
    assert venv.place(["lmcache", "server"], "lmcache", prefix) == [*prefix, "lmcache", "server"]


def test_in_a_container_the_placement_names_the_images_numactl() -> None:
    prefix, record = numa.placement("bind", {"PATH": "/nonexistent"}, in_container=True)
    assert record["tool"] == "numactl (inside the container)"
    assert prefix[:1] == ["numactl"] or prefix == []  # [] only where the node shows no NUMA node at all
    assert numa.review_prefix("interleave") == [
        "numactl",
        f"--cpunodebind={numa.REVIEW_NODES}",
        f"--interleave={numa.REVIEW_NODES}",
    ]
    assert numa.review_prefix("none") == []


def test_vllm_numa_bind_next_to_an_unplaced_pool_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The B200 recipe runs vLLM with --numa-bind; a profile with numa-policy none is refused, naming it."""
    clusters = (ROOT / "configs" / "clusters.yaml").read_text()
    marker = "    node:\n      # two-socket nodes"
    b200 = clusters.index("cluster:b200-dgxc:")
    at = clusters.index(marker, b200)
    policy_line = clusters.index("numa-policy: bind", at)
    edited = clusters[:policy_line] + "numa-policy: none" + clusters[policy_line + len("numa-policy: bind") :]
    (tmp_path / "clusters.yaml").write_text(edited)
    key = "dsv4-fp4-b200-vllm-agentic-lmcache"
    code = main(["render", key, "--clusters", str(tmp_path / "clusters.yaml")])
    err = capsys.readouterr().err
    assert code == 2
    line = edited[: edited.index("cluster:b200-dgxc:")].count("\n") + 1
    assert f"{tmp_path / 'clusters.yaml'}:{line}: hardware.cluster:b200-dgxc.node.numa-policy: none" in err
    assert "--numa-bind" in err and "set numa-policy bind or interleave" in err
    assert len(err.strip().splitlines()) == 1
    # the shipped profile (bind) renders
    assert main(["render", key]) == 0


def test_requests_from_before_the_numa_fields_still_load() -> None:
    old = {
        "partition": "local",
        "gpus": 1,
        "gres_type": "b300",
        "features": ["b300"],
        "mem": "6G",
        "exclusive": False,
        "time_limit_min": 30,
    }
    request = SlurmRequest.model_validate(old)
    assert (request.gres_flags, request.sockets_per_node, request.mem_bind) == (None, None, None)
