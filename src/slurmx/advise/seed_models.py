"""The seed keys' inputs advise cannot read from a model directory: each model's KV geometry per layer group,
the KV pool a recorded start-up log gives, each figure with its source.

The production models' weights are not on this machine, so their geometry is written here from their published
dimensions; every figure names where it comes from, and `tests/advise/test_seed_models.py` recomputes the totals
by hand and against the published cross-checks (vLLM's 9.62 GiB per 1M-token DeepSeek-V4-Pro sequence in bf16,
the Kimi-K3 start-up log's bytes per token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CHANGELOG = "InferenceX perf-changelog.yaml"


@dataclass(frozen=True)
class KvGroup:
    """Layers that share one KV layout (one vLLM KV-cache group)."""

    name: str
    layers: int
    bytes_per_token_per_layer: float  # per rank, amortized over the group's compression; 0: per-request state
    block_tokens: int  # the group's page in tokens: an LMCache chunk must be a multiple of it
    source: str


@dataclass(frozen=True)
class GroupedGeometry:
    """A model's KV bytes per token on one rank, group by group (MLA, hybrid and compressed layouts)."""

    model: str
    dtype: str
    groups: tuple[KvGroup, ...]

    @property
    def bytes_per_token(self) -> int:
        return round(sum(g.layers * g.bytes_per_token_per_layer for g in self.groups))

    @property
    def sources(self) -> dict[str, str]:
        return {g.name: g.source for g in self.groups}

    def describe(self) -> str:
        terms = " + ".join(f"{g.layers} x {g.bytes_per_token_per_layer:g} ({g.name})" for g in self.groups)
        return f"KV bytes/token/rank {self.bytes_per_token:,} = {terms}, {self.dtype}"

    def as_json(self) -> dict[str, Any]:
        groups = [
            {"name": g.name, "layers": g.layers, "bytes-per-token-per-layer": g.bytes_per_token_per_layer}
            | {"block-tokens": g.block_tokens, "source": g.source}
            for g in self.groups
        ]
        return {"model": self.model, "dtype": self.dtype, "groups": groups}


# Kimi-K3 (moonshotai/Kimi-K3): 93 layers, a KDA/MLA hybrid; only the MLA layers hold paged KV.
_K3_MLA = KvGroup(
    "MLA latent",
    24,
    576,  # kv_lora_rank 512 + qk_rope_head_dim 64, one fp8 byte each (the recipe's --kv-cache-dtype fp8)
    1536,
    f"{CHANGELOG} PR #2391 ('only the 24 gated-MLA layers hold cache'; 'the 93 layers'); latent 512 + 64 as in Kimi's "
    "MLA configs (kv_lora_rank, qk_rope_head_dim: Kimi-Linear's and the K3 DSpark head's config.json); replicated "
    "on every TP rank; block 1536: vLLM pins K3's attention page (jobs/kimik3_fp4_b300_vllm.yaml, run 31404943911)",
)
_K3_KDA = KvGroup(
    "KDA state",
    69,
    0,  # a recurrent state per request, not per token
    1536,
    "93 - 24 layers (PR #2391); KDA keeps one state per request, vLLM pads its page to the "
    "attention page (jobs/kimik3_fp4_b300_vllm.yaml)",
)
_K3_DRAFT = KvGroup(
    "DSpark draft MLA",
    5,
    576,
    1536,
    "Kimi-K3-DSpark config.json (num_hidden_layers 5, kv_lora_rank 512, qk_rope_head_dim 64): the draft's KV, "
    "present when the point speculates (spec-decoding mtp with the recipe's draft-model)",
)

# DeepSeek-V4-Pro (deepseek-ai/DeepSeek-V4-Pro): 61 layers, one shared 512-wide KV latent per token and layer,
# compressed 4x (CSA, with a 128-wide indexer key) or 128x (HCA), plus a 128-token sliding window per request.
_DSV4_CSA = KvGroup(
    "CSA c4 latent",
    30,
    512 / 4,  # 512 fp8 bytes per compressed entry, one entry per 4 tokens
    256,
    "DeepSeek-V4-Pro: 30 CSA + 31 HCA layers, head_dim 512, compress ratios 4 / 128 (its config.json's "
    "compress_ratios, as the vLLM DeepSeek-V4 blog describes); fp8 from --kv-cache-dtype fp8 (RoPE dims kept in "
    "bf16 and scales are not counted: ~+14 %); block 256: vLLM's unified logical block for every V4 group",
)
_DSV4_INDEXER = KvGroup(
    "CSA indexer",
    30,
    128 / 2 / 4,  # a 128-wide key per compressed entry, FP4 (the recipe's use_fp4_indexer_cache=True)
    256,
    "the CSA layers' indexer key, 128 dims (vLLM blog), FP4 per --attention_config.use_fp4_indexer_cache=True",
)
_DSV4_HCA = KvGroup(
    "HCA c128 latent",
    31,
    512 / 128,
    256,
    "the 31 HCA layers, one 512-byte fp8 entry per 128 tokens (as CSA's source)",
)
_DSV4_SWA = KvGroup(
    "sliding window",
    61,
    0,  # 128 tokens x 512 per layer and request: a per-request constant (~4 MB), not per token
    256,
    "every layer's 128-token window (vLLM blog): per request, not per token",
)


@dataclass(frozen=True)
class RecordedPool:
    """A KV pool a start-up log recorded: bytes per rank (the log's GiB), and where."""

    model: str
    runner: str
    gpu_memory_utilization: float
    pool_bytes: int
    recorded_tokens: int  # the log's token count, for the geometry it was measured with
    source: str


RECORDED_POOLS = (
    RecordedPool(
        "moonshotai/Kimi-K3",
        "cluster:b300-nv",
        0.90,
        round(42.23 * 2**30),
        3_249_215,
        f"{CHANGELOG} PR #2371: 'GPU KV resolves to 42.23 GiB / 3,249,215 tokens' (run 30326393603, TP8, "
        "--gpu-memory-utilization 0.9, no draft model)",
    ),
)


def geometry(model: str, draft: bool) -> GroupedGeometry | None:
    """The seed model's KV geometry per rank; `draft`: the point runs the model's speculative draft."""
    if model == "moonshotai/Kimi-K3":
        return GroupedGeometry(model, "fp8", (_K3_MLA, _K3_KDA) + ((_K3_DRAFT,) if draft else ()))
    if model == "deepseek-ai/DeepSeek-V4-Pro":
        return GroupedGeometry(model, "fp8 (indexer fp4)", (_DSV4_CSA, _DSV4_INDEXER, _DSV4_HCA, _DSV4_SWA))
    return None


def recorded_pool(model: str, runner: str, gpu_memory_utilization: float | None) -> RecordedPool | None:
    for pool in RECORDED_POOLS:
        if (pool.model, pool.runner) == (model, runner) and gpu_memory_utilization in (
            None,
            pool.gpu_memory_utilization,
        ):
            return pool
    return None
