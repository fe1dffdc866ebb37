"""LMCache multiprocess server and its LMCacheMPConnector (the connector's module path is always set)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from slurmx.backends.base import (
    GB,
    Arm,
    ArmProblem,
    BackendSpec,
    BaseBackend,
    LogPattern,
    TierReading,
    backend_version,
)
from slurmx.engines import DEFAULT as DEFAULT_ENGINE
from slurmx.engines.base import KvOffload
from slurmx.flags import Flags, render_flags
from slurmx.plan import Point
from slurmx.process import COMMON_ENV, Process, ServerPorts, loopback
from slurmx.runtimes.base import Runtime

CONNECTOR = "LMCacheMPConnector"
# LMCache ships its connector for each engine in an integration module named after that engine
CONNECTOR_MODULES = "lmcache.integration.{engine}.lmcache_mp_connector"
CONNECTOR_MODULE = CONNECTOR_MODULES.format(engine=DEFAULT_ENGINE)  # the default engine's
# Server flags built from the arm's typed knobs: server-flags may not repeat them, or a second
# --chunk-size would bypass the chunk/block rule.
TYPED_FLAGS = frozenset({
    "--host", "--port", "--http-host", "--http-port", "--l1-size-gb", "--chunk-size", "--supported-transfer-mode",
})  # fmt: skip
# Allocator settings that break LMCache's CUDA-IPC export of the KV cache.
IPC_BREAKING_FLAGS = ("--enable-cumem-allocator",)
ALLOC_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
# LMCache 0.5.6's multiprocess server metrics (counters without `_total`): figure name -> metric.
TIER_COUNTERS = {
    "lookup_requested_tokens": "lmcache_mp_lookup_requested_tokens",
    "lookup_hit_tokens": "lmcache_mp_lookup_hit_tokens",
    "chunks_stored": "lmcache_mp_l1_write_chunks",
    "chunks_read": "lmcache_mp_l1_read_chunks",
}
TIER_GAUGES = {"l1_usage_ratio_max": "lmcache_mp_l1_usage_ratio", "l1_bytes_max": "lmcache_mp_l1_memory_usage_bytes"}
# Lines LMCache 0.5.6 (server) and its connector (engine log) print when the tier silently degrades.
LOG_PATTERNS = (
    # PR #2597's guard, on the same line: without c_ops 77-98 % of stores fail, so the point fails at start
    LogPattern(
        "lmcache",
        r"(cuda_)?c?_?ops compiled extension not found|stays on the torch baseline",
        "LMCache fell back to torch ops (no compiled extension)",
        fatal=True,
    ),
    LogPattern("lmcache", r"Insufficient /dev/shm capacity", "LMCache's L1 fell back from /dev/shm to pickle"),
    LogPattern("lmcache", r"builtin hash without PYTHONHASHSEED", "LMCache hashes without PYTHONHASHSEED"),
    LogPattern("engine", r"did not respond to register_kv_caches", "the engine could not register its KV caches"),
    LogPattern("engine", r"No supported \w+ connector found", "LMCache has no connector for this device"),
)


class LMCacheArm(Arm):
    l1_fraction: float = Field(gt=0, le=1)  # L1 = this x total-cpu-dram-gb
    chunk_size: int = Field(gt=0)
    transfer_mode: Literal["lmcache_driven", "engine_driven", "auto"]
    mq_timeout_s: float | None = None
    server_flags: Flags = Field(default_factory=dict)
    import_check: list[str] = Field(default_factory=list)  # modules beyond the connector's (provisioning)


class LMCacheSpec(BackendSpec):
    l1_size_gb: int
    l1_fraction: float
    chunk_size: int
    transfer_mode: str
    mq_timeout_s: float | None = None
    server_flags: list[str] = []
    import_check: list[str] = []

    def host_memory_bytes(self) -> int:
        return self.l1_size_gb * GB

    def shm_name(self) -> str:
        """The named /dev/shm segment L1 lives in, or "" for process memory."""
        flags = self.server_flags
        if "--shm-name" not in flags or flags.index("--shm-name") + 1 >= len(flags):
            return ""
        return flags[flags.index("--shm-name") + 1]


def l1_size_gb(total_cpu_dram_gb: int, fraction: float) -> int:
    """L1 pool in whole GB: the recipe's fraction of the point's budget (e.g. 0.75 on B200)."""
    return int(total_cpu_dram_gb * fraction)


class LMCache(BaseBackend[LMCacheSpec]):
    name = "lmcache"
    arm_model = LMCacheArm
    spec_model = LMCacheSpec
    port_names = ("lmcache", "lmcache-http")
    connector = CONNECTOR
    log_patterns = LOG_PATTERNS
    distribution = "lmcache"
    preloads_torch = True

    def check_arm(self, arm: Arm, engine_flags: Flags, env: dict[str, str], block_size: int) -> list[ArmProblem]:
        assert isinstance(arm, LMCacheArm)
        problems = [
            ArmProblem(("server-flags", name), f"{name} is built from the arm's typed fields, not server-flags")
            for name in arm.server_flags
            if name in TYPED_FLAGS
        ]
        if arm.chunk_size % block_size:
            problems.append(ArmProblem(
                ("chunk-size",), f"chunk-size {arm.chunk_size} is not a multiple of the engine block size {block_size}"
            ))  # fmt: skip
        for flag in IPC_BREAKING_FLAGS:
            if engine_flags.get(flag) not in (None, False):
                problems.append(ArmProblem((), f"{flag} breaks LMCache's CUDA-IPC export: list it under remove"))
        for name in ALLOC_ENV:
            if "expandable_segments:true" in env.get(name, "").replace(" ", "").lower():
                problems.append(ArmProblem((), f"{name}=expandable_segments breaks LMCache's CUDA-IPC export"))
        return problems

    def spec(self, arm: Arm, point: Point) -> LMCacheSpec:
        assert isinstance(arm, LMCacheArm)
        size = l1_size_gb(point.total_cpu_dram_gb, arm.l1_fraction)
        if not size:
            raise ArmProblem(("l1-fraction",), f"L1 of {point.exp_name} rounds to 0 GB of {point.total_cpu_dram_gb} GB")
        return LMCacheSpec(
            name=self.name,
            version=backend_version(point),
            l1_size_gb=size,
            l1_fraction=arm.l1_fraction,
            chunk_size=arm.chunk_size,
            transfer_mode=arm.transfer_mode,
            mq_timeout_s=arm.mq_timeout_s,
            server_flags=render_flags(arm.server_flags),
            import_check=list(arm.import_check),
            startup_timeout_s=arm.startup_timeout_s,
        )

    def servers(self, spec: LMCacheSpec, ports: ServerPorts, runtime: Runtime, env: dict[str, str]) -> list[Process]:
        argv = [
            runtime.lmcache_bin, "server",
            "--host", "127.0.0.1",
            "--port", str(ports["lmcache"]),
            "--http-host", "127.0.0.1",
            "--http-port", str(ports["lmcache-http"]),
            "--l1-size-gb", str(spec.l1_size_gb),
            "--chunk-size", str(spec.chunk_size),
            "--supported-transfer-mode", spec.transfer_mode,
            *spec.server_flags,
        ]  # fmt: skip
        # the server hashes chunks with the same seed as the engine, or no lookup ever hits
        server_env = {**COMMON_ENV, "PYTHONHASHSEED": env["PYTHONHASHSEED"], "LMCACHE_DISABLE_BANNER": "1"}
        health = loopback(ports["lmcache-http"], "/healthcheck")
        return [Process("lmcache", runtime.wrap(argv, "lmcache"), server_env, health, spec.startup_timeout_s)]

    def offload(self, spec: LMCacheSpec, ports: ServerPorts, engine: str) -> KvOffload | None:
        extra: dict[str, Any] = {"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": ports["lmcache"]}
        if spec.mq_timeout_s is not None:
            extra["lmcache.mp.mq_timeout"] = spec.mq_timeout_s
        return KvOffload(CONNECTOR, extra, module=CONNECTOR_MODULES.format(engine=engine))

    def preflight(self, spec: LMCacheSpec, runtime: Runtime) -> list[str]:
        return [p for p in (check_shm(spec),) if p]

    def import_checks(self, spec: LMCacheSpec, engine: str = DEFAULT_ENGINE) -> list[str]:
        return [CONNECTOR_MODULES.format(engine=engine), *spec.import_check]

    def metrics_urls(self, spec: LMCacheSpec, ports: ServerPorts) -> list[str]:
        return [loopback(ports["lmcache-http"], "/metrics")]

    def cache_reset_urls(self, spec: LMCacheSpec, ports: ServerPorts) -> list[str]:
        return [loopback(ports["lmcache-http"], "/cache/clear")]

    def tier_reading(self, deltas: Mapping[str, float], gauges: Mapping[str, float]) -> TierReading:
        counters = {field: deltas[name] for field, name in TIER_COUNTERS.items() if name in deltas}
        counters |= {field: gauges[name] for field, name in TIER_GAUGES.items() if name in gauges}
        hits = counters.get("lookup_hit_tokens")
        absent = None if hits is not None else "no LMCache lookup counter in the replay's metrics export"
        return TierReading(counters, hits, absent)


def check_shm(spec: LMCacheSpec, shm: Path = Path("/dev/shm")) -> str | None:
    """L1 in /dev/shm (a named --shm-name) is silently capped by the tmpfs size: refuse instead."""
    if not spec.shm_name():
        return None
    free = shutil.disk_usage(shm).free
    need = spec.host_memory_bytes()
    return f"/dev/shm has {free / GB:.1f} GB free, the L1 pool needs {need / GB:.0f} GB" if free < need else None


BACKEND = LMCache()
