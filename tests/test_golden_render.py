"""The rendered production commands of the seed keys, kept as reviewed golden files.

This test only compares. After an intended change, `scripts/update-golden` rewrites the files and
prints the diff; review it like code. CI fails if it is asked to update them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from slurmx import paths
from tests.helpers.golden import KEYS, TREES, diff, golden_path, points, render, update_requested_in_ci


def test_ci_is_never_asked_to_update_golden_files() -> None:
    requested = update_requested_in_ci(os.environ)
    assert not requested, "UPDATE_GOLDEN is set under CI; golden files change only through scripts/update-golden"


def test_an_update_request_is_recognised_only_under_ci() -> None:
    assert update_requested_in_ci({"CI": "true", "UPDATE_GOLDEN": "0"})  # any value asks, even "0"
    assert update_requested_in_ci({"CI": "1", "UPDATE_GOLDEN": ""})
    assert not update_requested_in_ci({"UPDATE_GOLDEN": "1"})
    assert not update_requested_in_ci({"CI": "true"})


@pytest.mark.parametrize("key", KEYS)
def test_rendered_production_commands_match_golden(key: str, tmp_path: Path) -> None:
    golden = golden_path(key)
    before = golden.read_bytes()
    delta = diff(key, render(key, tmp_path / "results"))
    assert golden.read_bytes() == before  # comparing never writes
    assert not delta, f"rendered commands of {key} changed; review, then scripts/update-golden:\n{delta}"


def test_golden_files_hold_the_fixed_seed_bugs() -> None:
    """What the seeds' reviews found broken is visibly right in the reviewed files."""
    for key in (k for k in KEYS if k not in TREES):  # the seed keys, of the shipped configs
        text = golden_path(key).read_text()
        engine_lines = [line for line in text.splitlines() if " serve " in line]
        if "dynamo" in key:  # Dynamo's workers, not `vllm serve` (tests/test_disagg_render.py)
            continue
        assert engine_lines, key
        for line in engine_lines:
            assert "--enable-auto-tool-choice" in line and "--tool-call-parser" in line
            assert "--enable-cumem-allocator" not in line or "LMCacheMPConnector" not in line
            if "LMCacheMPConnector" in line:
                assert '"kv_connector_module_path":"lmcache.integration.vllm.lmcache_mp_connector"' in line
        assert "#SBATCH --exclusive" in text and "--container-image=" in text
    assert paths.jobs_dir().is_dir()


def test_sglang_golden_files_start_sglang_with_tool_calls_and_parallelism() -> None:
    """An SGLang key's engine is `python3 -m sglang.launch_server` on every point: the model by --model-path, tool
    calling on (agentic requests get HTTP 400 without a parser), and its TP from the point."""
    keys = [k for k in KEYS if "-sglang-" in k and k not in DYNAMO_FRONTEND]
    assert keys
    for key in keys:
        lines = [line for line in golden_path(key).read_text().splitlines() if "-m sglang.launch_server " in line]
        points = golden_path(key).read_text().count("\n# point ")
        assert len(lines) == points > 0, key
        for line in lines:
            argv = line.split(" python3 -m sglang.launch_server ", 1)[1].split()
            assert argv[0] == "--model-path" and "--tool-call-parser" in argv and "--tp" in argv, line


# keys whose srt-slurm recipe has Dynamo's frontend: the engine is Dynamo's worker module behind it
DYNAMO_FRONTEND = {
    "dsv4-fp4-gb200-dynamo-vllm-agentic-mtp-agg": "dynamo.vllm",
    "dsv4-fp8-h200-dynamo-sglang-agentic-agg": "dynamo.sglang",
}


def test_dynamo_frontend_golden_files_put_the_worker_behind_the_frontend() -> None:
    """Every point of such a key starts Dynamo's frontend on the port the replay sends to, and the engine's Dynamo
    worker (the model first, no --port of its own) whose system port (DYN_SYSTEM_PORT) is where its readiness is
    polled and where aiperf scrapes the engine's metrics; both find each other through the point's own store."""
    for key, module in DYNAMO_FRONTEND.items():
        assert key in KEYS
        blocks = golden_path(key).read_text().split("\n# point ")[1:]
        assert blocks, key
        for block in blocks:
            sections = {s.splitlines()[0]: s for s in block.split("\n## ")[1:]}
            engine = next(v for k, v in sections.items() if k.startswith("engine  (ready: "))
            router = next(v for k, v in sections.items() if k.startswith("router  (ready: "))
            replay = sections["replay"]
            health = engine.splitlines()[0].split("(ready: ", 1)[1].rstrip(")")
            system_port = engine.split("DYN_SYSTEM_PORT=", 1)[1].split()[0]
            assert health == f"http://127.0.0.1:{system_port}/health", key
            worker = engine.split(f" python3 -m {module} ", 1)[1].split()
            assert worker[0] in ("--model", "--model-path") and "--port" not in worker, key
            frontend = router.split(" python3 -m dynamo.frontend ", 1)[1].split()
            port = frontend[frontend.index("--http-port") + 1]
            assert frontend[frontend.index("--http-host") + 1] == "127.0.0.1" and port != system_port, key
            aiperf = replay.splitlines()[-1].split()
            assert aiperf[aiperf.index("--url") + 1] == f"http://127.0.0.1:{port}", key
            assert aiperf[aiperf.index("--server-metrics") + 1] == f"http://127.0.0.1:{system_port}/metrics", key
            store = "DYN_FILE_KV='$POINT_DIR/dynamo-discovery'"
            assert store in engine.splitlines()[1] and store in router.splitlines()[1], key


def test_atom_golden_files_start_atom_with_its_in_process_lmcache_sized_per_rank() -> None:
    """An ATOM key's engine is `python -m atom.entrypoints.openai_server` on every point: the model by --model, the
    port by --server-port, TP from the point; on its LMCache arm, ATOM's in-process lmcache_offload connector with
    each rank's pool the point's budget / TP GB (kimik3_fp4_mi355x_atom_mtp.sh: TOTAL_CPU_DRAM_GB / TP)."""
    keys = [k for k in KEYS if "-atom-" in k]
    assert keys
    for key in keys:
        budgets = {p.exp_name: (p.total_cpu_dram_gb, p.tp) for p in points(key)}
        blocks = golden_path(key).read_text().split("\n# point ")[1:]
        assert len(blocks) == len(budgets) > 0, key
        offloaded = 0
        for block in blocks:
            name = block.split()[1]
            lines = block.splitlines()
            at = next(i for i, line in enumerate(lines) if " -m atom.entrypoints.openai_server " in line)
            argv = lines[at].split(" -m atom.entrypoints.openai_server ", 1)[1].split()
            assert argv[0] == "--model" and "--server-port" in argv, lines[at]
            assert argv[argv.index("--tensor-parallel-size") + 1] == str(budgets[name][1])
            env = dict(kv.split("=", 1) for kv in lines[at - 1].removeprefix("# env: ").split())
            if "kvdram-lmcache" in name:
                offloaded += 1
                assert """'{"kv_connector":"lmcache_offload","kv_role":"offload"}'""" in lines[at]
                budget, tp = budgets[name]
                assert env["LMCACHE_LOCAL_CPU"] == "True" and env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == str(budget // tp)
            else:
                assert "--kv-transfer-config" not in argv and "LMCACHE_MAX_LOCAL_CPU_SIZE" not in env
        assert offloaded, key


def test_trtllm_golden_files_write_each_points_config_with_its_host_pool() -> None:
    """A TRT-LLM key's engine is `mpirun -n 1 ... trtllm-serve MODEL` on every point, its TP by --tp_size, every
    other setting in the --config YAML the node writes: max_batch_size the point's conc, and the native arm's host
    tier as kv_cache_config.host_cache_size bytes (the scripts pin it per TP: one size for every conc of a TP)."""
    keys = [k for k in KEYS if "-trtllm-" in k]
    assert keys
    for key in keys:
        by_name = {p.exp_name: p for p in points(key)}
        blocks = golden_path(key).read_text().split("\n# point ")[1:]
        assert len(blocks) == len(by_name) > 0, key
        host: dict[int, set[int]] = {}
        for block in blocks:
            point = by_name[block.split()[1]]
            lines = block.splitlines()
            at = next(
                i
                for i, line in enumerate(lines)
                if " mpirun -n 1 --oversubscribe --allow-run-as-root trtllm-serve " in line
            )
            argv = lines[at].split(" trtllm-serve ", 1)[1].split()
            assert argv[argv.index("--tp_size") + 1] == str(point.tp) and "--config" in argv, lines[at]
            start = next(
                i for i, line in enumerate(lines) if line.startswith("# file ") and "trtllm_config.yaml" in line
            )
            config = yaml.safe_load("\n".join(line[4:] for line in lines[start + 1 : at]))
            assert config["max_batch_size"] == point.conc
            host.setdefault(point.tp, set()).add(config["kv_cache_config"]["host_cache_size"])
        assert host and all(len(sizes) == 1 for sizes in host.values()), host
