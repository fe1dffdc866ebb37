"""`slurmx recipes import` as a user runs it, on a copy of InferenceX main's files for one imported key: one
flag edited upstream, `check` names it and exits 1, `import` updates the recipe, `check` exits 0 again; an
unchanged tree rewrites nothing (bytes and mtime). Then `check` over every imported key (CI's gate)."""

from __future__ import annotations

import datetime
import hashlib
import os
import shutil
from pathlib import Path

import pytest
import yaml

from slurmx import paths
from slurmx.upstream.importer import DATE_LINE
from slurmx.upstream.importer import without_date as undated
from tests.conftest import FIXTURES
from tests.test_cli_as_users_run_it import slurmx

KEY = "minimaxm3-fp4-b200-vllm-agentic-mtp"
STEM = "minimaxm3_fp4_b200_vllm_mtp"
SCRIPT = Path("benchmarks/single_node/agentic/minimaxm3_fp4_b200_mtp.sh")
NEEDED = (
    Path("configs/nvidia-master.yaml"), Path("configs/amd-master.yaml"), Path("configs/runners.yaml"),
    Path("runners/launch_b200-dgxc.sh"), Path("benchmarks/benchmark_lib.sh"), SCRIPT,
    Path(".github/workflows/benchmark-tmpl.yml"),  # the env the launcher runs with (HF_HUB_CACHE, ...)
)  # fmt: skip
REVIEWED = Path(__file__).resolve().parents[1] / "jobs" / "differences"  # the repo's declared rows, reviewed ones too
# every key imported into jobs/ and the fixture tree it came from (CI runs check over each)
IMPORTED = {
    KEY: "repo-main",
    "minimaxm3-fp4-b300-vllm-agentic-mtp": "repo-main",
    "dsv4-fp4-b200-vllm-agentic-mtp": "repo-main",
    "minimaxm3-fp8-mi325x-vllm-agentic-mtp": "repo-main",
    "dsv4-fp4-b300-vllm-agentic-mtp": "repo-main",
    "dsv4-fp4-mi355x-vllm-agentic-mtp": "repo-main",
    "kimik3-fp4-mi355x-vllm-agentic-mtp": "repo-main",
    "minimaxm3-fp8-h100-vllm-agentic-mtp": "repo-main",  # Mooncake's config-file mode
    "kimik3-fp4-b300-vllm-agentic-dspark": "repo-main",  # config-file mode, its RDMA rail read from the sandbox
    "minimaxm3-fp8-h200-vllm-agentic-mtp": "repo-main",  # resolves its hub-cache snapshot in the script
    "minimaxm3-fp8-mi300x-vllm-agentic-mtp": "repo-main",  # LMCache, one server per TP rank
    "minimaxm3-fp4-mi355x-vllm-agentic-mtp": "repo-main",  # per-rank LMCache sized against /dev/shm (node.shm-gib)
    "dsv4-fp4-b200-vllm-agentic-lmcache": "repo-lmcache-agentix",  # the seed key: its lmcache arm and older replay
    "glm5.2-fp8-mi325x-sglang-agentic-mtp": "repo-main",  # SGLang: python3 -m sglang.launch_server, EAGLE MTP
    "qwen3.5-fp8-b300-sglang-agentic-mtp": "repo-main",  # SGLang's HiCache arm: (budget - TP) x 15/31 / TP GB a rank
    "qwen3.5-fp4-b300-sglang-agentic-mtp": "repo-main",
    "glm5.2-fp4-b300-sglang-agentic-mtp": "repo-main",  # HiCache at a fixed 270 GB a rank, whatever the budget
    "qwen3.5-fp8-mi325x-sglang-agentic-mtp": "repo-main",
    "qwen3.5-fp4-mi355x-sglang-agentic-mtp": "repo-main",
    "qwen3.5-fp8-mi300x-sglang-agentic-mtp": "repo-main",  # --tensor-parallel-size, SGLang's long --tp
    "glm5.2-fp4-mi355x-sglang-agentic-mtp": "repo-main",
    "qwen3.5-fp4-b200-sglang-agentic-mtp": "repo-main",  # --tokenizer-path "$MODEL": the recipe's {model_path}
    "qwen3.5-fp8-b200-sglang-agentic-mtp": "repo-main",
    "glm5.2-fp4-b200-sglang-agentic-mtp": "repo-main",  # HiCache ratio 0.75, a fixed 270 GB at conc 12 and 16
    "dsv4-fp4-mi355x-atom-agentic-mtp": "repo-main",  # ATOM: python3 -u -m atom.entrypoints.openai_server, MTP
    "kimik3-fp4-mi355x-atom-agentic-mtp": "repo-main",  # ATOM's in-process LMCache: budget / TP GB a rank, DSpark
    "glm5.2-fp4-mi355x-atom-agentic-mtp": "repo-main",  # ATOM's in-process LMCache: the whole budget in every rank
    "minimaxm3-fp4-b200-trtllm-agentic-mtp": "repo-main",  # TRT-LLM: mpirun ... trtllm-serve, its --config YAML's keys
    "minimaxm3-fp4-b300-trtllm-agentic-mtp": "repo-main",  # TRT-LLM's native host tier (kv_cache_config.host_cache_size)
    "dsv4-fp4-mi355x-sglang-agentic-mtp": "repo-main",  # a replay field by CONC: a per-conc replay rule
    # the image's own sglang-router (from-image), --dist-init-addr at the node's rendezvous port, the checkout's
    # utils/aiperf at the capture's workspace (launch_b200-dgxc.sh mounts it at /workspace)
    "dsv4-fp4-b200-sglang-agentic-hicache-mtp": "repo-main",
    "dsv4-fp4-b300-sglang-agentic-hicache-mtp": "repo-main",  # --tokenizer-worker-num "$TP" by DP attention and TP
    "qwen3.5-fp8-h200-sglang-agentic-mtp": "repo-main",  # `sed -i` of an image file, guarded: provision.edits
    "qwen3.5-fp8-h100-sglang-agentic-mtp": "repo-main",
    # the same script as -mtp's on another image: its own recipe file (importer.key_stem)
    "qwen3.5-fp8-h200-sglang-agentic-hicache-mtp": "repo-main",
    # InferenceX main lists the key but holds no script for it (launch_h100-dgxc-slurm.sh would run the missing
    # qwen3.5_fp8_h100.sh): imported and checked from the tree that has it
    "qwen3.5-fp8-h100-sglang-agentic": "repo-lmcache-agentix",
}

pytestmark = pytest.mark.slow


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    source = FIXTURES / "repo-main"
    if not source.exists():
        pytest.skip(f"InferenceX checkout not found at {source}")
    copy = tmp_path / "inferencex"
    for name in NEEDED:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source / name, copy / name)
    return copy


@pytest.fixture
def jobs(tmp_path: Path) -> Path:
    copy = tmp_path / "jobs"
    shutil.copytree(paths.jobs_dir(), copy)
    return copy


def test_edit_check_import_check(tree: Path, jobs: Path, tmp_path: Path) -> None:
    script = tree / SCRIPT
    text = script.read_text()
    assert text.count("--stream-interval 20") == 1
    script.write_text(text.replace("--stream-interval 20", "--stream-interval 25"))
    check = ["recipes", "check", "--inferencex", str(tree), KEY, "--jobs", str(jobs)]
    proc = slurmx(check, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and all("undeclared: engine --stream-interval: upstream '25', slurmx '20'" in line for line in lines)
    recipe = jobs / f"{STEM}.yaml"
    before = recipe.read_text()
    proc = slurmx(["recipes", "import", "--inferencex", str(tree), KEY, "--jobs", str(jobs)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"{KEY}: wrote {recipe}"), proc.stdout
    after = recipe.read_text()
    assert "--stream-interval: 25" in after and "--stream-interval: 20" in before
    assert f"# upstream.inferencex.script: {SCRIPT}" in after
    proc = slurmx(check, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("recipes check: 1 keys, 15 points, ")


def test_importing_an_unchanged_tree_rewrites_nothing(tree: Path, jobs: Path, tmp_path: Path) -> None:
    recipe, table = jobs / f"{STEM}.yaml", jobs / "differences" / f"{STEM}.yaml"
    stamps = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (recipe, table)}
    proc = slurmx(["recipes", "import", "--inferencex", str(tree), KEY, "--jobs", str(jobs)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"{KEY}: unchanged {recipe}"), proc.stdout
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in stamps} == stamps


@pytest.mark.parametrize("key", sorted(IMPORTED))
def test_check_every_imported_key_on_its_fixture_tree(key: str, jobs: Path, tmp_path: Path, fixtures: Path) -> None:
    """The committed recipe is what import makes of its tree (its reviewed rows folded in): nothing rewritten; and
    import's check of it, `check`'s own verdict from the same captures, finds every difference declared."""
    source = fixtures / IMPORTED[key]  # the fixture: CI fails rather than skips without the trees
    proc = slurmx(["recipes", "import", "--inferencex", str(source), key, "--jobs", str(jobs)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = proc.stdout.splitlines()[0]
    assert ": unchanged " in line and "(unchanged)" in line or "; no rows;" in line, proc.stdout
    assert line.endswith("; check: every difference declared"), proc.stdout
    assert {p.name for p in jobs.rglob("*")} == {p.name for p in paths.jobs_dir().rglob("*")}  # nor a file added


def test_import_says_what_check_says(jobs: Path, tmp_path: Path, fixtures: Path) -> None:
    """Without its reviewed rows, import names each difference `check` names, and `check` exits 1 on them."""
    tree = fixtures / "repo-main"
    (jobs / "differences" / f"{STEM}.yaml").unlink()
    proc = slurmx(["recipes", "import", "--inferencex", str(tree), KEY, "--jobs", str(jobs)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    head, *named = proc.stdout.splitlines()
    assert head.endswith(f"; check: {len(named)} to review") and named, proc.stdout
    proc = slurmx(["recipes", "check", "--inferencex", str(tree), KEY, "--jobs", str(jobs)], cwd=tmp_path)
    assert proc.returncode == 1
    assert sorted(proc.stdout.splitlines()) == sorted(line.strip() for line in named)


def test_every_checked_key_renders_and_dry_runs_from_its_tree(tmp_path: Path, fixtures: Path) -> None:
    """What a team runs next after `check`: render and submit --dry-run of every imported key and the H200
    multinode key, from the tree they came from, as a user in an empty directory."""
    by_tree = {tree: sorted(k for k, t in IMPORTED.items() if t == tree) for tree in set(IMPORTED.values())}
    by_tree["repo-main"].append("kimik3-fp4-h200-vllm-agentic")
    for tree, keys in sorted(by_tree.items()):
        for command in (["render"], ["submit", "--dry-run"]):
            proc = slurmx([*command, *keys, "--inferencex", str(fixtures / tree)], cwd=tmp_path)
            assert proc.returncode == 0, proc.stderr
            # only a warning that the tree's own runners.yaml figures win (an older tree's differ from the profile's)
            assert all(" says " in line and "using InferenceX's" in line for line in proc.stderr.splitlines()), (
                proc.stderr
            )
            assert all(key in proc.stdout for key in keys), command
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing


def test_an_amd_script_imports_its_sizing_and_replay_flags(tmp_path: Path, fixtures: Path) -> None:
    # minimaxm3_fp8_mi325x_mtp.sh passes --max-num-seqs "$((2 * CONC))" and appends --apply-chat-template
    # to benchmark_lib.sh's replay: the recipe sizes by concurrency and carries the replay flag
    jobs = tmp_path / "jobs"
    key = "minimaxm3-fp8-mi325x-vllm-agentic-mtp"
    proc = slurmx(["recipes", "import", "--inferencex", str(fixtures / "repo-main"), key, "--jobs", str(jobs)],
                  cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recipe = yaml.safe_load((jobs / "minimaxm3_fp8_mi325x_vllm_mtp.yaml").read_text())
    assert recipe["engine"]["max-num-seqs-per-conc"] == 2
    assert "--max-num-seqs" not in recipe["engine"]["flags"]
    assert recipe["replay"]["flags"] == {"--apply-chat-template": True}


def _import(key: str, jobs: Path, tree: Path, cwd: Path) -> None:
    proc = slurmx(["recipes", "import", "--inferencex", str(tree), key, "--jobs", str(jobs)], cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_dp_attention_script_imports_rules_of_its_side_and_check_finds_them(tmp_path: Path, fixtures: Path) -> None:
    """dsv4_fp4_mi355x_vllm_mtp.sh's DEP point (DP attention with ep 1) adds two scheduler flags and sizes
    --max-num-seqs at CONC where pure TP has 2 x CONC: per-conc rules with dp-attn and a DP-attention k. check
    then finds those flags on the DP point only; without the rule it names them."""
    jobs, key, tree = tmp_path / "jobs", "dsv4-fp4-mi355x-vllm-agentic-mtp", fixtures / "repo-main"
    _import(key, jobs, tree, tmp_path)
    path = jobs / "dsv4_fp4_mi355x_vllm_mtp.yaml"
    recipe = yaml.safe_load(path.read_text())
    engine = recipe["engine"]
    assert (engine["max-num-seqs-per-conc"], engine["dp-attn-max-num-seqs-per-conc"]) == (2, 1)
    assert engine["per-conc"] == [
        {"dp-attn": True, "flags": {"--prefill-schedule-interval": 8, "--long-prefill-token-threshold": 16384}}
    ]
    assert recipe["provision"] == {"pip": [{"packages": ["Pillow", "fastapi", "uvicorn"], "flags": ["--quiet"]}]}
    shutil.copy(REVIEWED / "dsv4_fp4_mi355x_vllm_mtp.yaml", jobs / "differences")
    check = ["recipes", "check", "--inferencex", str(tree), key, "--jobs", str(jobs)]
    proc = slurmx(check, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    del engine["per-conc"]
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    proc = slurmx(check, cwd=tmp_path)
    assert proc.returncode == 1
    lines = [line for line in proc.stdout.splitlines() if "undeclared: engine" in line]
    assert len(lines) == 2 and all("dsv4_tp8_conc64" in line and "dp-attn" not in line for line in lines)
    assert any("--prefill-schedule-interval: upstream '8', slurmx None" in line for line in lines)


def test_a_container_patch_script_is_a_provisioning_step_check_compares(tmp_path: Path, fixtures: Path) -> None:
    """kimik3_fp4_mi355x_mtp.sh runs its sibling apply_k3_container_patches.sh: the recipe's provision runs that
    file of the checkout, pinned to the digest imported; check compares the step, so another file is named."""
    jobs, key, tree = tmp_path / "jobs", "kimik3-fp4-mi355x-vllm-agentic-mtp", fixtures / "repo-main"
    _import(key, jobs, tree, tmp_path)
    path = jobs / "kimik3_fp4_mi355x_vllm_mtp.yaml"
    recipe = yaml.safe_load(path.read_text())
    patch = "benchmarks/single_node/agentic/apply_k3_container_patches.sh"
    digest = hashlib.sha256((tree / patch).read_bytes()).hexdigest()
    assert recipe["provision"] == {"scripts": [{"path": patch, "program": "bash", "sha256": digest}]}
    shutil.copy(REVIEWED / "kimik3_fp4_mi355x_vllm_mtp.yaml", jobs / "differences")
    check = ["recipes", "check", "--inferencex", str(tree), key, "--jobs", str(jobs)]
    proc = slurmx(check, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recipe["provision"]["scripts"][0]["sha256"] = "0" * 64  # a recipe reviewed against another file
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    proc = slurmx(check, cwd=tmp_path)
    assert proc.returncode == 1
    assert f"undeclared: provision run {patch}: upstream 'bash sha256:{digest}', slurmx 'bash sha256:{'0' * 64}'" in (
        proc.stdout
    )


def _git(tree: Path, *args: str) -> None:
    import subprocess

    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, env={**os.environ, **env})


def test_the_aiperf_fork_a_checkout_pins_is_imported_and_checked(tree: Path, jobs: Path, tmp_path: Path) -> None:
    """A git checkout names its utils/aiperf submodule's commit: import pins it in the recipe's replay, check
    compares it (the node then checks the checkout it installs from, tests/node/test_provision.py)."""
    first, moved = "754356e" + "1" * 33, "0d2aa05" + "2" * 33
    _git(tree, "init", "-q")
    _git(tree, "add", ".")
    _git(tree, "update-index", "--add", "--cacheinfo", f"160000,{first},utils/aiperf")  # the submodule's gitlink
    _git(tree, "commit", "-qm", "fixture")
    proc = slurmx(["recipes", "import", "--inferencex", str(tree), KEY, "--jobs", str(jobs)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert yaml.safe_load((jobs / f"{STEM}.yaml").read_text())["replay"]["aiperf-revision"] == first
    check = ["recipes", "check", "--inferencex", str(tree), KEY, "--jobs", str(jobs)]
    assert slurmx(check, cwd=tmp_path).returncode == 0
    _git(tree, "update-index", "--cacheinfo", f"160000,{moved},utils/aiperf")
    _git(tree, "commit", "-qm", "aiperf moves")
    proc = slurmx(check, cwd=tmp_path)
    assert proc.returncode == 1
    assert f"undeclared: provision aiperf revision: upstream '{moved}', slurmx '{first}'" in proc.stdout


def test_the_dsv4_seed_recipe_is_what_import_writes_and_keeps_its_notes(
    jobs: Path, tmp_path: Path, fixtures: Path
) -> None:
    """jobs/dsv4_fp4_b200_vllm.yaml is repo-lmcache-agentix's import as is (importing the tree again rewrites
    nothing), header notes included: the lmcache arm's knobs from the connector JSON and the LMCache server's
    flags, the replay's typed fields of that benchmark_lib.sh, the script's pinned pip install. A recipe edited
    by hand is rewritten by the next import, and the notes a person put in its header are kept."""
    key, stem, tree = "dsv4-fp4-b200-vllm-agentic-lmcache", "dsv4_fp4_b200_vllm", fixtures / "repo-lmcache-agentix"
    recipe = jobs / f"{stem}.yaml"
    before = recipe.read_bytes()
    proc = slurmx(["recipes", "import", "--inferencex", str(tree), key, "--jobs", str(jobs)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"{key}: unchanged {recipe}"), proc.stdout
    assert recipe.read_bytes() == before
    data = yaml.safe_load(before)
    assert data["arms"] == {"lmcache": {
        "l1-fraction": 0.75, "chunk-size": 1024, "transfer-mode": "lmcache_driven", "mq-timeout-s": 300,
        "server-flags": {"--l1-init-size-gb": 20, "--max-gpu-workers": 1, "--max-cpu-workers": 8,
                         "--l1-align-bytes": 16384, "--eviction-trigger-watermark": 0.85, "--eviction-ratio": 0.1,
                         "--eviction-policy": "LRU", "--no-separate-object-groups": True}}}  # fmt: skip
    replay = data["replay"]
    assert (replay["warmup-grace-period-s"], replay["cache-warmup-duration-s"]) == ("inf", 600)
    assert replay["warmup-requests-per-lane"] is replay["stats-interval-s"] is replay["trace-idle-gap-cap-s"] is None
    assert data["provision"]["pip"] == [
        {"packages": ["nvidia-cutlass-dsl-libs-cu13==4.5.2"], "flags": ["--force-reinstall", "--no-deps", "--quiet"]}
    ]
    notes = [line for line in before.decode().splitlines() if line.startswith("# Tree: InferenceX refs/heads/")]
    assert notes and "381f4c2b47fcbb2b7c411abecfe5104740731e53" in notes[0]
    recipe.write_text(before.decode().replace("--prefill-schedule-interval: 8", "--prefill-schedule-interval: 16"))
    proc = slurmx(["recipes", "import", "--inferencex", str(tree), key, "--jobs", str(jobs)], cwd=tmp_path)
    assert proc.stdout.startswith(f"{key}: wrote {recipe}"), proc.stdout
    after = recipe.read_text()  # the script's value back, the notes where they were; the date line is today's
    assert undated(after) == undated(before.decode())
    assert f"{DATE_LINE}{datetime.date.today().isoformat()}" in after.splitlines()


def test_a_replay_field_set_by_conc_imports_a_per_conc_replay_rule_check_compares(
    tmp_path: Path, fixtures: Path
) -> None:
    """dsv4_fp4_mi355x_sglang_mtp.sh exports AGENTIC_WARMUP_GRACE_PERIOD=3600 from conc 32, which benchmark_lib.sh
    turns into the replay's --warmup-grace-period: the recipe keeps 1800 and a per-conc replay rule from 32; check
    compares the flag point by point, so without the rule it names the conc 32 and 48 points."""
    jobs, key, tree = tmp_path / "jobs", "dsv4-fp4-mi355x-sglang-agentic-mtp", fixtures / "repo-main"
    _import(key, jobs, tree, tmp_path)
    path = jobs / "dsv4_fp4_mi355x_sglang_mtp.yaml"
    recipe = yaml.safe_load(path.read_text())
    assert "warmup-grace-period-s" not in recipe["replay"]
    rules = [r for r in recipe["engine"]["per-conc"] if "replay" in r]
    assert rules == [{"conc-min": 32, "replay": {"warmup-grace-period-s": 3600}}]
    shutil.copy(REVIEWED / "dsv4_fp4_mi355x_sglang_mtp.yaml", jobs / "differences")
    check = ["recipes", "check", "--inferencex", str(tree), key, "--jobs", str(jobs)]
    proc = slurmx(check, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recipe["engine"]["per-conc"] = [r for r in recipe["engine"]["per-conc"] if "replay" not in r]
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    proc = slurmx(check, cwd=tmp_path)
    assert proc.returncode == 1
    lines = [line for line in proc.stdout.splitlines() if "--warmup-grace-period" in line]
    assert len(lines) == 2 and all("upstream '3600', slurmx '1800'" in line for line in lines), proc.stdout
    assert {line.split()[1] for line in lines} == {
        "dsv4_tp8_conc32_kvdram-hicache_spec-mtp", "dsv4_tp8_conc48_kvdram-hicache_spec-mtp"
    }  # fmt: skip
