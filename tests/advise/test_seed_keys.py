"""`slurmx advise` on the seed keys (rendered only here): the KV geometry recomputed by hand from the models'
published dimensions, the trace stand-in's statistics, and the predicted cliff and offload arms as printed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slurmx.advise.seed_models import geometry, recorded_pool
from slurmx.advise.standin import UNIT, StandIn
from tests.advise.test_advise_as_users_run_it import slurmx
from tests.conftest import ROOT

K3 = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"
DSV4 = "dsv4-fp4-b200-vllm-agentic-lmcache"
CONFIG = [
    "--config",
    str(ROOT / "configs" / "nvidia-master.yaml"),
    "--clusters",
    str(ROOT / "configs" / "clusters.yaml"),
]


def test_kimi_k3_bytes_per_token_from_its_published_dims() -> None:
    mla = 24 * (512 + 64) * 1  # 24 MLA layers, kv_lora_rank + rope dims, fp8; the 69 KDA layers: per request
    target = geometry("moonshotai/Kimi-K3", draft=False)
    assert target is not None and target.bytes_per_token == mla == 13_824
    drafted = geometry("moonshotai/Kimi-K3", draft=True)
    assert drafted is not None and drafted.bytes_per_token == mla + 5 * 576  # the DSpark head's 5 MLA layers
    # the recorded start-up log (42.23 GiB for 3,249,215 tokens, no draft) agrees with the geometry within 1 %
    logged = 42.23 * 2**30 / 3_249_215
    assert abs(logged - mla) / mla < 0.01


def test_deepseek_v4_pro_bytes_per_token_from_its_published_dims() -> None:
    # 30 CSA layers (one 512-wide entry per 4 tokens, a 128-wide indexer key per entry), 31 HCA (1 per 128)
    bf16 = 30 * 512 * 2 / 4 + 30 * 128 * 2 / 4 + 31 * 512 * 2 / 128
    assert round(bf16 * 2**20 / 2**30, 2) == 9.62  # vLLM's DeepSeek-V4 blog: 9.62 GiB per 1M-token sequence
    fp8 = 30 * 512 / 4 + 30 * 128 * 0.5 / 4 + 31 * 512 / 128  # the recipe: fp8 KV, FP4 indexer
    found = geometry("deepseek-ai/DeepSeek-V4-Pro", draft=False)
    assert found is not None and found.bytes_per_token == fp8 == 4_444
    assert {g.block_tokens for g in found.groups} == {256}
    assert geometry("some/other-model", draft=False) is None


def test_recorded_pool_is_found_only_for_its_model_runner_and_memory_share() -> None:
    assert recorded_pool("moonshotai/Kimi-K3", "cluster:b300-nv", 0.9) is not None
    assert recorded_pool("moonshotai/Kimi-K3", "cluster:b300-nv", 0.95) is None
    assert recorded_pool("deepseek-ai/DeepSeek-V4-Pro", "cluster:b200-dgxc", None) is None


def test_the_stand_in_has_the_stated_statistics() -> None:
    standin = StandIn("semianalysisai/cc-traces-weka-062126")
    sessions = standin.sessions(lanes=3)
    assert len(sessions) == 6 and all(len(turns) == 21 for turns in sessions)
    first, last = sessions[0][0].prompt, sessions[0][-1].prompt
    assert abs(len(first) * UNIT - 118_000) <= UNIT and abs(len(last) * UNIT - 230_000) <= 4 * UNIT
    assert not set(first) & set(sessions[1][0].prompt)  # no prefix shared between sessions
    assert [t.measured for t in sessions[0]] == [False] + [True] * 20  # the first turn warms the cache
    # the ceiling: each measured turn's prompt is its predecessor's plus new tokens
    measured = sessions[0][1:]
    reused = sum(len(sessions[0][i].prompt) for i in range(20))
    assert abs(reused / sum(len(t.prompt) for t in measured) - 0.97) < 0.005


def advise_json(keys: list[str], tmp_path: Path, *extra: str) -> list[dict[str, Any]]:
    proc = slurmx(["advise", *keys, *CONFIG, "--json", *extra], tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows: list[dict[str, Any]] = json.loads(proc.stdout)
    return rows


def test_kimi_k3_cliff_and_offload_arm_with_its_inputs_named(tmp_path: Path) -> None:
    rows = {row["conc"]: row for row in advise_json([K3], tmp_path)}
    assert sorted(rows) == [4, 8, 10, 16]
    pool = int(round(42.23 * 2**30) // 16_704)  # the recorded bytes over target + draft KV per token
    for row in rows.values():
        assert row["kv-bytes-per-token"] == 16_704 and row["kv-pool-tokens"] == pool
        assert any("STAND-IN for semianalysisai/cc-traces-weka-062126" in line for line in row["inputs"])
        assert any("PR #2371" in line for line in row["inputs"])
        assert "ok: chunk-size 3072 is a multiple of every KV group's block size (1536)" in row["checks"]
        assert any(c.startswith("ok: DRAM budget 1889 GB <= InferenceX's cap") for c in row["checks"])
    # 4-10 sessions of <= 230k tokens fit 2.7M tokens; 16 (3.7M) do not
    assert all(rows[c]["gpu-hit-rate"] > 0.9 and not rows[c]["past-cliff"] for c in (4, 8, 10))
    assert rows[16]["past-cliff"] and rows[16]["gpu-hit-rate"] < rows[16]["ceiling"] - 0.3
    assert [c for c, row in sorted(rows.items()) if row["verdict"] == "helps"] == [16]


def test_table_prints_the_cliff_line_and_the_inputs(tmp_path: Path) -> None:
    proc = slurmx(["advise", K3, *CONFIG], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "TP8: predicted GPU hit % by conc 4: " in proc.stdout
    assert "cliff at conc 16" in proc.stdout and "offload arm helps at conc: 16" in proc.stdout
    assert "input: KV bytes/token/rank 16,704 = 24 x 576 (MLA latent)" in proc.stdout
    assert "input: KV pool 2,714,566 tokens/rank = 42.23 GiB / 16,704 B" in proc.stdout


def test_deepseek_v4_without_a_recorded_pool_gives_the_live_set_then_the_cliff_with_one(tmp_path: Path) -> None:
    unpooled = advise_json([DSV4], tmp_path)
    assert all(row["gpu-hit-rate"] is None and row["verdict"] == "-" for row in unpooled)
    assert all(row["working-set-tokens"] > 0 for row in unpooled)
    rows = {
        (row["parallelism"], row["conc"]): row for row in advise_json([DSV4], tmp_path, "--kv-pool-tokens", "1500000")
    }
    # TP8 holds 16-32 sessions of every lane in one pool; DEP8 spreads them over 8 ranks' pools
    assert rows[("TP8", 16)]["past-cliff"] and not rows[("DEP8", 16)]["past-cliff"]
    assert rows[("DEP8", 68)]["past-cliff"]
    assert rows[("DEP8", 16)]["working-set-tokens"] < rows[("TP8", 16)]["working-set-tokens"] / 4


def test_plan_advise_column_only_behind_its_flag(tmp_path: Path) -> None:
    local = [
        "--config",
        str(ROOT / "configs" / "local-master.yaml"),
        "--clusters",
        str(ROOT / "configs" / "clusters.yaml"),
    ]
    key = "tiny-fp32-local-vllm-agentic-lmcache"
    plain = slurmx(["plan", key, *local, "--json"], tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert all("advise" not in row for row in json.loads(plain.stdout))
    proc = slurmx(["plan", key, *local, "--json", "--advise"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    by_conc: dict[tuple[int, str], str] = {
        (r["conc"], r["kv-offload-backend"]["name"] if r.get("kv-offload-backend") else "none"): r["advise"]
        for r in json.loads(proc.stdout)
    }
    # docs/advise.md's local figures: 59.6 % at conc 2, 35.5 % at conc 4; every arm's tier serves >= 5 %
    assert by_conc[(2, "none")] == "60% an offload arm would help" and by_conc[(4, "lmcache")] == "36% helps"
    table = slurmx(["plan", K3, DSV4, *CONFIG, "--advise"], tmp_path)
    assert table.returncode == 0, table.stderr
    assert "GPU hit / offload" in table.stdout and "40% helps" in table.stdout and "- (no KV pool)" in table.stdout


def test_checks_name_a_chunk_that_misses_a_group_and_a_budget_over_the_cap() -> None:
    from dataclasses import replace

    from slurmx.advise.predict import constraint_checks
    from slurmx.inputs import load_inputs
    from slurmx.recipes.resolve import resolve

    loaded = load_inputs([ROOT / "configs" / "nvidia-master.yaml"], ROOT / "configs" / "clusters.yaml", [K3])
    point = loaded.points[0]
    spec = resolve(point, loaded.recipes())
    profile = loaded.clusters.profiles[point.runner]
    grouped = geometry("moonshotai/Kimi-K3", draft=True)
    short = spec.model_copy(update={"backend": spec.backend.model_copy(update={"chunk_size": 768})})
    checks = constraint_checks(point, short, profile, grouped)
    assert checks[0].startswith("problem: chunk-size 768 is not a multiple of the block size of")
    assert "MLA latent 1536" in checks[0]
    over = constraint_checks(replace(point, total_cpu_dram_gb=3100), spec, profile, grouped)
    assert over[-1].startswith("problem: DRAM budget 3100 GB > InferenceX's cap of 2,861,022 MiB (3,000 GB)")


def test_multinode_keys_say_why_they_have_no_prediction(tmp_path: Path) -> None:
    rows = advise_json(["kimik3-fp4-h200-vllm-agentic", "dsv4-fp4-gb300-dynamo-vllm-agentic"], tmp_path)
    assert rows and all(row["gpu-hit-rate"] is None for row in rows)
    assert all(row["note"] and row["note"].startswith("no prediction: ") for row in rows)


def test_non_vllm_engines_are_not_modelled_and_dcp_multiplies_the_pool(tmp_path: Path, fixtures: Path) -> None:
    masters = ["--config", str(fixtures / "nvidia-master.yaml"), "--config", str(fixtures / "amd-master.yaml")]
    proc = slurmx(
        ["advise", "dsv4-fp4-mi355x-sglang-agentic-mtp", "kimik3-fp4-b300-vllm-agentic-dspark", *masters, "--json"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    rows: list[dict[str, Any]] = json.loads(proc.stdout)
    sglang = [r for r in rows if r["config-key"] == "dsv4-fp4-mi355x-sglang-agentic-mtp"]
    assert sglang and all(
        r["note"] == "no prediction: advise models an LRU block prefix cache; sglang's is not modelled" for r in sglang
    )
    # main's K3 DSpark key runs TP8-DCP8: each rank holds 1/8 of a token's KV, so the same 42.23 GiB holds 8x
    pooled = [r for r in rows if r["config-key"] == "kimik3-fp4-b300-vllm-agentic-dspark" and r["kv-pool-tokens"]]
    assert pooled and all(r["parallelism"] == "TP8-DCP8" for r in pooled)
    assert all(r["kv-pool-tokens"] == int(round(42.23 * 2**30) // (16_704 / 8)) for r in pooled)
