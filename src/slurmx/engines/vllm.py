"""vLLM's OpenAI-compatible server."""

from __future__ import annotations

import json
from typing import Any

from slurmx.plan import Point


class VLLM:
    name = "vllm"
    computed_flags = frozenset({
        "--tensor-parallel-size", "--data-parallel-size", "--enable-expert-parallel", "--pipeline-parallel-size",
        "--decode-context-parallel-size", "--max-num-seqs", "--kv-transfer-config", "--host", "--port",
        "--served-model-name", "--model",
    })  # fmt: skip
    metrics_path = "/metrics"
    # mtp: the recipe's own --speculative-config; draft_model needs a second model no recipe names yet.
    spec_methods = frozenset({"none", "mtp"})

    def parallel_flags(self, point: Point) -> list[str]:
        """DEP runs data-parallel attention with expert parallelism."""
        if point.dp_attn:
            flags = ["--tensor-parallel-size", "1", "--data-parallel-size", str(point.tp), "--enable-expert-parallel"]
        else:
            flags = ["--tensor-parallel-size", str(point.tp)]
            if point.ep > 1:
                flags.append("--enable-expert-parallel")
        if point.pp > 1:
            flags += ["--pipeline-parallel-size", str(point.pp)]
        if point.dcp_size > 1:
            flags += ["--decode-context-parallel-size", str(point.dcp_size)]
        return flags

    def argv(
        self, head: list[str], model: str, model_flag: str | None, served_model_name: str, port: int,
        flags: list[str], connector: dict[str, Any] | None,
    ) -> list[str]:  # fmt: skip
        argv = [*head, *([model_flag, model] if model_flag else [model])]
        argv += ["--served-model-name", served_model_name, "--host", "127.0.0.1", "--port", str(port), *flags]
        if connector is not None:
            argv += ["--kv-transfer-config", json.dumps(connector, separators=(",", ":"))]
        return argv

    def cache_reset_path(self) -> str | None:
        # needs VLLM_SERVER_DEV_MODE=1; reset_external also clears the connector's view
        return "/reset_prefix_cache?reset_external=true"


ENGINE = VLLM()
