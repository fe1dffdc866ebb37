"""Mooncake's config-file mode: each rank's segment from the point's budget, the file the node writes and names
to the engine, a budget too small refused, and the importer's reading of a segment formula back from captures."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from slurmx.backends.base import ArmCapture, ArmProblem
from slurmx.backends.mooncake import BACKEND as MOONCAKE
from slurmx.backends.mooncake import CONFIG_ENV, ConfigFile, MooncakeArm, segment_knobs, segment_size
from slurmx.config.master import KvOffloadBackend
from slurmx.engines.vllm import ENGINE as VLLM
from slurmx.engines.vllm import transfer_config
from slurmx.node.launch import write_files
from slurmx.plan import Point, dram_budget_gb
from slurmx.process import ServerPorts

PORTS = ServerPorts(engine=8888, named={"mooncake-master": 20888})
# minimaxm3_fp8_h100_mtp.sh's mooncake arm: 414 GiB of checkpoint page cache per node, 26 GiB --cpu-offload-gb
# and the 4 GiB local buffer per rank, the budget in whole GiB
H100 = ConfigFile(
    budget_unit="GiB", reserve_per_node=414, reserve_per_rank=30,
    settings={"mode": "embedded", "metadata_server": "P2PHANDSHAKE", "protocol": "rdma", "device_name": "",
              "enable_offload": False},
)  # fmt: skip


def _point(budget_gb: int, tp: int = 8) -> Point:
    return Point(
        config_key="k", scenario="agentic-coding", image="img", model="m", model_prefix="p", precision="fp8",
        framework="vllm", runner="cluster:t", multinode=False, disagg=False, spec_decoding="mtp", conc=6, tp=tp,
        kv_offloading="dram", kv_offload_backend=KvOffloadBackend(name="mooncake", version="0.3.11.post1"),
        total_cpu_dram_gb=budget_gb,
    )  # fmt: skip


def test_the_h100_points_segment_is_the_scripts_figure_by_hand() -> None:
    # h100-dgxc: 2,063,837 MiB x 0.80 -> 1731 GB; 1731e9 B = 1612 whole GiB; (1612 - 414) // 8 = 149; 149 - 30 = 119
    budget = dram_budget_gb(2_063_837, 8, 0.80, 8)
    assert budget == 1731
    assert segment_size(_point(budget), H100) == 119
    spec = MOONCAKE.spec(MooncakeArm(config_file=H100, load_failure_policy=None), _point(budget))
    assert spec.per_rank_gb == 119
    # in GB and with no reserves, a rank's share of the budget (the Kimi-K3 B300 script's: 2223 // 8)
    assert segment_size(_point(2223), ConfigFile()) == 277


def test_the_node_writes_the_config_file_and_names_it_to_the_engine(tmp_path: Path) -> None:
    arm = MooncakeArm(config_file=H100, load_failure_policy=None, connector_settings={"load_async": True})
    spec = MOONCAKE.spec(arm, _point(1731))
    (written,) = MOONCAKE.engine_files(spec, PORTS, tmp_path / "point")
    assert (written.env, written.path) == (CONFIG_ENV, tmp_path / "point" / "mooncake_config.json")
    from slurmx.process import Process

    write_files(Process("engine", ["vllm"], {written.env: str(written.path)}, files={str(written.path): written.text}))
    assert json.loads(written.path.read_text()) == {
        "master_server_address": "127.0.0.1:20888", "global_segment_size": "119GB", "local_buffer_size": "4GB",
        "mode": "embedded", "metadata_server": "P2PHANDSHAKE", "protocol": "rdma", "device_name": "",
        "enable_offload": False,
    }  # fmt: skip
    offload = MOONCAKE.offload(spec, PORTS, VLLM.name)
    assert offload is not None and transfer_config(offload) == {  # the connector carries its own settings only
        "kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"load_async": True},
    }  # fmt: skip


def test_a_budget_the_reserves_leave_nothing_of_is_refused() -> None:
    with pytest.raises(ArmProblem) as caught:
        MOONCAKE.spec(MooncakeArm(config_file=H100), replace(_point(700), exp_name="p_tp8_conc6"))
    # 700 GB = 651 GiB; (651 - 414) // 8 - 30 = -1
    assert (caught.value.field, caught.value.message) == (
        ("config-file",),
        "p_tp8_conc6: a 700 GB budget less the reserves leaves each of 8 ranks a -1 GiB segment",
    )


def test_a_recipe_with_a_budget_too_small_is_a_one_line_error(tmp_path: Path) -> None:
    from slurmx.recipes.load import load_recipes
    from slurmx.recipes.resolve import resolve

    recipe = Path(__file__).parents[2] / "jobs" / "minimaxm3_fp8_h100_vllm_mtp.yaml"
    (tmp_path / recipe.name).write_text(recipe.read_text())
    recipes = load_recipes(tmp_path)
    point = replace(_point(700), model="MiniMaxAI/MiniMax-M3-MXFP8", model_prefix="minimaxm3", image="vllm/vllm-openai:v0.27.1",
                    runner="cluster:h100-dgxc", config_key="minimaxm3-fp8-h100-vllm-agentic-mtp")  # fmt: skip
    with pytest.raises(Exception) as caught:
        resolve(point, recipes)
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    assert message.startswith(f"{tmp_path / recipe.name}:") and "arms.mooncake.config-file:" in message
    assert "leaves each of 8 ranks a -1 GiB segment" in message


def test_the_importer_reads_the_formula_back_only_where_the_captures_pin_it() -> None:
    h100 = [(p, segment_size(p, H100)) for p in (_point(b) for b in range(1731, 1720, -1))]
    far = [(p, segment_size(p, H100)) for p in (_point(1731 - 128), _point(1731 - 256), _point(1731, tp=4))]
    assert segment_knobs([*h100, *far]) == {"budget-unit": "GiB", "reserve-per-node": 414, "reserve-per-rank": 30}
    # one budget on one TP: many splits fit, and the importer says so rather than pick one
    with pytest.raises(ValueError, match="reserve splits"):
        segment_knobs(h100[:1])
    with pytest.raises(ValueError, match="follows no"):
        segment_knobs([(_point(1731), 119), (_point(1731 - 256), 119)])


def test_knobs_from_the_captured_config_file() -> None:
    points = [_point(1731), _point(1731 - 256), _point(1731, tp=4), *(_point(1731 - d) for d in range(1, 10))]
    config = {**H100.settings, "master_server_address": "127.0.0.1:20888", "local_buffer_size": "4GB"}
    handed = [
        ArmCapture(
            {CONFIG_ENV: json.dumps({**config, "global_segment_size": f"{segment_size(p, H100)}GB"})},
            {"mooncake-master": {"--port": 20888, "--eviction_ratio": 0.1}},
            {"mooncake-transfer-engine-cuda13": "mooncake-transfer-engine-cuda13==0.3.11.post1"},
        )
        for p in points
    ]
    connector = {
        "kv_connector": "MooncakeStoreConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"load_async": True},
    }
    knobs = MOONCAKE.knobs_from_connector([connector] * len(points), points, handed)
    assert knobs == {
        "load-failure-policy": None, "master-flags": {"--eviction_ratio": 0.1},
        "distribution": "mooncake-transfer-engine-cuda13",
        "config-file": {"budget-unit": "GiB", "reserve-per-node": 414, "reserve-per-rank": 30, "settings": H100.settings},
        "connector-settings": {"load_async": True},
    }  # fmt: skip
    # and the arm they make rebuilds the same file and connector
    arm = MooncakeArm.model_validate(knobs)
    assert arm.config_file == H100


def test_the_capture_reads_the_points_clusters_rdma_rail_not_this_machines(tmp_path: Path) -> None:
    from slurmx.upstream.capture import _host_reads

    script = "grep -q ACTIVE /sys/class/infiniband/mlx5_0/ports/1/state && echo rail"
    for runner, expect in (("cluster:b300-nv", "rail\n"), ("cluster:h100-dgxc", "")):
        bin_dir = tmp_path / runner.removeprefix("cluster:") / "bin"  # no ":" on PATH
        bin_dir.mkdir(parents=True)
        _host_reads(bin_dir, bin_dir.parent / "root", runner)
        run = subprocess.run(["bash", "-c", script], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, capture_output=True,
                             text=True, check=False)  # fmt: skip
        assert run.stdout == expect, (runner, run.stdout, run.stderr)
