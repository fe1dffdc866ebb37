"""LMCache multiprocess server and its LMCacheMPConnector (the module path is always set)."""

from __future__ import annotations

from typing import Any

from slurmx.backends import BackendSpec, ServerPorts
from slurmx.recipes.model import Arm, render_flags

CONNECTOR = "LMCacheMPConnector"
CONNECTOR_MODULE = "lmcache.integration.vllm.lmcache_mp_connector"


def l1_size_gb(total_cpu_dram_gb: int, fraction: float) -> int:
    """L1 pool in whole GB: the recipe's fraction of the point's budget (e.g. 0.75 on B200)."""
    return int(total_cpu_dram_gb * fraction)


def spec(arm: Arm, total_cpu_dram_gb: int, gpus: int, tp: int, version: str | None) -> BackendSpec:
    assert arm.l1_fraction is not None
    return BackendSpec(
        name="lmcache",
        version=version,
        total_cpu_dram_gb=total_cpu_dram_gb,
        gpus=gpus,
        tp=tp,
        l1_size_gb=l1_size_gb(total_cpu_dram_gb, arm.l1_fraction),
        l1_fraction=arm.l1_fraction,
        chunk_size=arm.chunk_size,
        transfer_mode=arm.transfer_mode,
        mq_timeout_s=arm.mq_timeout_s,
        server_flags=render_flags(arm.server_flags),
        startup_timeout_s=arm.startup_timeout_s,
    )


def server_argv(head: list[str], spec: BackendSpec, ports: ServerPorts) -> list[str]:
    return [
        *head,
        "--host", "127.0.0.1",
        "--port", str(ports.lmcache),
        "--http-host", "127.0.0.1",
        "--http-port", str(ports.lmcache_http),
        "--l1-size-gb", str(spec.l1_size_gb),
        "--chunk-size", str(spec.chunk_size),
        "--supported-transfer-mode", str(spec.transfer_mode),
        *spec.server_flags,
    ]  # fmt: skip


def health_url(ports: ServerPorts) -> str:
    return f"http://127.0.0.1:{ports.lmcache_http}/healthcheck"


def metrics_url(ports: ServerPorts) -> str:
    return f"http://127.0.0.1:{ports.lmcache_http}/metrics"


def connector_config(spec: BackendSpec, ports: ServerPorts) -> dict[str, Any]:
    extra: dict[str, Any] = {"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": ports.lmcache}
    if spec.mq_timeout_s is not None:
        extra["lmcache.mp.mq_timeout"] = spec.mq_timeout_s
    return {
        "kv_connector": CONNECTOR,
        "kv_connector_module_path": CONNECTOR_MODULE,
        "kv_role": "kv_both",
        "kv_connector_extra_config": extra,
    }
