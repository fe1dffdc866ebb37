"""Each rank's share of a point's DRAM budget, and points with pp or pcp-size above 1, against figures worked by
hand and against InferenceX's own arithmetic: the shell lines of its workflow and scripts (the fixtures), run by
bash with the point's TP, PP_SIZE, PCP_SIZE and TOTAL_CPU_DRAM_GB."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmx.backends.mooncake import BACKEND as MOONCAKE
from slurmx.backends.mooncake import ConfigFile, MooncakeArm
from slurmx.config.load import load_clusters, load_masters
from slurmx.node.launch import launch_plan
from slurmx.plan import Point, expand
from slurmx.process import ServerPorts
from slurmx.recipes.load import Recipes, load_recipes
from slurmx.recipes.resolve import resolve
from slurmx.runtimes import runtime_for
from slurmx.submit.resolved import point_request

ROOT = Path(__file__).resolve().parents[2]
PORTS = ServerPorts(
    engine=8888, named={"lmcache": 20888, "lmcache-http": 21888, "mooncake-master": 22888, "mooncake-metrics": 23888}
)
WORKFLOW = "repo-main/.github/workflows/benchmark-tmpl.yml"  # the launch step's GPU_COUNT
AGENTIX = "scripts/dsv4_fp4_b200_vllm.lmcache-agentix-381f4c2b4.sh"  # GPU_COUNT default, Mooncake, LMCache's L1
DSV4_B300 = "repo-main/benchmarks/single_node/agentic/dsv4_fp4_b300_vllm_mtp.sh"  # SimpleCPUOffload bytes per rank
# (tp, pp, pcp-size) of the single-node points below; every one fits an 8-GPU node
SHAPES = ((8, 1, 1), (4, 1, 1), (2, 1, 1), (4, 2, 1), (2, 1, 2), (2, 2, 2))


def shell_line(fixtures: Path, relative: str, name: str) -> str:
    """The one line of an InferenceX file that assigns `name` by shell arithmetic (leading blanks and `export` off)."""
    found = [
        line.strip().removeprefix("export ")
        for line in (fixtures / relative).read_text().splitlines()
        if re.match(rf"\s*(export\s+)?{name}=\"?\$(\(\(|\{{)", line)
    ]
    assert len(found) == 1, (relative, name, found)
    return found[0]


def inferencex(fixtures: Path, point: Point, *names: str) -> dict[str, int]:
    """InferenceX's figures for a point: the workflow's GPU_COUNT, then the scripts' lines, evaluated by bash."""
    lines = [
        shell_line(fixtures, WORKFLOW, "GPU_COUNT"),
        shell_line(fixtures, AGENTIX, "GPU_COUNT"),  # keeps the workflow's GPU_COUNT (its own default only when unset)
        shell_line(fixtures, AGENTIX, "PER_RANK_GB"),
        shell_line(fixtures, AGENTIX, "LMCACHE_L1_SIZE_GB"),
        shell_line(fixtures, DSV4_B300, "CPU_BYTES_PER_RANK"),
    ]
    env = {
        "TP": point.tp,
        "PP_SIZE": point.pp,
        "PCP_SIZE": point.pcp_size,
        "TOTAL_CPU_DRAM_GB": point.total_cpu_dram_gb,
    }
    script = "\n".join([*(f"{k}={v}" for k, v in env.items()), *lines, *(f'echo "{n}=${n}"' for n in names)])
    out = subprocess.run(["bash", "-euc", script], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split("=") for line in out.split())}


def plan_points(tmp_path: Path, key: str, utilization: float, backends: tuple[str, ...]) -> list[Point]:
    """The shipped key's points at each of SHAPES and backends, planned as slurmx plans them."""
    master = yaml.safe_load((ROOT / "configs/nvidia-master.yaml").read_text())
    entry: dict[str, Any] = dict(master[key])
    spec = {"spec-decoding": "mtp"} if "kimik3" in key else {}
    entry["scenarios"] = {"agentic-coding": [{"dram-utilization": utilization, "search-space": [
        {"tp": tp, "pp": pp, "pcp-size": pcp, "ep": 1, **spec, "kv-offloading": "dram",
         "kv-offload-backend": {"name": name}, "conc-list": [4]}
        for name in backends for tp, pp, pcp in SHAPES
    ]}]}  # fmt: skip
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({key: entry}))
    return expand([key], load_masters([tmp_path / "m.yaml"]), load_clusters(ROOT / "configs/clusters.yaml"))


@pytest.fixture(scope="module")
def recipes() -> Recipes:
    return load_recipes(ROOT / "jobs")


# 2,964,436 MiB on b300-nv and 3,095,781 MiB on b200-dgxc are both over InferenceX's cap of 2,861,022 MiB;
# 2,861,022 x 1,048,576 B = 2,999,999,004,672 B, i.e. 2,999.999 GB, times the utilization and the share of 8 GPUs:
# at 0.63 (kimik3 b300): 8 GPUs 1,889.999 -> 1889; 4 GPUs 944.9997 -> 944; 2 GPUs 472.4998 -> 472
# at 0.80 (dsv4 b200):   8 GPUs 2,399.999 -> 2399; 4 GPUs 1,199.9996 -> 1199; 2 GPUs 599.9998 -> 599
BUDGET_063 = {8: 1889, 4: 944, 2: 472}
BUDGET_080 = {8: 2399, 4: 1199, 2: 599}


def test_budgets_follow_the_servers_gpus_tp_x_pp_x_pcp(tmp_path: Path) -> None:
    points = plan_points(tmp_path, "kimik3-fp4-b300-vllm-agentic-dspark-lmcache", 0.63, ("vllm-simple",))
    assert {(p.tp, p.pp, p.pcp_size): p.total_cpu_dram_gb for p in points} == {
        (8, 1, 1): 1889, (4, 1, 1): 944, (2, 1, 1): 472, (4, 2, 1): 1889, (2, 1, 2): 944, (2, 2, 2): 1889,
    }  # fmt: skip
    assert all(p.total_cpu_dram_gb == BUDGET_063[p.tp * p.pp * p.pcp_size] for p in points)


def test_vllm_simple_bytes_per_rank_are_inferencexs(tmp_path: Path, recipes: Recipes, fixtures: Path) -> None:
    points = plan_points(tmp_path, "kimik3-fp4-b300-vllm-agentic-dspark-lmcache", 0.63, ("vllm-simple",))
    # by hand: the budget in bytes over the server's GPU ranks
    by_hand = {
        (8, 1, 1): 236_125_000_000,  # 1889e9 / 8
        (4, 1, 1): 236_000_000_000,  # 944e9 / 4
        (2, 1, 1): 236_000_000_000,  # 472e9 / 2
        (4, 2, 1): 236_125_000_000,  # 1889e9 / 8: the pipeline's ranks hold their share too
        (2, 1, 2): 236_000_000_000,  # 944e9 / 4
        (2, 2, 2): 236_125_000_000,  # 1889e9 / 8
    }
    for point in points:
        settings = connector(point, recipes)["kv_connector_extra_config"]
        assert settings == {"cpu_bytes_to_use_per_rank": by_hand[(point.tp, point.pp, point.pcp_size)]}
        assert (
            settings["cpu_bytes_to_use_per_rank"]
            == inferencex(fixtures, point, "CPU_BYTES_PER_RANK")["CPU_BYTES_PER_RANK"]
        )


def test_mooncake_segments_per_rank(tmp_path: Path, recipes: Recipes, fixtures: Path) -> None:
    points = plan_points(tmp_path, "kimik3-fp4-b300-vllm-agentic-dspark-lmcache", 0.63, ("mooncake",))
    # connector mode keeps three decimals of the GB share (1889 / 8 = 236.125); a config file holds whole GB,
    # the scripts' integer division (1889 // 8 = 236)
    by_hand = {(8, 1, 1): 236.125, (4, 1, 1): 236.0, (2, 1, 1): 236.0, (4, 2, 1): 236.125, (2, 1, 2): 236.0,
               (2, 2, 2): 236.125}  # fmt: skip
    for point in points:
        settings = connector(point, recipes)["kv_connector_extra_config"]
        assert settings["global_segment_size_gb"] == by_hand[(point.tp, point.pp, point.pcp_size)]
        in_file = MOONCAKE.spec(MooncakeArm(config_file=ConfigFile()), point).per_rank_gb
        assert in_file == 236 == inferencex(fixtures, point, "PER_RANK_GB")["PER_RANK_GB"]


def test_lmcache_l1_is_derated_to_three_quarters_of_the_budget(
    tmp_path: Path, recipes: Recipes, fixtures: Path
) -> None:
    points = plan_points(tmp_path, "dsv4-fp4-b200-vllm-agentic-lmcache", 0.80, ("lmcache",))
    # int(budget x 0.75): 2399 -> 1799 (1799.25), 1199 -> 899 (899.25), 599 -> 449 (449.25)
    by_hand = {2399: 1799, 1199: 899, 599: 449}
    for point in points:
        assert point.total_cpu_dram_gb == BUDGET_080[point.tp * point.pp * point.pcp_size]
        (server,) = [s for s in plan(point, recipes).servers if s.name == "lmcache"]
        l1 = int(server.argv[server.argv.index("--l1-size-gb") + 1])
        assert (
            l1
            == by_hand[point.total_cpu_dram_gb]
            == inferencex(fixtures, point, "LMCACHE_L1_SIZE_GB")["LMCACHE_L1_SIZE_GB"]
        )


@pytest.mark.parametrize(
    ("shape", "parallel", "gpus"),
    [
        ((4, 2, 1), ["--tensor-parallel-size", "4", "--pipeline-parallel-size", "2"], 8),
        ((2, 1, 2), ["--tensor-parallel-size", "2", "--prefill-context-parallel-size", "2"], 4),
        (
            (2, 2, 2),
            ["--tensor-parallel-size", "2", "--pipeline-parallel-size", "2", "--prefill-context-parallel-size", "2"],
            8,
        ),
    ],
)
def test_a_pp_or_pcp_point_starts_every_rank_it_asks_slurm_for(
    tmp_path: Path, recipes: Recipes, shape: tuple[int, int, int], parallel: list[str], gpus: int
) -> None:
    """vLLM starts tp x pp x pcp ranks (InferenceX's scripts pass --prefill-context-parallel-size PCP_SIZE), the
    job asks for that many GPUs, and the budget those ranks share is sized for them."""
    clusters = load_clusters(ROOT / "configs/clusters.yaml")
    points = plan_points(tmp_path, "kimik3-fp4-b300-vllm-agentic-dspark-lmcache", 0.63, ("vllm-simple", "lmcache"))
    for point in (p for p in points if (p.tp, p.pp, p.pcp_size) == shape):
        argv = plan(point, recipes).engine.argv
        start = argv.index("--tensor-parallel-size")
        assert argv[start : start + len(parallel)] == parallel
        assert "--data-parallel-size" not in argv
        resolved = resolve(point, recipes)
        request = point_request(point, clusters.profiles["cluster:b300-nv"], resolved)
        assert (request.gres, request.nodes) == (f"gpu:{gpus}", 1)
        if point.backend_name == "lmcache":  # the Kimi-K3 recipe's L1 is the whole budget (fraction 1.0)
            (server,) = [s for s in plan(point, recipes).servers if s.name == "lmcache"]
            assert server.argv[server.argv.index("--l1-size-gb") + 1] == str(BUDGET_063[gpus])


def plan(point: Point, recipes: Recipes) -> Any:
    runtime = runtime_for(load_clusters(ROOT / "configs/clusters.yaml").profiles[point.runner], point.image)
    return launch_plan(resolve(point, recipes), PORTS, runtime)


def connector(point: Point, recipes: Recipes) -> dict[str, Any]:
    argv = plan(point, recipes).engine.argv
    config: dict[str, Any] = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    return config
