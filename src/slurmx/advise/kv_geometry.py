"""Bytes of KV cache per token, from the model's config.json and the engine's dtype: each figure with its source."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmx.errors import UserError

_DTYPE_BYTES = {
    "float32": 4, "fp32": 4, "float": 4, "float16": 2, "fp16": 2, "half": 2, "bfloat16": 2, "bf16": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "float8_e4m3fn": 1,
}  # fmt: skip


@dataclass(frozen=True)
class KvGeometry:
    layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    dtype_bytes: int
    sources: dict[str, str]  # figure -> where it came from (file:field, or the engine flag)

    @property
    def bytes_per_token(self) -> int:
        """K and V of every layer's KV heads: layers x kv heads x head dim x 2 x dtype bytes."""
        return self.layers * self.kv_heads * self.head_dim * 2 * self.dtype_bytes

    def describe(self) -> str:
        return (
            f"KV bytes/token {self.bytes_per_token} = {self.layers} layers x {self.kv_heads} kv heads x "
            f"{self.head_dim} head dim x 2 (K, V) x {self.dtype_bytes} ({self.dtype})"
        )

    def as_json(self) -> dict[str, Any]:
        return {"layers": self.layers, "kv-heads": self.kv_heads, "head-dim": self.head_dim, "dtype": self.dtype}


def read_geometry(config_json: Path, engine_dtype: str | None) -> KvGeometry:
    """`engine_dtype`: the KV dtype the engine flags set (over the config's dtype)."""
    try:
        config = json.loads(config_json.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{config_json}: cannot read the model's KV geometry ({exc})") from exc
    if not isinstance(config, dict):
        raise UserError(f"{config_json}: not a JSON object")
    text = config.get("text_config")  # a multimodal model keeps its language model's figures here
    cfg: dict[str, object] = text if isinstance(text, dict) else config
    where = f"{config_json}:" + ("text_config." if cfg is not config else "")

    def number(*names: str) -> tuple[int, str]:
        for name in names:
            value = cfg.get(name)
            if isinstance(value, int) and value > 0:
                return value, where + name
        raise UserError(f"{config_json}: no {' or '.join(names)} (the model's KV geometry)")

    layers, layers_src = number("num_hidden_layers", "n_layers")
    heads, heads_src = number("num_attention_heads")
    kv_heads, kv_src = number("num_key_value_heads", "num_attention_heads")
    if isinstance(cfg.get("head_dim"), int):
        head_dim, head_src = number("head_dim")
    else:
        hidden, hidden_src = number("hidden_size")
        head_dim, head_src = hidden // heads, f"{hidden_src} / {heads_src}"
    dtype = engine_dtype if engine_dtype not in (None, "auto") else None
    dtype_src = "the engine's dtype flag"
    if dtype is None:
        found = cfg.get("dtype") or cfg.get("torch_dtype")
        dtype, dtype_src = (str(found), where + ("dtype" if cfg.get("dtype") else "torch_dtype")) if found else ("", "")
    if dtype not in _DTYPE_BYTES:
        raise UserError(f"{config_json}: KV dtype {dtype or 'unknown'!r} has no known size")
    sources = {"layers": layers_src, "kv heads": kv_src, "head dim": head_src, "dtype": dtype_src}
    return KvGeometry(layers, kv_heads, head_dim, dtype, _DTYPE_BYTES[dtype], sources)
