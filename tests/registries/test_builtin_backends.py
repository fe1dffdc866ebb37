"""The shipped backends' processes, connector JSON and node checks, field for field: what vLLM, the
LMCache server and the Mooncake master are started with decides whether a point runs at all."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Literal

import pytest

from slurmx.backends.base import GB, Arm, ArmCapture, ArmProblem, backend_version
from slurmx.backends.lmcache import BACKEND as LMCACHE
from slurmx.backends.lmcache import LMCacheArm, LMCacheSpec, check_shm, l1_fraction
from slurmx.backends.mooncake import BACKEND as MOONCAKE
from slurmx.backends.mooncake import MooncakeArm, MooncakeSpec
from slurmx.backends.vllm_simple import BACKEND as VLLM_SIMPLE
from slurmx.config.master import KvOffloadBackend, WorkerSpec
from slurmx.engines.vllm import ENGINE as VLLM
from slurmx.engines.vllm import transfer_config
from slurmx.plan import Point
from slurmx.process import Process, ServerPorts
from slurmx.runtimes.pyxis import PyxisRuntime
from slurmx.runtimes.venv import VenvRuntime
from slurmx.upstream.derive import parse_flags

PORTS = ServerPorts(
    engine=8888, named={"lmcache": 20888, "lmcache-http": 21888, "mooncake-master": 22888, "mooncake-metrics": 23888}
)
VENV = VenvRuntime(engine_python="/venvs/engine/bin/python", lmcache_bin="/venvs/engine/bin/lmcache",
                   mooncake_master_bin="/venvs/engine/bin/mooncake_master")  # fmt: skip


def _point(
    backend: Literal["lmcache", "mooncake", "vllm-simple"], budget_gb: int, tp: int = 8, version: str | None = "1.2"
) -> Point:
    return Point(
        config_key="k", scenario="agentic-coding", image="img", model="m", model_prefix="p", precision="fp4",
        framework="vllm", runner="cluster:t", multinode=False, disagg=False, spec_decoding="none", conc=4, tp=tp,
        kv_offloading="dram", kv_offload_backend=KvOffloadBackend(name=backend, version=version),
        total_cpu_dram_gb=budget_gb, exp_name="p_tp8_conc4",
    )  # fmt: skip


def _lmcache(server_flags: list[str], l1_size_gb: int = 4) -> LMCacheSpec:
    return LMCacheSpec(name="lmcache", l1_size_gb=l1_size_gb, l1_fraction=1.0, chunk_size=256,
                       transfer_mode="engine_driven", server_flags=server_flags)  # fmt: skip


def test_vllm_simple_connector_is_exactly_what_vllm_reads() -> None:
    arm = VLLM_SIMPLE.arm_model()
    spec = VLLM_SIMPLE.spec(arm, _point("vllm-simple", 1889))
    assert (spec.name, spec.version, spec.cpu_bytes_per_rank) == ("vllm-simple", "1.2", int(1889 * 1e9 / 8))
    assert VLLM_SIMPLE.spec(arm, _point("vllm-simple", 1889, version=None)).version is None
    assert VLLM_SIMPLE.servers(spec, PORTS, VENV, {}) == []  # vLLM's own connector: no server of its own
    offload = VLLM_SIMPLE.offload(spec, PORTS, VLLM.name)
    assert offload is not None and transfer_config(offload) == {
        "kv_connector": "SimpleCPUOffloadConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use_per_rank": 236_125_000_000},
    }


def test_mooncake_master_and_connector_are_exactly_what_vllm_and_mooncake_read() -> None:
    arm = MooncakeArm(master_flags={"--eviction-high-watermark-ratio": "0.9"})
    spec = MOONCAKE.spec(arm, _point("mooncake", 1889))
    assert (spec.version, spec.per_rank_gb, spec.load_failure_policy) == ("1.2", 236.125, "recompute")
    assert MOONCAKE.servers(spec, PORTS, VENV, {}) == [
        Process("mooncake-master", ["/venvs/engine/bin/mooncake_master", "--port", "22888", "--rpc_address", "127.0.0.1",
                                    "--metrics_port", "23888", "--eviction-high-watermark-ratio", "0.9"], {}, None, 60)
    ]  # fmt: skip
    # the tier's side: the master's own /metrics on its metrics port, scraped beside the engine's
    assert MOONCAKE.metrics_urls(spec, PORTS) == ["http://127.0.0.1:23888/metrics"]
    offload = MOONCAKE.offload(spec, PORTS, VLLM.name)
    assert offload is not None and transfer_config(offload) == {
        "kv_connector": "MooncakeStoreConnector",
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"master_server_address": "127.0.0.1:22888", "global_segment_size_gb": 236.125},
    }
    pyxis = PyxisRuntime(image="img.sqsh")
    (server,) = MOONCAKE.servers(spec, PORTS, pyxis, {})
    assert server.argv == pyxis.wrap(["mooncake_master", "--port", "22888", "--rpc_address", "127.0.0.1",
                                      "--metrics_port", "23888", "--eviction-high-watermark-ratio", "0.9"],
                                     "mooncake-master")  # fmt: skip
    assert "--job-name=slurmx-mooncake-master" in server.argv


def test_the_mooncake_pin_is_installed_as_the_arms_wheel_and_import_checked() -> None:
    from slurmx.node import provision
    from slurmx.recipes.model import Replay
    from slurmx.recipes.spec import ServingSpec

    def serving_spec_with(backend: MooncakeSpec) -> ServingSpec:
        return ServingSpec(
            recipe="r", recipe_file="r.yaml", recipe_sha256="0", launcher=["x"], model_flag=None, model="m",
            served_model_name="m", engine_flags=[], env={"PYTHONHASHSEED": "0"}, block_size=128, health_path="/h",
            startup_timeout_s=10, gpus=8, backend=backend, replay=Replay(kind="synthetic"), conc=2, duration_s=60,
        )  # fmt: skip

    runtime = PyxisRuntime(image="img")
    default = MOONCAKE.spec(MooncakeArm(), _point("mooncake", 1000, version="0.3.11.post1"))
    cuda13 = MOONCAKE.spec(MooncakeArm(distribution="mooncake-transfer-engine-cuda13"), _point("mooncake", 1000))
    steps = {s.item: s.process.argv for s in provision.plan(serving_spec_with(default), runtime)}
    assert steps["pip install mooncake-transfer-engine"][-1] == "mooncake-transfer-engine==0.3.11.post1"
    assert steps["version mooncake-transfer-engine"][-2:] == ["mooncake-transfer-engine", "0.3.11.post1"]
    assert steps["import-check mooncake.store"][-1] == "import mooncake.store"
    steps = {s.item: s.process.argv for s in provision.plan(serving_spec_with(cuda13), runtime)}
    assert steps["pip install mooncake-transfer-engine-cuda13"][-1] == "mooncake-transfer-engine-cuda13==1.2"


def test_mooncake_segment_per_rank_keeps_three_decimals() -> None:
    assert MOONCAKE.spec(MooncakeArm(), _point("mooncake", 1000, tp=3)).per_rank_gb == 333.333


def test_mooncake_segment_per_rank_divides_the_budget_over_every_gpu_rank_of_a_tp4xpp2_server() -> None:
    # eight ranks share the budget (dividing by tp alone asked for twice the budget)
    tp4pp2 = replace(_point("mooncake", 1000, tp=4), pp=2)
    assert MOONCAKE.spec(MooncakeArm(), tp4pp2).per_rank_gb == 125.0


def test_mooncake_segment_per_rank_of_a_multinode_point_follows_its_prefill_worker() -> None:
    #: the budget is one prefill worker's (tp is 0 on a multinode point: it divided by zero)
    worker = WorkerSpec(num_worker=2, tp=4, ep=1, dp_attn=False, pp=2)
    multinode = replace(_point("mooncake", 1000, tp=0), multinode=True, prefill=worker, decode=worker)
    assert MOONCAKE.spec(MooncakeArm(), multinode).per_rank_gb == 125.0
    assert VLLM_SIMPLE.spec(Arm(), multinode).cpu_bytes_per_rank == 125 * GB


def test_lmcache_server_reset_metrics_and_checks(tmp_path: Path) -> None:
    spec = _lmcache(["--eviction-policy", "LRU"])
    (server,) = LMCACHE.servers(spec, PORTS, VENV, {"PYTHONHASHSEED": "7"})
    assert server.name == "lmcache" and server.env == {
        "PYTHONUNBUFFERED": "1", "PYTHONHASHSEED": "7", "LMCACHE_DISABLE_BANNER": "1"}  # fmt: skip
    assert (server.health_url, server.ready_timeout_s) == ("http://127.0.0.1:21888/healthcheck", 600)
    assert LMCACHE.cache_reset_urls(spec, PORTS) == ["http://127.0.0.1:21888/cache/clear"]
    assert LMCACHE.metrics_urls(spec, PORTS) == ["http://127.0.0.1:21888/metrics"]
    assert LMCACHE.import_checks(spec)[0] == "lmcache.integration.vllm.lmcache_mp_connector"  # provisioning imports it
    assert LMCACHE.preflight(spec, VENV) == []  # process memory, no /dev/shm segment


def test_lmcache_l1_in_shm_must_fit_the_tmpfs(tmp_path: Path) -> None:
    assert _lmcache(["--shm-name", "l1", "--x", "y"]).shm_name() == "l1"
    assert _lmcache(["--x", "y", "--shm-name", "l1"]).shm_name() == "l1"
    assert _lmcache(["--shm-name"]).shm_name() == ""  # no value after it: not a name
    assert _lmcache(["--x", "y"]).shm_name() == ""
    free_gb = shutil.disk_usage(tmp_path).free / GB
    huge = _lmcache(["--shm-name", "l1"], l1_size_gb=int(free_gb) + 10)
    problem = check_shm(huge, tmp_path) or ""
    # free space in whole GiB as df -BG shows it; the pool may take 90% of it (InferenceX's MI355X rule)
    shown = re.fullmatch(
        rf"/dev/shm has (\d+) GiB free, the L1 pool needs {int(free_gb) + 10} GB \(over (\d+), 90%\)", problem
    )
    assert shown is not None, problem
    assert abs(int(shown.group(1)) - free_gb * GB / (1 << 30)) < 2.0  # others write to the same disk meanwhile
    assert int(shown.group(2)) == int(shown.group(1)) * 90 // 100
    assert check_shm(_lmcache(["--shm-name", "l1"], l1_size_gb=0), tmp_path) is None
    assert check_shm(_lmcache([], l1_size_gb=int(free_gb) + 10), tmp_path) is None


def test_lmcache_l1_that_rounds_to_zero_names_the_arm_field() -> None:
    arm = LMCacheArm(l1_fraction=0.5, chunk_size=256, transfer_mode="engine_driven")
    with pytest.raises(ArmProblem) as caught:
        LMCACHE.spec(arm, _point("lmcache", 1))
    assert (caught.value.field, caught.value.message) == (("l1-fraction",), "L1 of p_tp8_conc4 rounds to 0 GB of 1 GB")
    spec = LMCACHE.spec(arm, _point("lmcache", 5, version=None))
    assert (spec.l1_size_gb, spec.version) == (2, None)
    assert backend_version(_point("lmcache", 5)) == "1.2"


@pytest.mark.parametrize(
    "knobs",
    [
        {},
        {"size-setting": "cpu_bytes_to_use", "budget-unit": "GiB"},
        {"extra-settings": {"enable_cross_layers_blocks": "true"}},
        {"lazy-offload": True, "lazy-offload-dp-attn": False},
    ],
)
def test_vllm_simple_knobs_read_back_from_the_connector_they_build(knobs: dict[str, object]) -> None:
    """What the importer derives from a captured connector JSON is the arm that builds that JSON: on a TP8 point
    and on a TP4xPP2 one (eight ranks share the budget), for every sizing the arm has."""
    arm = VLLM_SIMPLE.arm_model.model_validate(knobs)
    points = [_point("vllm-simple", 1889), replace(_point("vllm-simple", 1000, tp=4), pp=2),
              replace(_point("vllm-simple", 1424, tp=4), dp_attn=True)]  # fmt: skip
    configs = []
    for point in points:
        offload = VLLM_SIMPLE.offload(VLLM_SIMPLE.spec(arm, point), PORTS, VLLM.name)
        assert offload is not None
        configs.append(transfer_config(offload))
    assert VLLM_SIMPLE.knobs_from_connector(configs, points) == knobs
    with pytest.raises(ValueError, match="no connector JSON"):
        VLLM_SIMPLE.knobs_from_connector([], [])


def test_a_ranks_share_passed_as_the_server_wide_size_is_read_as_the_per_rank_setting() -> None:
    """dsv4_fp4_b300_vllm_mtp.sh's cpu_bytes_to_use = budget / GPUs: vLLM divides that by the world size again;
    the importer reads it as what it means, the per-rank size (check then names the fix for review)."""
    points = [_point("vllm-simple", 1424, tp=4), replace(_point("vllm-simple", 2849, tp=8), dp_attn=True)]
    configs = [{"kv_connector": "SimpleCPUOffloadConnector", "kv_connector_extra_config": {
        "cpu_bytes_to_use": int(p.total_cpu_dram_gb * 1e9 / p.server_gpus), "lazy_offload": not p.dp_attn}}
        for p in points]  # fmt: skip
    knobs = VLLM_SIMPLE.knobs_from_connector(configs, points)
    assert knobs == {"lazy-offload": True, "lazy-offload-dp-attn": False}  # the default per-rank GB sizing
    specs = [VLLM_SIMPLE.spec(VLLM_SIMPLE.arm_model.model_validate(knobs), p) for p in points]
    assert [(s.size_setting, s.cpu_bytes_per_rank, s.lazy_offload) for s in specs] == [
        ("cpu_bytes_to_use_per_rank", 356_000_000_000, True),
        ("cpu_bytes_to_use_per_rank", 356_125_000_000, False),
    ]


def test_lmcache_per_rank_servers_split_the_pool_and_the_connector_lists_every_url() -> None:
    arm = LMCacheArm(l1_fraction=1.0, chunk_size=256, transfer_mode="lmcache_driven", servers="per-rank",
                     mq_timeout_s=6000.0, server_flags={"--max-workers": 2})  # fmt: skip
    spec = LMCACHE.spec(arm, _point("lmcache", 1947, tp=8))
    assert (spec.servers, spec.l1_size_gb, spec.shard_gb(), spec.host_memory_bytes()) == (8, 1947, 243, 1944 * GB)
    names = LMCACHE.ports_of(spec)
    assert names[:4] == ("lmcache.0", "lmcache-http.0", "lmcache.1", "lmcache-http.1") and len(names) == 16
    ports = ServerPorts(engine=8888, named={name: 30000 + i for i, name in enumerate(names)})
    servers = LMCACHE.servers(spec, ports, VENV, {"PYTHONHASHSEED": "0"})
    assert [s.name for s in servers] == [f"lmcache.{i}" for i in range(8)] == list(LMCACHE.server_names(spec))
    for i, server in enumerate(servers):
        argv = server.argv
        assert argv[argv.index("--port") + 1] == str(30000 + 2 * i)
        assert argv[argv.index("--http-port") + 1] == str(30001 + 2 * i)
        assert argv[argv.index("--l1-size-gb") + 1] == "243"
        assert server.health_url == f"http://127.0.0.1:{30001 + 2 * i}/healthcheck"
    offload = LMCACHE.offload(spec, ports, VLLM.name)
    assert offload is not None and dict(offload.settings) == {
        "lmcache.mp.server_urls": ",".join(f"tcp://127.0.0.1:{30000 + 2 * i}" for i in range(8)),
        "lmcache.mp.mq_timeout": 6000.0,
    }
    assert LMCACHE.metrics_urls(spec, ports) == [f"http://127.0.0.1:{30001 + 2 * i}/metrics" for i in range(8)]
    one = LMCACHE.spec(arm.model_copy(update={"servers": "one"}), _point("lmcache", 1947, tp=8))
    assert (one.servers, LMCACHE.ports_of(one), one.shard_gb()) == (1, ("lmcache", "lmcache-http"), 1947)
    with pytest.raises(ArmProblem) as caught:  # 7 GB over 8 servers leaves each 0 GB
        LMCACHE.spec(arm, _point("lmcache", 7, tp=8))
    assert caught.value.field == ("servers",)


def test_lmcache_knobs_rebuild_per_rank_servers_from_a_capture() -> None:
    points = [_point("lmcache", 299, tp=4), _point("lmcache", 298, tp=4), _point("lmcache", 235, tp=4)]
    flags = {"--host": "127.0.0.1", "--http-host": "127.0.0.1", "--chunk-size": 256,
             "--supported-transfer-mode": "lmcache_driven", "--max-workers": 2}  # fmt: skip
    handed = [ArmCapture(servers={f"lmcache.{i}": {**flags, "--port": 5555 + i, "--http-port": 8080 + i,
                                                   "--l1-size-gb": p.total_cpu_dram_gb // 4} for i in range(4)},
                         import_checks=("cupy",), measured=("/dev/shm",)) for p in points]  # fmt: skip
    urls = ",".join(f"tcp://127.0.0.1:{5555 + i}" for i in range(4))
    config = {"kv_connector": "LMCacheMPConnector", "kv_connector_extra_config": {"lmcache.mp.server_urls": urls}}
    knobs = LMCACHE.knobs_from_connector([config] * 3, points, handed)
    assert knobs == {"l1-fraction": 1.0, "servers": "per-rank", "chunk-size": 256, "transfer-mode": "lmcache_driven",
                     "server-flags": {"--max-workers": 2}, "import-check": ["cupy"], "shm-check": True}  # fmt: skip
    swapped = {**config, "kv_connector_extra_config": {"lmcache.mp.server_urls": ",".join(reversed(urls.split(",")))}}
    with pytest.raises(ValueError, match="rank order"):
        LMCACHE.knobs_from_connector([swapped] * 3, points, handed)


def test_lmcache_shm_check_refuses_a_pool_over_90_percent_of_free_shm(tmp_path: Path) -> None:
    free_gib = -(-shutil.disk_usage(tmp_path).free // (1 << 30))
    fits = LMCacheSpec(name="lmcache", l1_size_gb=free_gib * 90 // 100, l1_fraction=1.0, chunk_size=256,
                       transfer_mode="lmcache_driven", shm_check=True)  # fmt: skip
    assert check_shm(fits, tmp_path) is None
    over = fits.model_copy(update={"l1_size_gb": fits.l1_size_gb + 1})
    assert "90%" in (check_shm(over, tmp_path) or "")
    assert check_shm(over.model_copy(update={"shm_check": False}), tmp_path) is None  # no segment, no check


@pytest.mark.parametrize(
    "knobs",
    [
        {"l1-fraction": 0.75, "chunk-size": 1024, "transfer-mode": "lmcache_driven", "mq-timeout-s": 300,
         "server-flags": {"--l1-init-size-gb": 20, "--eviction-policy": "LRU", "--no-separate-object-groups": True}},
        {"l1-fraction": 0.5, "chunk-size": 256, "transfer-mode": "engine_driven"},
    ],
)  # fmt: skip
def test_lmcache_knobs_read_back_from_the_connector_and_server_they_build(knobs: dict[str, object]) -> None:
    """recipes import: the arm's knobs from what its backend builds on each point (the LMCacheMPConnector JSON,
    the server's flags), over the seed budget and the budgets its probes ask; the address and ports are slurmx's."""
    arm = LMCACHE.arm_model.model_validate(knobs)
    first = _point("lmcache", 2399)
    points = [first, *LMCACHE.probes(first)]
    configs, handed = [], []
    for point in points:
        spec = LMCACHE.spec(arm, point)
        offload = LMCACHE.offload(spec, PORTS, VLLM.name)
        assert offload is not None
        configs.append(transfer_config(offload))
        (server,) = LMCACHE.servers(spec, PORTS, VENV, {"PYTHONHASHSEED": "0"})
        handed.append(ArmCapture(servers={"lmcache": parse_flags(server.argv[server.argv.index("server") + 1 :])[1]}))
    assert LMCACHE.knobs_from_connector(configs, points, handed) == knobs
    with pytest.raises(ValueError, match="not captured on every point"):
        LMCACHE.knobs_from_connector(configs, points)
    configs[0]["kv_connector_extra_config"]["lmcache.mp.extra"] = 1
    with pytest.raises(ValueError, match="lmcache.mp.extra: the lmcache arm has no knob for it"):
        LMCACHE.knobs_from_connector(configs, points, handed)


def test_lmcache_l1_fraction_is_the_shortest_the_budgets_allow_or_refused() -> None:
    # the DeepSeek script's $((TOTAL_CPU_DRAM_GB * 3 / 4)) on the seed budget and two others
    budgets = [_point("lmcache", b) for b in (2399, 1199, 799)]
    assert l1_fraction([(p, 1, p.total_cpu_dram_gb * 3 // 4) for p in budgets]) == 0.75
    assert l1_fraction([(budgets[0], 1, 2399)]) == 1
    with pytest.raises(ValueError, match="follows no int"):  # a reserve off the budget is no fraction of it
        l1_fraction([(p, 1, p.total_cpu_dram_gb - 64) for p in budgets])


def test_a_mooncake_arm_may_not_pass_the_masters_own_ports_or_address() -> None:
    arm = MooncakeArm(master_flags={"--metrics_port": 9003, "-rpc_address": "0.0.0.0", "--eviction_ratio": 0.1})
    problems = MOONCAKE.check_arm(arm, {}, {}, 128)
    assert [(p.field, p.message) for p in problems] == [
        (("master-flags", "--metrics_port"), "--metrics_port is set by the backend"),
        (("master-flags", "-rpc_address"), "-rpc_address is set by the backend"),
    ]
