"""Mooncake store: a master process and MooncakeStoreConnector (rendered and validated; no RDMA here)."""

from __future__ import annotations

from typing import Any

from slurmx.backends import BackendSpec, ServerPorts
from slurmx.recipes.model import Arm, render_flags


def spec(arm: Arm, total_cpu_dram_gb: int, gpus: int, tp: int, version: str | None) -> BackendSpec:
    return BackendSpec(
        name="mooncake",
        version=version,
        total_cpu_dram_gb=total_cpu_dram_gb,
        gpus=gpus,
        tp=tp,
        per_rank_gb=round(total_cpu_dram_gb / tp, 3),
        master_flags=render_flags(arm.master_flags),
        load_failure_policy=arm.load_failure_policy or "recompute",
        startup_timeout_s=arm.startup_timeout_s,
    )


def master_argv(head: list[str], spec: BackendSpec, ports: ServerPorts) -> list[str]:
    return [*head, "--port", str(ports.mooncake_master), *spec.master_flags]


def connector_config(spec: BackendSpec, ports: ServerPorts) -> dict[str, Any]:
    return {
        "kv_connector": "MooncakeStoreConnector",
        "kv_role": "kv_both",
        "kv_load_failure_policy": spec.load_failure_policy,
        "kv_connector_extra_config": {
            "master_server_address": f"127.0.0.1:{ports.mooncake_master}",
            "global_segment_size_gb": spec.per_rank_gb,
        },
    }
