"""SGLang's engine module: the argv InferenceX's scripts start, its parallel flags, its offload flags read both
ways, its KV-pool log line and its readiness and cache-reset endpoints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurmx import engines
from slurmx.engines import KvOffload
from slurmx.results.server_metrics import kv_pool_tokens
from slurmx.upstream.derive import parse_flags
from tests.helpers.points import point_from_row

SGLANG = engines.get("sglang")
ROW = {"image": "lmsysorg/sglang:v0.5.16", "model": "org/m", "model-prefix": "m", "precision": "fp8",
       "framework": "sglang", "runner": "cluster:b200-dgxc", "conc": 4, "tp": 8}  # fmt: skip


@pytest.mark.parametrize(
    ("row", "flags"),
    [
        ({}, ["--tp", "8", "--ep-size", "1"]),
        ({"ep": 8}, ["--tp", "8", "--ep-size", "8"]),
        ({"ep": 8, "dp-attn": True}, ["--tp", "8", "--ep-size", "8", "--dp", "8", "--enable-dp-attention"]),
    ],
)
def test_parallel_flags_are_the_scripts(row: dict[str, object], flags: list[str]) -> None:
    assert SGLANG.parallel_flags(point_from_row({**ROW, **row})) == flags
    assert set(f for f in flags if f.startswith("--")) <= SGLANG.computed_flags  # a recipe may not set them
    # nor any other spelling of the same sizes (qwen3.5_fp8_mi300x_mtp.sh passes the long ones)
    assert {
        "--tensor-parallel-size",
        "--data-parallel-size",
        "--expert-parallel-size",
        "--tp-size",
    } <= SGLANG.computed_flags


def test_the_argv_is_python_dash_m_with_the_model_by_flag() -> None:
    argv = SGLANG.argv(
        ["python3", "-m", "sglang.launch_server"], "org/m", SGLANG.model_flag, "org/m", 8888, ["--tp", "8"]
    )
    assert argv == ["python3", "-m", "sglang.launch_server", "--model-path", "org/m", "--served-model-name", "org/m",
                    "--host", "127.0.0.1", "--port", "8888", "--tp", "8"]  # fmt: skip
    # the server, and the router InferenceX's dsv4 scripts start in front of a DP-attention server
    assert dict(SGLANG.upstream_programs) == {
        "python3 -m sglang.launch_server": "engine", "python3 -m sglang_router.launch_router": "router",
    }  # fmt: skip
    assert SGLANG.router_dp_size_flag is None  # sglang-router's --dp-aware asks the worker


def test_hicache_settings_become_its_flags_and_read_back() -> None:
    flags, env = SGLANG.offload_args(KvOffload("hicache", {"hicache-size": 35}))
    assert (flags, env) == (["--enable-hierarchical-cache", "--hicache-size", "35"], {})
    assert SGLANG.offload_in(parse_flags(flags)[1]) == {"kv_connector": "hicache", "hicache-size": 35}
    assert SGLANG.offload_in({"--tp": 8}) is None
    assert SGLANG.connector_of(["--tp", "8", *flags]) == "hicache"
    assert SGLANG.connector_of(["--tp", "8"]) is None


def test_the_kv_pool_line_counts_one_pool_per_data_parallel_rank(tmp_path: Path) -> None:
    """TP rank 0 of each TP group logs max_total_num_tokens: one line per DP rank without DP attention (each its
    own pool); with it, TP rank 0 alone logs, and each of the dp_size ranks has a pool as large."""
    args = "[2026-01-01 00:00:00] server_args=ServerArgs(tp_size=8, dp_size=4, enable_dp_attention=True)"
    tp_only = ["[2026-01-01 00:00:00 TP0] max_total_num_tokens=524288, chunked_prefill_size=8192"]
    dp = [f"[2026-01-01 00:00:00 DP{r} TP0] max_total_num_tokens=1000, chunked_prefill_size=8192" for r in range(4)]
    dp_attention = [args, "[2026-01-01 00:00:00 DP0 TP0 EP0] max_total_num_tokens=1000, chunked_prefill_size=8192"]
    cases = (("tp.log", tp_only, 524288), ("dp.log", dp, 4000), ("dp-attn.log", dp_attention, 4000))
    for name, lines, tokens in cases:
        (tmp_path / name).write_text("\n".join(lines) + "\n")
        assert kv_pool_tokens([tmp_path / name], SGLANG.kv_pool_log) == tokens, name
    assert not re.search(SGLANG.kv_pool_log.size, "KV Cache is allocated. #tokens: 1000, K size: 1 GB")


def test_readiness_metrics_and_cache_reset() -> None:
    assert (SGLANG.health_path, SGLANG.metrics_path, SGLANG.cache_reset_path()) == (
        "/health",
        "/metrics",
        "/flush_cache",
    )
    assert SGLANG.metrics.required_prefix == SGLANG.metrics.prefix == "sglang:"
    names = [SGLANG.metrics.cached_by_source, SGLANG.metrics.prompt_tokens, SGLANG.metrics.generation_tokens]
    assert all(n.startswith("sglang:") for n in names)
    assert SGLANG.version_of({"sglang": "0.5.16", "torch": "2.9"}) == "0.5.16"
    assert SGLANG.tool_call_flags == ("--tool-call-parser",)


def test_a_flag_naming_the_model_path_renders_as_the_staged_model(tmp_path: Path) -> None:
    """qwen3.5_fp4_b200_sglang_mtp.sh passes --tokenizer-path "$MODEL" (the staged path): the recipe holds
    {model_path} and every rendered engine gets the runtime's path of the served model there."""
    from slurmx.commands.common import load_points
    from tests.helpers.golden import FIXTURES, _DefaultInputs, render_key

    key = "qwen3.5-fp4-b200-sglang-agentic-mtp"
    text = render_key(key, load_points(_DefaultInputs(FIXTURES / "repo-main"), [key]), tmp_path)  # type: ignore[arg-type]  # reads only .config, .clusters and .inferencex
    engine_lines = [line for line in text.splitlines() if "sglang.launch_server" in line]
    assert engine_lines and "{model_path}" not in text
    for line in engine_lines:
        model = re.search(r"--model-path (\S+)", line)
        assert model and f"--tokenizer-path {model.group(1)} " in line, line
