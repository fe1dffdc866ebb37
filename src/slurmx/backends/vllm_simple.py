"""vLLM's own SimpleCPUOffloadConnector: per-rank bytes from the point's budget."""

from __future__ import annotations

from typing import Any

from slurmx.backends import BackendSpec


def spec(total_cpu_dram_gb: int, gpus: int, tp: int, version: str | None) -> BackendSpec:
    return BackendSpec(
        name="vllm-simple",
        version=version,
        total_cpu_dram_gb=total_cpu_dram_gb,
        gpus=gpus,
        tp=tp,
        cpu_bytes_per_rank=int(total_cpu_dram_gb * 1e9 / gpus),
    )


def connector_config(spec: BackendSpec) -> dict[str, Any]:
    return {
        "kv_connector": "SimpleCPUOffloadConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use_per_rank": spec.cpu_bytes_per_rank},
    }
