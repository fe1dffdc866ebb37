"""Typed points from InferenceX-style rows, for tests that start from a row as InferenceX writes it."""

from __future__ import annotations

from typing import Any

from slurmx.config.master import KvOffloadBackend, Router, WorkerSpec
from slurmx.plan import Point


def point_from_row(row: dict[str, Any], config_key: str = "test-key") -> Point:
    """An agentic point with the row's fields (exp-name and point-id taken as given): multinode when the row
    has prefill and decode workers, single-node otherwise."""
    backend, router = row.get("kv-offload-backend"), row.get("router")
    prefill, decode = row.get("prefill"), row.get("decode")
    return Point(
        config_key=row.get("config-key", config_key),
        scenario=row.get("scenario-type", "agentic-coding"),
        image=row["image"],
        model=row["model"],
        model_prefix=row["model-prefix"],
        precision=row["precision"],
        framework=row["framework"],
        runner=row["runner"],
        multinode=prefill is not None,
        disagg=bool(row.get("disagg", False)),
        spec_decoding=row.get("spec-decoding", "none"),
        conc=row["conc"],
        tp=row["tp"],
        pp=row.get("pp", 1),
        dcp_size=row.get("dcp-size", 1),
        pcp_size=row.get("pcp-size", 1),
        ep=row.get("ep", 1),
        dp_attn=bool(row.get("dp-attn", False)),
        prefill=WorkerSpec.model_validate(prefill) if prefill else None,
        decode=WorkerSpec.model_validate(decode) if decode else None,
        kv_offloading=row.get("kv-offloading", "none"),
        kv_offload_backend=KvOffloadBackend(**backend) if backend else None,
        router=Router(**router) if router else None,
        kv_p2p_transfer=row.get("kv-p2p-transfer"),
        total_cpu_dram_gb=row.get("total-cpu-dram-gb", 0),
        duration_s=row.get("duration"),
        exp_name=row.get("exp-name", ""),
        point_id=row.get("point-id", ""),
    )
