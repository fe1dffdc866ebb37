"""The synthetic agentic trace, and the arms that are rendered but cannot run here (vllm-simple, mooncake)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from slurmx.config.load import load_clusters, load_masters
from slurmx.node import provision
from slurmx.node.launch import launch_plan
from slurmx.node.trace import synthetic_trace
from slurmx.plan import expand
from slurmx.process import ServerPorts
from slurmx.recipes.load import load_recipes
from slurmx.recipes.model import Replay
from slurmx.recipes.resolve import resolve
from slurmx.runtimes import runtime_for

ROOT = Path(__file__).resolve().parents[2]
PORTS = ServerPorts(
    engine=8888, named={"lmcache": 20888, "lmcache-http": 21888, "mooncake-master": 22888, "mooncake-metrics": 23888}
)


def test_trace_sessions_share_a_prefix_and_grow_turn_by_turn() -> None:
    replay = Replay(
        kind="synthetic",
        sessions_per_conc=2,
        turns=3,
        first_turn_tokens=600,
        shared_prefix_tokens=512,
        turn_delta_tokens=100,
        block_tokens=128,
    )
    rows = synthetic_trace(replay, conc=2)
    assert rows == synthetic_trace(replay, conc=2)  # deterministic
    assert len(rows) == 2 * 2 * 3
    firsts = [r for i, r in enumerate(rows) if i % 3 == 0]
    assert {tuple(r["hash_ids"][:4]) for r in firsts} == {(0, 1, 2, 3)}  # 512 shared tokens = 4 blocks
    assert len({r["hash_ids"][-1] for r in firsts}) == 4  # and then each session its own
    later = [r for i, r in enumerate(rows) if i % 3]
    assert all(r["input_length"] < 200 for r in later)  # per-turn deltas: the context grows by them
    all_ids = [h for r in rows for h in r["hash_ids"][4 if r in firsts else 0 :]]
    assert len(all_ids) == len(set(all_ids))
    assert set(rows[0]) == {"session_id", "input_length", "output_length", "hash_ids", "delay"}


def test_vllm_simple_and_mooncake_arms_render_with_their_budgets(tmp_path: Path) -> None:
    master = yaml.safe_load((ROOT / "configs/nvidia-master.yaml").read_text())
    key = dict(master["kimik3-fp4-b300-vllm-agentic-dspark-lmcache"])
    key["scenarios"] = {"agentic-coding": [{"dram-utilization": 0.63, "search-space": [
        {"tp": 8, "ep": 1, "spec-decoding": "mtp", "kv-offloading": "dram", "kv-offload-backend": {"name": name}, "conc-list": [4]}
        for name in ("vllm-simple", "mooncake")
    ]}]}  # fmt: skip
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"arms": key}))
    masters = load_masters([tmp_path / "m.yaml"])
    clusters = load_clusters(ROOT / "configs/clusters.yaml")
    recipes = load_recipes(ROOT / "jobs")
    simple, mooncake = expand(["arms"], masters, clusters)
    runtime = runtime_for(clusters.profiles["cluster:b300-nv"], simple.image)

    plan = launch_plan(resolve(simple, recipes), PORTS, runtime)
    simple_argv = argv = plan.engine.argv
    connector = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert connector["kv_connector"] == "SimpleCPUOffloadConnector"
    assert connector["kv_connector_extra_config"]["cpu_bytes_to_use_per_rank"] == 236_125_000_000  # 1889e9 B / 8
    assert [p.name for p in plan.servers] == ["engine"]
    assert "PYTHONPATH" not in plan.engine.env  # the local stack's shim never reaches a production render

    plan = launch_plan(resolve(mooncake, recipes), PORTS, runtime)
    assert [p.name for p in plan.servers] == ["mooncake-master", "engine"]
    assert "mooncake_master --port 22888 --rpc_address 127.0.0.1 --metrics_port 23888" in shlex.join(
        plan.servers[0].argv
    )
    argv = plan.engine.argv
    connector = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert connector["kv_connector"] == "MooncakeStoreConnector"
    assert connector["kv_load_failure_policy"] == "recompute"
    assert connector["kv_connector_extra_config"]["global_segment_size_gb"] == 236.125  # 1889 GB / 8
    mooncake_argv = argv
    for arm_argv in (simple_argv, mooncake_argv):  # every arm keeps the base's tool-call flags
        assert "--enable-auto-tool-choice" in arm_argv and "--tool-call-parser" in arm_argv


def test_the_local_vllm_simple_arm_runs_vllms_connector_with_the_stacks_shim_on_the_engine_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLURMX_STACK", "/srv/stack")
    masters = load_masters([ROOT / "configs/local-master.yaml"])
    clusters = load_clusters(ROOT / "configs/clusters.yaml")
    points = expand(["tiny-fp32-local-vllm-agentic-lmcache"], masters, clusters)
    simple = next(p for p in points if p.backend_name == "vllm-simple")
    spec = resolve(simple, load_recipes(ROOT / "jobs"))
    plan = launch_plan(spec, PORTS, runtime_for(clusters.profiles["cluster:local"], simple.image))
    argv = plan.engine.argv
    connector = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert connector == {"kv_connector": "SimpleCPUOffloadConnector", "kv_role": "kv_both",
                         "kv_connector_extra_config": {"cpu_bytes_to_use_per_rank": 2 * 10**9}}  # fmt: skip
    # scripts/local-stack.sh's shim, then its Mooncake site
    assert plan.engine.env["PYTHONPATH"] == "/srv/stack/shims/vllm-cpu-offload:/srv/stack/mooncake-site"
    assert spec.block_size == 128  # what turns the connector's block counters into tokens


def test_the_local_mooncake_arm_runs_the_stacks_master_and_the_config_that_worked_by_hand(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SLURMX_STACK", "/srv/stack")
    masters = load_masters([ROOT / "configs/local-master.yaml"])
    clusters = load_clusters(ROOT / "configs/clusters.yaml")
    points = expand(["tiny-fp32-local-vllm-agentic-lmcache"], masters, clusters)
    moon = [p for p in points if p.backend_name == "mooncake"]
    assert [p.conc for p in moon] == [2, 4]
    spec = resolve(moon[0], load_recipes(ROOT / "jobs"))
    runtime = runtime_for(clusters.profiles["cluster:local"], moon[0].image)
    plan = launch_plan(spec, PORTS, runtime, run_dir=tmp_path)
    master, engine = plan.servers
    assert master.argv == ["/srv/stack/mooncake-site/mooncake/mooncake_master", "--port", "22888",
                           "--rpc_address", "127.0.0.1", "--metrics_port", "23888"]  # fmt: skip
    argv = engine.argv
    assert json.loads(argv[argv.index("--kv-transfer-config") + 1]) == {
        "kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {},
    }  # fmt: skip
    # docs/local-stack.md's config file and env (the 2 GB budget: a 1 GB segment and a 1 GB local buffer)
    path = engine.env["MOONCAKE_CONFIG_PATH"]
    assert json.loads(engine.files[path]) == {
        "master_server_address": "127.0.0.1:22888", "global_segment_size": "1GB", "local_buffer_size": "1GB",
        "metadata_server": "P2PHANDSHAKE", "protocol": "tcp", "device_name": "",
    }  # fmt: skip
    assert engine.env["VLLM_HOST_IP"] == "127.0.0.1"
    assert engine.env["PYTHONPATH"] == "/srv/stack/shims/vllm-cpu-offload:/srv/stack/mooncake-site"
    # the import check sees the engine's path, else mooncake.store (outside the venv) fails it
    checks = [s for s in provision.plan(spec, runtime) if s.item == "import-check mooncake.store"]
    assert [s.process.env.get("PYTHONPATH") for s in checks] == [engine.env["PYTHONPATH"]]


def _routed_plan(tmp_path: Path, router: dict[str, str] | None):  # type: ignore[no-untyped-def]
    master = yaml.safe_load((ROOT / "configs/nvidia-master.yaml").read_text())
    key = dict(master["dsv4-fp4-b200-vllm-agentic-lmcache"])
    entry = {"tp": 8, "ep": 8, "dp-attn": True, "kv-offloading": "dram", "kv-offload-backend": {"name": "lmcache"},
             "conc-list": [16]}  # fmt: skip
    if router:
        entry["router"] = router
    key["scenarios"] = {"agentic-coding": [{"dram-utilization": 0.8, "search-space": [entry]}]}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"routed": key}))
    masters = load_masters([tmp_path / "m.yaml"])
    clusters = load_clusters(ROOT / "configs/clusters.yaml")
    (point,) = expand(["routed"], masters, clusters)
    spec = resolve(point, load_recipes(ROOT / "jobs"))
    ports = ServerPorts(engine=8888, engine_behind_router=8889, router_metrics=18888,
                        named={"lmcache": 20888, "lmcache-http": 21888})  # fmt: skip
    return spec, launch_plan(spec, ports, runtime_for(clusters.profiles["cluster:b200-dgxc"], point.image))


def test_a_configured_router_fronts_the_engine_and_leaves_its_flags_alone(tmp_path: Path) -> None:
    spec, plan = _routed_plan(tmp_path, {"name": "vllm-router", "version": "0.1.9"})
    assert [p.name for p in plan.servers] == ["lmcache", "engine", "router"]
    engine = plan.engine.argv
    assert "--port 8889" in shlex.join(engine) and plan.engine.health_url == "http://127.0.0.1:8889/health"
    # every engine flag of the DEP point is there: parallelism, tool calls, max-num-seqs, the EP flags ...
    for flag in ("--data-parallel-size", "--enable-expert-parallel", "--tool-call-parser", "--enable-auto-tool-choice",
                 "--max-num-seqs", "--moe-backend", "--kv-cache-dtype", "--kv-transfer-config"):  # fmt: skip
        assert flag in engine, flag
    # ... and no router flag reaches it
    for flag in ("--policy", "--request-timeout-secs", "--intra-node-data-parallel-size", "--disable-retries"):
        assert flag not in engine, flag
    router = shlex.join(plan.servers[-1].argv)
    assert "vllm-router --host 127.0.0.1 --port 8888 --worker-urls http://127.0.0.1:8889" in router
    assert "--intra-node-data-parallel-size 8" in router and "--policy consistent_hash" in router
    assert "--prometheus-port 18888" in router
    assert spec.router is not None and spec.router.version == "0.1.9"  # the config's pin wins
    assert plan.engine_url == "http://127.0.0.1:8888"  # the replay goes through the router


def test_every_dep_point_gets_the_session_sticky_router(tmp_path: Path) -> None:
    """The upstream dsv4 script starts vllm-router whenever DP_ATTENTION=true, named in the config or not."""
    spec, plan = _routed_plan(tmp_path, None)
    assert spec.router is not None and spec.router.version == "0.1.14"
    assert [p.name for p in plan.servers] == ["lmcache", "engine", "router"]
    assert spec.router.replay_env == {"AIPERF_HTTP_X_SESSION_ID_FROM_CORRELATION_ID": "1"}
