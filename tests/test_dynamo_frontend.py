"""Aggregated Dynamo keys whose srt-slurm recipe has Dynamo's frontend (frontend.type dynamo), as users run them:
the whole `slurmx` process from a fresh directory against InferenceX's main tree. Each served key submits (dry run);
each one slurmx cannot serve is refused in one line naming why. The figures below are read by hand from the recipe
files named in each test (benchmarks/multi_node/srt-slurm-recipes/ of the fixture tree), not from slurmx's code.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SERVED = (
    "dsv4-fp4-gb200-dynamo-vllm-agentic-mtp-agg",
    "dsv4-fp4-gb200-dynamo-vllm-agentic-mtp2-agg",
    "dsv4-fp4-gb300-dynamo-sglang-agentic-agg",
    "dsv4-fp4-gb300-dynamo-vllm-agentic-mtp-agg",
    "dsv4-fp8-h200-dynamo-sglang-agentic-agg",
    "glm5.2-fp4-gb200-dynamo-sglang-agentic-agg",
    "glm5.2-fp4-gb200-dynamo-sglang-agentic-mtp-agg",
    "glm5.2-fp4-gb300-dynamo-sglang-agentic-agg",
    "kimik3-fp4-gb200-dynamo-vllm-agentic",
    "minimaxm3-fp4-gb200-dynamo-vllm-agentic-agg-mtp",
)
# Mooncake's store for one rank over several nodes (a TP16 or TP8 rank over 4-GPU GB200/GB300 nodes): one master on
# the head for every node's ranks, each rank's segment as the file's backend.mooncake_kv_store fixes it
MOONCAKE = (
    "kimik3-fp4-gb200-dynamo-vllm-agentic-dspark-mooncake-dcp16-agg",
    "kimik3-fp4-gb200-dynamo-vllm-agentic-mooncake-dcp16-agg",
    "kimik3-fp4-gb300-dynamo-vllm-agentic-dspark-mooncake-dcp8-agg",
    "kimik3-fp4-gb300-dynamo-vllm-agentic-mooncake-dcp8-agg",
)
MISSING = "glm5.2-fp4-gb300-dynamo-trt-agentic-agg-mtp"  # its CONFIG_FILE is not in the tree


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`slurmx ARGS` as a new process in `cwd`, this checkout's code first."""
    env = {k: v for k, v in os.environ.items() if k not in ("SLURMX_JOBS_DIR", "SLURMX_RESULTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "slurmx", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def tree(fixtures: Path) -> Path:
    return fixtures / "repo-main"


def render_point(tree: Path, key: str, exp_name: str, cwd: Path) -> dict[str, str]:
    """One point's render by section (`## NAME` -> its text), and the sbatch script under 'sbatch'."""
    done = run(["render", "--inferencex", str(tree), key], cwd)
    assert done.returncode == 0, done.stderr
    sbatch, *points = done.stdout.split("\n# point ")
    block = next(p for p in points if p.split()[1] == exp_name)
    sections = {s.splitlines()[0].split("  (")[0]: s for s in block.split("\n## ")[1:]}
    return {"sbatch": sbatch, **sections}


def argv_of(section: str, module: str) -> list[str]:
    line = next(line for line in section.splitlines() if f" -m {module} " in line)
    return shlex.split(line.split(f" -m {module} ", 1)[1])


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_served_keys_submit_as_a_dry_run_from_a_fresh_directory(tree: Path, tmp_path: Path) -> None:
    for key in SERVED:
        cwd = tmp_path / key
        cwd.mkdir()
        done = run(["submit", "--dry-run", "--inferencex", str(tree), key], cwd)
        assert done.returncode == 0, f"{key}: {done.stderr}"
        assert "would submit" in done.stdout, key


def test_the_mooncake_keys_over_several_nodes_submit_as_a_dry_run(tree: Path, tmp_path: Path) -> None:
    for key in MOONCAKE:
        cwd = tmp_path / key
        cwd.mkdir()
        done = run(["submit", "--dry-run", "--inferencex", str(tree), key], cwd)
        assert done.returncode == 0, f"{key}: {done.stderr}"
        assert "would submit" in done.stdout and "refused" not in done.stdout, key


def test_a_missing_recipe_is_refused_in_one_line(tree: Path, tmp_path: Path) -> None:
    done = run(["submit", "--dry-run", "--inferencex", str(tree), MISSING], tmp_path)
    assert done.returncode == 2
    named = "CONFIG_FILE=benchmarks/multi_node/srt-slurm-recipes/trtllm/glm5.2/gb300-fp4/agentic/"
    assert named in done.stderr and "is not in the checkout" in done.stderr and "\n" not in done.stderr.strip()


def test_a_vllm_point_runs_the_files_flags_and_resources(tree: Path, tmp_path: Path) -> None:
    """kimi-k3/agentic/agg-gb200-dep16-throughput-agentic.yaml: slurm.time_limit 12:00:00, resources agg_nodes 4 x
    gpus_per_node 4; the worker tensor-parallel-size 4, data-parallel-size 4, max-num-seqs 64, block-size 64; the
    frontend router-mode kv and kv-cache-block-size 64; benchmark.env AGENTIC_WARMUP_GRACE_PERIOD 3600 and no failed
    request threshold (benchmark_lib.sh's default 0.10). agg-gb200-tp16-latency-agentic.yaml: benchmark.env
    AIPERF_LIVE_FAILED_REQUEST_THRESHOLD 0.25."""
    key = "kimik3-fp4-gb200-dynamo-vllm-agentic"
    point = render_point(tree, key, "kimik3_p1x4ep16dpa_d0x4ep16dpa_conc64", tmp_path)
    scripts = point["sbatch"].split("# sbatch script")[1:]
    assert any("#SBATCH --nodes=4\n" in s and "#SBATCH --gres=gpu:4\n" in s and "#SBATCH --time=720\n" in s
               for s in scripts)  # fmt: skip
    worker = argv_of(point["engine"], "dynamo.vllm")
    assert value(worker, "--tensor-parallel-size") == "4" and value(worker, "--data-parallel-size") == "4"
    assert value(worker, "--data-parallel-size-local") == "1"  # 4 ranks of 4 GPUs on 4-GPU nodes
    assert value(worker, "--max-num-seqs") == "64" and value(worker, "--block-size") == "64"
    assert value(worker, "--served-model-name") == "moonshotai/Kimi-K3"
    others = [name for name in point if name.startswith("node ")]
    assert others == ["node 1 of 4: engine", "node 2 of 4: engine", "node 3 of 4: engine"]
    assert "--headless" in argv_of(point["node 3 of 4: engine"], "dynamo.vllm")
    frontend = argv_of(point["router"], "dynamo.frontend")
    assert value(frontend, "--router-mode") == "kv" and value(frontend, "--kv-cache-block-size") == "64"
    replay = shlex.split(point["replay"].splitlines()[-1])
    assert value(replay, "--warmup-grace-period") == "3600" and value(replay, "--failed-request-threshold") == "0.1"
    latency = render_point(tree, key, "kimik3_p1x16_d0x16_conc1", tmp_path)
    replay = shlex.split(latency["replay"].splitlines()[-1])
    assert value(replay, "--failed-request-threshold") == "0.25"


def test_a_fixed_vllm_simple_pool_is_passed_as_the_file_gives_it(tree: Path, tmp_path: Path) -> None:
    """minimax-m3/gb200-fp4/agentic/agg-tp4-vllm-simple-agentic.yaml's kv-transfer-config: SimpleCPUOffloadConnector
    with cpu_bytes_to_use 549755813888, cpu_bytes_to_use_per_rank 137438953472, lazy_offload false."""
    key, name = "minimaxm3-fp4-gb200-dynamo-vllm-agentic-agg-mtp", "minimaxm3_p1x4_d0x4_conc20_kvdram-vllm-simple"
    worker = argv_of(render_point(tree, key, name, tmp_path)["engine"], "dynamo.vllm")
    assert worker.count("--kv-transfer-config") == 1
    config = json.loads(value(worker, "--kv-transfer-config"))
    assert config["kv_connector"] == "SimpleCPUOffloadConnector"
    assert config["kv_connector_extra_config"] == {
        "cpu_bytes_to_use": 549755813888, "cpu_bytes_to_use_per_rank": 137438953472, "lazy_offload": False,
    }  # fmt: skip


def test_an_sglang_server_over_two_nodes_with_its_fixed_hicache(tree: Path, tmp_path: Path) -> None:
    """sglang/glm5.2/gb200-fp4/agentic/glm5.2-agentx-agg.yaml: resources agg_nodes 2 x gpus_per_node 4;
    tensor-parallel-size 8; enable-hierarchical-cache, hicache-size 135, hicache-write-policy write_back."""
    key, name = "glm5.2-fp4-gb200-dynamo-sglang-agentic-agg", "glm5.2_p1x8_d0x8_conc1_kvdram-hicache"
    point = render_point(tree, key, name, tmp_path)
    assert "#SBATCH --nodes=2" in point["sbatch"] and "#SBATCH --gres=gpu:4" in point["sbatch"]
    head, other = argv_of(point["engine"], "dynamo.sglang"), argv_of(point["node 1 of 2: engine"], "dynamo.sglang")
    assert head[0] == "--model-path" and value(head, "--tensor-parallel-size") == "8"
    assert value(head, "--hicache-size") == "135" and head.count("--enable-hierarchical-cache") == 1
    assert value(head, "--hicache-write-policy") == "write_back"
    assert (value(head, "--nnodes"), value(head, "--node-rank")) == ("2", "0")
    assert (value(other, "--nnodes"), value(other, "--node-rank")) == ("2", "1")
    assert value(head, "--dist-init-addr") == value(other, "--dist-init-addr")


def config_file(section: str) -> dict[str, object]:
    """The JSON of the `# file ...mooncake_config.json:` lines of a rendered process."""
    lines = section.split("mooncake_config.json:\n", 1)[1].splitlines()
    text = "\n".join(line.removeprefix("#   ") for line in lines if line.startswith("#   "))
    parsed: dict[str, object] = json.loads(text)
    return parsed


def test_one_mooncake_master_on_the_head_serves_every_nodes_ranks(tree: Path, tmp_path: Path) -> None:
    """kimi-k3/agentic/agg-gb200-dcp16-nospec-mooncake-agentic.yaml: resources agg_nodes 4 x gpus_per_node 4 (one TP16
    rank); backend.mooncake_kv_store.master_extra_args --eviction_high_watermark_ratio=0.95 and --eviction_ratio=0.10,
    store_config global_segment_size "96GB", local_buffer_size "4GB", metadata_server P2PHANDSHAKE, protocol rdma,
    device_name mlx5_0,mlx5_1,mlx5_2,mlx5_3, mode embedded, enable_offload false; kv-transfer-config's
    kv_connector_extra_config load_async, lookup_async true, enable_offload false."""
    key, name = "kimik3-fp4-gb200-dynamo-vllm-agentic-mooncake-dcp16-agg", "kimik3_p1x16_d0x16_conc8_kvdram-mooncake"
    point = render_point(tree, key, name, tmp_path)
    assert "--nodes=4" in point["sbatch"] and "--gres=gpu:4" in point["sbatch"]
    masters = [name for name in point if name.endswith("mooncake-master")]
    assert masters == ["mooncake-master"]  # on the head only: no "node N of 4: mooncake-master"
    master = shlex.split(point["mooncake-master"].splitlines()[-1].split(" mooncake_master ", 1)[1])
    assert value(master, "--rpc_address") == "$HEAD_ADDRESS"  # reachable from every node, not loopback
    assert value(master, "--eviction_high_watermark_ratio") == "0.95" and value(master, "--eviction_ratio") == "0.10"
    engines = ["engine", *(f"node {n} of 4: engine" for n in (1, 2, 3))]
    configs = [config_file(point[section]) for section in engines]
    assert all(c == configs[0] for c in configs)  # every node's ranks: the same store
    assert configs[0] == {
        "master_server_address": f"$HEAD_ADDRESS:{value(master, '--port')}",
        "global_segment_size": "96GB",
        "local_buffer_size": "4GB",
        "metadata_server": "P2PHANDSHAKE",
        "protocol": "rdma",
        "device_name": "mlx5_0,mlx5_1,mlx5_2,mlx5_3",
        "mode": "embedded",
        "enable_offload": False,
    }
    for section in engines:
        worker = argv_of(point[section], "dynamo.vllm")
        transfer = json.loads(value(worker, "--kv-transfer-config"))
        assert transfer["kv_connector"] == "MooncakeStoreConnector"
        assert transfer["kv_connector_extra_config"] == {
            "load_async": True,
            "lookup_async": True,
            "enable_offload": False,
        }
        assert "MOONCAKE_CONFIG_PATH='$POINT_DIR/mooncake_config.json'" in point[section]


def _mooncake_copy(tree: Path, tmp_path: Path, edit: str, by: str) -> tuple[Path, Path]:
    copy = tmp_path / "tree"
    shutil.copytree(tree, copy, symlinks=True)
    recipe = (
        copy
        / "benchmarks/multi_node/srt-slurm-recipes/vllm/kimi-k3/agentic/agg-gb300-dcp8-nospec-mooncake-agentic.yaml"
    )
    text = recipe.read_text()
    assert edit in text
    recipe.write_text(text.replace(edit, by))
    return copy, recipe


def test_a_mooncake_segment_over_the_nodes_dram_is_refused_in_one_line(tree: Path, tmp_path: Path) -> None:
    """4 GB300 ranks x 300 GB = 1200 GB, over the node's 860160 MiB (configs/clusters.yaml, cluster:gb300-nv: 901 GB)."""
    copy, recipe = _mooncake_copy(tree, tmp_path, 'global_segment_size: "150GB"', 'global_segment_size: "300GB"')
    key = "kimik3-fp4-gb300-dynamo-vllm-agentic-mooncake-dcp8-agg"
    done = run(["submit", "--dry-run", "--inferencex", str(copy), key], tmp_path)
    assert done.returncode == 2
    line = recipe.read_text().splitlines().index('      global_segment_size: "300GB"') + 1
    assert done.stderr.strip() == (
        f"slurmx: error: {key}: kimik3_p1x8_d0x8_conc48_kvdram-mooncake has {recipe}:{line}: "
        "backend.mooncake_kv_store.store_config.global_segment_size: 300 GB for each of a node's 4 ranks is 1200 GB, "
        "more than the node's 901 GB of DRAM"
    )


def test_a_mooncake_segment_that_is_no_size_is_one_line_naming_the_store(tree: Path, tmp_path: Path) -> None:
    copy, recipe = _mooncake_copy(tree, tmp_path, 'global_segment_size: "150GB"', 'global_segment_size: "lots"')
    key = "kimik3-fp4-gb300-dynamo-vllm-agentic-mooncake-dcp8-agg"
    done = run(["submit", "--dry-run", "--inferencex", str(copy), key], tmp_path)
    assert done.returncode == 2
    line = recipe.read_text().splitlines().index("  mooncake_kv_store:") + 1
    assert done.stderr.strip() == (
        f"slurmx: error: {key}: kimik3_p1x8_d0x8_conc48_kvdram-mooncake has {recipe}:{line}: backend.mooncake_kv_store: "
        "kv-offload backend mooncake: global_segment_size 'lots' is not Mooncake's <n>GB"
    )


def test_a_mooncake_rank_over_several_nodes_without_a_fixed_segment_is_refused(tree: Path, tmp_path: Path) -> None:
    """The same file without its store section: the segment would come from the DRAM budget, over the whole rank."""
    copy, recipe = _mooncake_copy(tree, tmp_path, "  mooncake_kv_store:", "  other_section:")
    key = "kimik3-fp4-gb300-dynamo-vllm-agentic-mooncake-dcp8-agg"
    done = run(["submit", "--dry-run", "--inferencex", str(copy), key], tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert f"{recipe}:" in line and ": backend: kv-offload backend mooncake over 2 nodes: " in line, line
    assert "only a segment size the recipe fixes serves it" in line, line


def test_a_bad_value_in_an_srt_recipe_is_one_line_with_its_file_and_line(tree: Path, tmp_path: Path) -> None:
    """A copy of the tree whose recipe gives a replay setting that is no number: `file:line: field: message`, 2."""
    copy = tmp_path / "tree"
    shutil.copytree(tree, copy, symlinks=True)
    recipe = copy / "benchmarks/multi_node/srt-slurm-recipes/vllm/minimax-m3/gb200-fp4/agentic/agg-tp4-agentic.yaml"
    lines = recipe.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "AIPERF_EXTRA_INPUTS" in line)
    lines.insert(at, '    AGENTIC_WARMUP_GRACE_PERIOD: "soon"')
    recipe.write_text("\n".join(lines) + "\n")
    done = run(
        ["submit", "--dry-run", "--inferencex", str(copy), "minimaxm3-fp4-gb200-dynamo-vllm-agentic-agg-mtp"], tmp_path
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"slurmx: error: {recipe}:{at + 1}: benchmark.env.AGENTIC_WARMUP_GRACE_PERIOD: 'soon' is not a number"
    )


def test_a_node_of_a_two_node_hicache_server_asks_the_pools_of_its_own_four_ranks(tree: Path, tmp_path: Path) -> None:
    """sglang/glm5.2/gb200-fp4/agentic/glm5.2-agentx-agg.yaml: tensor-parallel-size 8 over agg_nodes 2 x gpus_per_node
    4, hicache-size 135 (GB per rank: SGLang's HostKVCache is allocated by each TP rank's own process). Each node holds
    4 ranks: 4 x 135 GB = 540 GB, plus preflight's margin of 5 % (27 GB) = 567 GB = 540733 MiB, over a profile's
    16G (16384 MiB): --mem=557117M per node (8 ranks' pools would ask 1097850M)."""
    profiles = (ROOT / "configs" / "clusters.yaml").read_text()
    at = profiles.index("  cluster:gb200-nv:")
    at = profiles.index('mem: "0"', at)
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(profiles[:at] + 'mem: "16G"' + profiles[at + len('mem: "0"') :])
    for key in ("glm5.2-fp4-gb200-dynamo-sglang-agentic-agg", "glm5.2-fp4-gb200-dynamo-sglang-agentic-mtp-agg"):
        cwd = tmp_path / key
        cwd.mkdir()
        done = run(["submit", "--dry-run", "--clusters", str(clusters), "--inferencex", str(tree), key], cwd)
        assert done.returncode == 0, done.stderr
        asked = [line for line in done.stdout.splitlines() if line.startswith("sbatch script for ")]
        assert asked and all(" x2 nodes mem=557117M " in line for line in asked), asked
        assert "#SBATCH --mem=557117M\n" in done.stdout and "#SBATCH --nodes=2\n" in done.stdout
    rendered = run(["render", "--clusters", str(clusters), "--inferencex", str(tree), key], tmp_path)
    assert rendered.returncode == 0 and "#SBATCH --mem=557117M\n" in rendered.stdout


def test_plan_shows_the_request_submit_makes_from_the_srt_recipe(tree: Path, tmp_path: Path) -> None:
    """kimi-k3/agentic/: agg-gb200-tp16-latency-agentic.yaml and agg-gb200-tep16-balanced-agentic.yaml say resources
    agg_nodes 4 x gpus_per_node 4, slurm.time_limit 8:00:00 (480 min); agg-gb200-dep16-throughput-agentic.yaml and
    agg-gb200-dep16-throughput-vllm-simple-offload-agentic.yaml agg_nodes 4 x gpus_per_node 4, 12:00:00 (720 min).
    The DEP16 rows say tp 4 (one 4-GPU node by the row); the profile's limit is 360 min. Plan shows the file's
    figures, in its table and --json, and each point's request is one of submit's arrays, task for task."""
    key = "kimik3-fp4-gb200-dynamo-vllm-agentic"
    by_file = {
        "agg-gb200-tp16-latency-agentic.yaml": "batch gpu:4 x4 nodes mem=0 excl 480m",
        "agg-gb200-tep16-balanced-agentic.yaml": "batch gpu:4 x4 nodes mem=0 excl 480m",
        "agg-gb200-dep16-throughput-agentic.yaml": "batch gpu:4 x4 nodes mem=0 excl 720m",
        "agg-gb200-dep16-throughput-vllm-simple-offload-agentic.yaml": "batch gpu:4 x4 nodes mem=0 excl 720m",
    }
    planned = run(["plan", "--json", "--inferencex", str(tree), key], tmp_path)
    assert planned.returncode == 0 and planned.stderr == "", planned.stderr
    rows = json.loads(planned.stdout)
    assert len(rows) == 18
    for row in rows:
        named = row["prefill"]["additional-settings"][0].rsplit("/", 1)[1]
        assert row["slurm-request"] == by_file[named], (row["exp-name"], row["slurm-request"])
        assert "recipe-note" not in row and row["recipe"].startswith("kimi-k3-vllm-agg-gb200-")
    dep16 = [r for r in rows if r["prefill"]["tp"] == 4]
    assert len(dep16) == 10 and all(r["prefill"]["dp-attn"] for r in dep16)  # the row's fields as InferenceX's
    submitted = run(["submit", "--dry-run", "--json", "--inferencex", str(tree), key], tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    arrays = json.loads(submitted.stdout)[0]["arrays"]
    asked: dict[str, int] = {}
    for row in rows:
        asked[row["slurm-request"]] = asked.get(row["slurm-request"], 0) + 1
    expected = {"batch gpu:4 x4 nodes mem=0 excl 480m": 8, "batch gpu:4 x4 nodes mem=0 excl 720m": 10}
    assert {a["request"]: a["tasks"] for a in arrays} == asked == expected
    table = run(["plan", "--inferencex", str(tree), key], tmp_path)
    assert table.returncode == 0
    lines = [line for line in table.stdout.splitlines() if "p1x4ep16dpa_d0x4ep16dpa" in line]
    assert len(lines) == 10 and all("batch gpu:4 x4 nodes mem=0 excl 720m" in line for line in lines)
