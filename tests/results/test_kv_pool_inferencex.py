"""The KV pool size read from the engines' logs (results/server_metrics.py:kv_pool_tokens with each engine's
KV_POOL_LOG) against InferenceX's own parsers, imported from the fixture tree: backends/vllm.py and
backends/sglang.py `kv_cache_pool_tokens_from_server_log`, summed over the logs by server_log_metrics.py
`sum_server_log_capacities`, as its aggregation does. The same log texts go to both; they agree, or differ as
docs/inferencex-parity.md declares (docs/kv-pool-log.md: which engine process logs which line). The expected
figures are worked out by hand in each case."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from slurmx.engines import sglang, vllm
from slurmx.engines.base import KvPoolLog
from slurmx.results.server_metrics import kv_pool_tokens
from tests.helpers.inferencex_aggregation import module

# vLLM's line as vllm 0.32 (kv_cache_utils.py:update_kv_cache_capacity) writes it, after the process tag
V = "INFO 12-01 04:24:47 [kv_cache_utils.py:2327] GPU KV cache size: {n} tokens, Maximum concurrency for 8,192 tokens per request: 4.00x"
# SGLang's scheduler line (TP rank 0 of a TP group), after the time and the rank prefix
S = "max_total_num_tokens={n}, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2048, context_len=163840, available_gpu_mem=9.12 GB"
ARGS = "[2026-06-23 01:05:00] server_args=ServerArgs(model_path='m', tp_size=8, dp_size={dp}, moe_dp_size=1, enable_dp_attention={attn})"

# name -> (logs: file name -> text, tokens both agree on)
VLLM_AGREE: dict[str, tuple[dict[str, str], int | None]] = {
    "one engine core": ({"server.log": f"(EngineCore pid=123) {V.format(n='11,294,463')}"}, 11_294_463),
    "three DP engine cores": (
        {"server.log": "\n".join(f"(EngineCore_DP{r} pid={100 + r}) {V.format(n='11,577,333')}" for r in range(3))},
        3 * 11_577_333,
    ),
    "a core's later line wins": (
        {
            "server.log": "\n".join(
                [
                    f"(EngineCore_DP0 pid=123) {V.format(n='4,000')}",
                    f"(EngineCore_DP1 pid=124) {V.format(n='5,000')}",
                    f"(EngineCore_DP0 pid=123) {V.format(n='6,000')}",
                ]
            )
        },
        6_000 + 5_000,
    ),
    "untagged lines: each its own core, summed": (
        {"server.log": f"INFO {V.format(n='1,234,567')}\nINFO {V.format(n='2,000,000')}"},
        3_234_567,
    ),
    "an untagged line beside tagged ones is not a core": (
        {"server.log": f"(APIServer pid=9) {V.format(n='999')}\n(EngineCore_DP0 pid=10) {V.format(n='1,000')}"},
        1_000,
    ),
    "every node's log, summed": (
        {
            "watchtower-a.out": f"(EngineCore_DP0 pid=1) {V.format(n='5,000,000')}\n(EngineCore_DP1 pid=2) {V.format(n='6,500,000')}",
            "watchtower-b.out": f"(EngineCore_DP2 pid=1) {V.format(n='7,000,000')}",
        },
        18_500_000,
    ),
    "zero, commas only and no line": (
        {
            "a.log": f"(EngineCore pid=1) {V.format(n='0')}\n(EngineCore_DP1 pid=2) {V.format(n=',')}",
            "b.log": "INFO no pool line\nINFO GPU KV cache usage: 12%",
        },
        None,
    ),
}

SGLANG_AGREE: dict[str, tuple[dict[str, str], int | None]] = {
    "TP only: TP rank 0 logs the one pool": (
        {"server.log": f"{ARGS.format(dp=1, attn=False)}\n[2026-06-23 01:10:14 TP0] {S.format(n=524288)}"},
        524_288,
    ),
    "DP attention: TP rank 0 alone logs, dp_size pools": (
        {"server.log": f"{ARGS.format(dp=8, attn=True)}\n[2026-06-23 01:10:14 DP0 TP0 EP0] {S.format(n=1172224)}"},
        8 * 1_172_224,
    ),
    "DP attention without EP": (
        {"server.log": f"{ARGS.format(dp=4, attn=True)}\n[2026-06-23 01:10:14 DP0 TP0] {S.format(n=1000)}"},
        4 * 1_000,
    ),
    "plain DP: each DP rank's TP rank 0 logs its own pool": (
        {
            "server.log": "\n".join(
                [
                    ARGS.format(dp=2, attn=False),
                    f"[2026-06-23 01:10:14 DP0] {S.format(n=1000)}",
                    f"[2026-06-23 01:10:14 DP1] {S.format(n=1200)}",
                ]
            )
        },
        2_200,
    ),
    "a rank's repeated line counts once": (
        {
            "server.log": "\n".join(
                [
                    f"[2026-06-23 01:10:14 DP0 TP0 EP0] {S.format(n=1000)}",
                    f"[2026-06-23 01:10:14 DP1 TP1 EP1] {S.format(n=1200)}",
                    f"[2026-06-23 01:10:14 DP1 TP1 EP1] {S.format(n=1200)}",
                ]
            )
        },
        2_200,
    ),
    "multinode DP attention: the head logs, the other node has args only": (
        {
            "server.log": f"{ARGS.format(dp=16, attn=True)}\n[2026-06-23 01:10:14 DP0 TP0 EP0] {S.format(n=500)}",
            "node02-server.log": ARGS.format(dp=16, attn=True),
        },
        16 * 500,
    ),
    "the pool's own allocation line is not read": (
        {"server.log": "[2026-06-23 01:10:14 DP0 TP0 EP0] KV Cache is allocated. #tokens: 1000, K size: 1.0 GB"},
        None,
    ),
}

# name -> (engine, logs, InferenceX's figure, slurmx's figure): each a row of docs/inferencex-parity.md
DECLARED: dict[str, tuple[str, dict[str, str], int | None, int | None]] = {
    "vLLM's CPU build logs a CPU pool": (
        "vllm",
        {"engine.log": f"(EngineCore pid=20582) {V.format(n='1,048,576').replace('GPU KV', 'CPU KV')}"},
        None,
        1_048_576,
    ),
    "SGLang's pipeline stages each log the one pool": (
        "sglang",
        {
            "server.log": "\n".join(
                [
                    ARGS.format(dp=1, attn=False),
                    f"[2026-06-23 01:10:14 PP0 TP0] {S.format(n=1000)}",
                    f"[2026-06-23 01:10:14 PP1 TP0] {S.format(n=1000)}",
                ]
            )
        },
        2_000,
        1_000,
    ),
}

ENGINES: dict[str, KvPoolLog] = {"vllm": vllm.KV_POOL_LOG, "sglang": sglang.KV_POOL_LOG}


def _write(tmp_path: Path, logs: dict[str, str]) -> list[Path]:
    paths = []
    for name, text in logs.items():
        (tmp_path / name).write_text(text + "\n")
        paths.append(tmp_path / name)
    return paths


def _theirs(engine: str, paths: list[Path]) -> Any:
    sum_capacities = module("server_log_metrics").sum_server_log_capacities
    module("server_metrics")  # imports InferenceX's backends package
    backends = importlib.import_module(f"utils.agentic.aggregation.backends.{engine}")
    backend = {"vllm": "VllmBackend", "sglang": "SglangBackend"}[engine]
    return sum_capacities(paths, getattr(backends, backend).kv_cache_pool_tokens_from_server_log)


@pytest.mark.parametrize(("engine", "case"), [("vllm", c) for c in VLLM_AGREE] + [("sglang", c) for c in SGLANG_AGREE])
def test_the_pool_is_inferencexs(tmp_path: Path, engine: str, case: str) -> None:
    logs, tokens = (VLLM_AGREE if engine == "vllm" else SGLANG_AGREE)[case]
    paths = _write(tmp_path, logs)
    assert _theirs(engine, paths) == tokens
    assert kv_pool_tokens(paths, ENGINES[engine]) == tokens


@pytest.mark.parametrize("case", list(DECLARED))
def test_the_declared_differences(tmp_path: Path, case: str) -> None:
    engine, logs, theirs, ours = DECLARED[case]
    paths = _write(tmp_path, logs)
    assert _theirs(engine, paths) == theirs
    assert kv_pool_tokens(paths, ENGINES[engine]) == ours


def test_the_declared_differences_are_listed() -> None:
    parity = (Path(__file__).parents[2] / "docs" / "inferencex-parity.md").read_text()
    for case in DECLARED:
        assert case in parity, case
