"""A multinode point on the real local cluster: one vLLM engine across node01 and node02 (the head
serving, node02 headless), the replay on the head, and every node torn down on every ending.
Processes are found by the job's env marker in /proc, never by name; both fake nodes share this host,
so one /proc scan covers both."""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from slurmx.node.multinode import node_address
from slurmx.results.schema import Result
from tests.helpers.jobs import wait_left_queue
from tests.stack.conftest import MULTINODE_RECIPE, StackEnv, job_processes, kill, process_with_arg

pytestmark = pytest.mark.stack

RECIPE = Path(MULTINODE_RECIPE).name


def _point_dir(env: StackEnv, point: dict[str, Any]) -> Path:
    return next(env.results.rglob(f"points/{point['point_id']}"))


def _ended(env: StackEnv, key: str) -> dict[str, Any]:
    return env.wait_for(
        key,
        lambda s: s[0]["state"] not in ("pending", "running") and s[0]["stage"] in ("done", "failed", "cancelled"),
        timeout_s=900,
    )[0]


def _in_replay_on_both_nodes(env: StackEnv, key: str) -> dict[str, Any]:
    """The point once its replay runs, with the headless rank of node02 found among the job's processes."""
    point = env.wait_for(key, lambda s: s[0]["stage"] == "replay" or s[0]["state"] in ("failed", "completed"))[0]
    assert point["stage"] == "replay", point
    time.sleep(3)
    headless = process_with_arg(point["job_id"], "--headless")
    assert headless is not None, job_processes(point["job_id"])
    # it advertises node02's address as Slurm knows it (NodeAddr), not its default route's interface
    environ = dict(e.split(b"=", 1) for e in Path(f"/proc/{headless}/environ").read_bytes().split(b"\0") if b"=" in e)
    assert environ.get(b"VLLM_HOST_IP") == node_address("node02").encode(), environ.get(b"VLLM_HOST_IP")
    return point


def _long_replay_running(env: StackEnv, key: str) -> dict[str, Any]:
    """The local multinode key with a replay long enough to strike in, submitted and replaying on both nodes."""
    env.recipe(RECIPE, **{"replay.sessions-per-conc": 24})
    env.multinode_key(key, [2])
    env.submit(key)
    return _in_replay_on_both_nodes(env, key)


def test_multinode_point_completes_with_processes_on_both_nodes(stack_env: StackEnv) -> None:
    stack_env.multinode_key("mn-done", [2])
    stack_env.submit("mn-done")
    point = _ended(stack_env, "mn-done")
    assert point["state"] == "completed", point
    pdir = _point_dir(stack_env, point)
    result = Result.model_validate(json.loads((pdir / "result.json").read_text()))
    assert result.slurmx is not None and result.slurmx.invalid_reason is None
    assert result.is_multinode and result.prefill_num_workers == 2 and result.num_gpus == 2
    assert result.slurmx.nodes == ["node01", "node02"]
    head = (pdir / "commands" / "engine.txt").read_text()
    worker = (pdir / "nodes" / "node02" / "commands" / "engine.txt").read_text()
    assert "# node: node01" in head and "--headless" not in head
    assert "# node: node02" in worker and "--headless" in worker and "--data-parallel-start-rank 1" in worker
    assert (pdir / "nodes" / "node02" / "logs" / "engine.log").stat().st_size > 0
    # both ranks served requests: the head's /metrics, as aiperf exported it, counts per engine
    exported = json.loads((pdir / "aiperf" / "server_metrics_export.json").read_text())
    served: dict[str, float] = {}
    for series in exported["metrics"]["vllm:request_success"]["series"]:
        engine = series["labels"]["engine"]
        served[engine] = served.get(engine, 0.0) + series["stats"]["total"]
    assert served.get("0", 0) > 0 and served.get("1", 0) > 0, served
    # the same split from the engine's own scrapes around the replay, in result.json and collect's table
    ranks = result.slurmx.requests_by_rank or {}
    assert sorted(ranks) == ["0", "1"] and min(ranks.values()) > 0, ranks
    code, out, _ = stack_env.slurmx("collect", "mn-done", "--results", str(stack_env.results))
    assert code == 0 and f"ran on node01, node02, requests by data-parallel rank 0:{ranks['0']} 1:{ranks['1']}" in out
    assert stack_env.wait_gone(point["job_id"]) == [], job_processes(point["job_id"])


def test_a_rank_over_two_nodes_runs_in_one_torch_world(stack_env: StackEnv) -> None:
    """TP2 with one stand-in GPU per node: vLLM's --nnodes/--node-rank launch, the head as the rank's
    torch.distributed master and node02 running the rank's second worker headless."""
    stack_env.multinode_key("mn-tp", [2], workers=1, tp=2)
    stack_env.submit("mn-tp")
    point = _ended(stack_env, "mn-tp")
    assert point["state"] == "completed", point
    pdir = _point_dir(stack_env, point)
    result = Result.model_validate(json.loads((pdir / "result.json").read_text()))
    assert result.slurmx is not None and result.slurmx.invalid_reason is None, result.slurmx
    assert result.slurmx.nodes == ["node01", "node02"] and result.num_gpus == 2
    head = (pdir / "commands" / "engine.txt").read_text()
    worker = (pdir / "nodes" / "node02" / "commands" / "engine.txt").read_text()
    assert "--tensor-parallel-size 2" in head and "--nnodes 2 --node-rank 0 --master-addr" in head
    assert "--nnodes 2 --node-rank 1 --master-addr" in worker and "--headless" in worker
    # node02 ran the rank's second tensor-parallel worker: vLLM's headless executor says so in its log
    assert "headless multiproc executor" in (pdir / "nodes" / "node02" / "logs" / "engine.log").read_text()
    assert stack_env.wait_gone(point["job_id"]) == [], job_processes(point["job_id"])


def test_multinode_scancel_during_replay_leaves_nothing_on_either_node(stack_env: StackEnv) -> None:
    point = _long_replay_running(stack_env, "mn-cancel")
    assert stack_env.slurmx("cancel", "mn-cancel", "--results", str(stack_env.results))[0] == 0
    point = _ended(stack_env, "mn-cancel")
    assert point["state"] == "cancelled", point
    assert stack_env.wait_gone(point["job_id"]) == [], job_processes(point["job_id"])
    assert wait_left_queue({point["job_id"].split("_")[0]}) == set()  # each node's body has written its record
    pdir = _point_dir(stack_env, point)
    assert (pdir / "teardown.json").exists() and (pdir / "nodes" / "node02" / "teardown.json").exists()


def test_worker_killed_on_the_second_node_fails_the_point_and_tears_down_the_head(stack_env: StackEnv) -> None:
    point = _long_replay_running(stack_env, "mn-fault")
    worker = process_with_arg(point["job_id"], "--headless")
    assert worker is not None
    kill(worker, signal.SIGKILL)
    point = _ended(stack_env, "mn-fault")
    assert point["state"] == "failed", point
    assert "node02: engine exited with signal SIGKILL" in (point["reason"] or ""), point
    assert stack_env.wait_gone(point["job_id"]) == [], job_processes(point["job_id"])
    node02 = json.loads((_point_dir(stack_env, point) / "nodes" / "node02.json").read_text())
    assert node02["state"] == "failed"


def _parent(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))


def test_a_node_task_killed_without_a_word_fails_the_point_by_its_heartbeat(stack_env: StackEnv) -> None:
    """node02's slurmx task SIGKILLed (no report, no teardown of its own): its heartbeat stops, the head
    fails the point naming the silent node and tears down; nothing of the job is left on either node."""
    point = _long_replay_running(stack_env, "mn-silent")
    rank = process_with_arg(point["job_id"], "--headless")
    assert rank is not None
    task = _parent(rank)  # the supervisor that started node02's rank: that node's slurmx task
    assert "submitit" in Path(f"/proc/{task}/cmdline").read_text(), Path(f"/proc/{task}/cmdline").read_text()
    kill(task, signal.SIGKILL)
    point = _ended(stack_env, "mn-silent")
    assert point["state"] == "failed", point
    assert re.search(r"node02: no heartbeat for \d+ s \(its task is gone\)", point["reason"] or ""), point
    assert stack_env.wait_gone(point["job_id"]) == [], job_processes(point["job_id"])


def test_an_lmcache_arm_runs_a_server_per_node_each_rank_on_its_own(stack_env: StackEnv) -> None:
    """The LMCache arm across nodes: each node starts its own LMCache server with its node's DRAM budget,
    and that node's engine rank carries the connector pointing at it."""
    stack_env.multinode_key("mn-lmcache", [2], arm="lmcache")
    stack_env.submit("mn-lmcache")
    point = _ended(stack_env, "mn-lmcache")
    pdir = _point_dir(stack_env, point)
    assert point["state"] == "completed", (point, (pdir / "state.json").read_text())
    for where, node in ((pdir, "node01"), (pdir / "nodes" / "node02", "node02")):
        server = (where / "commands" / "lmcache.txt").read_text()
        engine = (where / "commands" / "engine.txt").read_text()
        assert f"# node: {node}" in server and f"# node: {node}" in engine
        port = re.search(r" --port (\d+)", server)
        assert port is not None, server
        assert f'"lmcache.mp.port":{port.group(1)}' in engine, (node, engine[-400:])  # its own node's server
        assert (where / "logs" / "lmcache.log").stat().st_size > 0
    result = Result.model_validate(json.loads((pdir / "result.json").read_text()))
    assert result.slurmx is not None and result.slurmx.invalid_reason is None, result.slurmx
    # the pool the gate compares the working set with is both ranks' (2 x 2176 tokens, from each node's
    # engine log), not the head's alone: with the head's alone this valid arm was refused as "not engaged"
    evidence = result.slurmx.evidence
    assert evidence is not None and evidence.kv_pool_tokens == 2 * 2176, evidence
    assert stack_env.wait_gone(point["job_id"]) == [], job_processes(point["job_id"])


def _metrics(port: int) -> dict[str, float]:
    """The Mooncake master's /metrics, by series (name with labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            out[series] = float(value)
    return out


def test_a_mooncake_arm_runs_one_master_on_the_head_for_both_nodes_ranks(stack_env: StackEnv) -> None:
    """The Mooncake arm across nodes: one master on the head, none on node02; both nodes' ranks read a store config
    naming the head's master, and the master counts both ranks' segments (one client each) while the replay runs."""
    stack_env.recipe(RECIPE, **{"replay.sessions-per-conc": 8})
    stack_env.multinode_key("mn-mooncake", [2], arm="mooncake")
    stack_env.submit("mn-mooncake")
    point = stack_env.wait_for(
        "mn-mooncake", lambda s: s[0]["stage"] == "replay" or s[0]["state"] in ("failed", "completed"), timeout_s=900
    )[0]
    pdir = _point_dir(stack_env, point)
    assert point["stage"] == "replay", (point, (pdir / "state.json").read_text())
    master = (pdir / "commands" / "mooncake-master.txt").read_text()
    assert not (pdir / "nodes" / "node02" / "commands" / "mooncake-master.txt").exists()  # the head's only
    port = re.search(r" --port (\d+)", master)
    metrics_port = re.search(r" --metrics_port (\d+)", master)
    assert port is not None and metrics_port is not None, master
    head = json.loads((pdir / "nodes" / "head.json").read_text())
    assert head["backend_ports"]["mooncake-master"] == int(port.group(1)), head
    address = f"{head['address']}:{port.group(1)}"
    for where in (pdir, pdir / "nodes" / "node02"):
        config = json.loads((where / "mooncake_config.json").read_text())
        assert config["master_server_address"] == address, (where, config)
    seen = _metrics(int(metrics_port.group(1)))
    segments = {s for s in seen if s.startswith("segment_total_capacity_bytes{")}
    assert seen.get("master_active_clients") == 2 and len(segments) == 2, {
        k: v for k, v in seen.items() if "client" in k or "segment" in k or "capacity" in k
    }
    assert seen.get("master_total_capacity_bytes") == 2 * 2**30, seen.get("master_total_capacity_bytes")
    point = _ended(stack_env, "mn-mooncake")
    assert point["state"] == "completed", (point, (pdir / "state.json").read_text())
    result = Result.model_validate(json.loads((pdir / "result.json").read_text()))
    assert result.slurmx is not None and result.slurmx.invalid_reason is None, result.slurmx
    assert result.slurmx.nodes == ["node01", "node02"]
    assert stack_env.wait_gone(point["job_id"]) == [], job_processes(point["job_id"])
