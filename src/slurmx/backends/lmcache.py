"""LMCache multiprocess server and its LMCacheMPConnector (the connector's module path is always set)."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from slurmx.backends.base import (
    GB,
    Arm,
    ArmCapture,
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
SERVER = "lmcache"  # its server's process name
# LMCache ships its connector for each engine in an integration module named after that engine
CONNECTOR_MODULES = "lmcache.integration.{engine}.lmcache_mp_connector"
CONNECTOR_MODULE = CONNECTOR_MODULES.format(engine=DEFAULT_ENGINE)  # the default engine's
# Server flags built from the arm's typed knobs: server-flags may not repeat them, or a second
# --chunk-size would bypass the chunk/block rule.
TYPED_FLAGS = frozenset({
    "--host", "--port", "--http-host", "--http-port", "--l1-size-gb", "--chunk-size", "--supported-transfer-mode",
})  # fmt: skip
# the server's address and ports are slurmx's: it binds loopback and picks the ports on the node
SERVER_OWN = frozenset({"--host", "--port", "--http-host", "--http-port"})
# connector settings the arm's typed knobs build (offload()): the server's address and port, the queue timeout
CONNECTOR_SETTINGS = frozenset({"lmcache.mp.host", "lmcache.mp.port", "lmcache.mp.mq_timeout"})
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
        return [Process(SERVER, runtime.wrap(argv, SERVER), server_env, health, spec.startup_timeout_s)]

    def offload(self, spec: LMCacheSpec, ports: ServerPorts, engine: str) -> KvOffload | None:
        extra: dict[str, Any] = {"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": ports["lmcache"]}
        if spec.mq_timeout_s is not None:
            extra["lmcache.mp.mq_timeout"] = spec.mq_timeout_s
        return KvOffload(CONNECTOR, extra, module=CONNECTOR_MODULES.format(engine=engine))

    def probes(self, point: Point) -> list[Point]:
        # L1 is int(budget x fraction): one budget leaves a band of fractions, and a reserve taken off the budget
        # looks like a fraction there too; budgets a half and a third of it pin the fraction (or refuse)
        budget = point.total_cpu_dram_gb
        return [replace(point, total_cpu_dram_gb=b, exp_name="", point_id="") for b in (budget // 2, budget // 3) if b]

    def knobs_from_connector(
        self, configs: list[dict[str, Any]], points: list[Point], handed: Sequence[ArmCapture] = ()
    ) -> dict[str, Any]:
        """The lmcache arm's knobs that rebuild the captured LMCacheMPConnector JSON and the LMCache server's
        flags: l1-fraction from --l1-size-gb over the points' budgets, chunk-size, transfer-mode, the queue
        timeout, and the server's other flags as server-flags (its address and ports are slurmx's)."""
        if not configs or any(c.get("kv_connector") != CONNECTOR for c in configs):
            raise ValueError(f"no {CONNECTOR} JSON was captured on every point")
        extras = [c.get("kv_connector_extra_config", {}) for c in configs]
        if not all(isinstance(e, dict) for e in extras):
            raise ValueError("kv_connector_extra_config is not a JSON object")
        unknown = sorted({k for e in extras for k in e} - CONNECTOR_SETTINGS)
        if unknown:
            raise ValueError(f"connector settings with no lmcache arm knob: {', '.join(unknown)}")
        if len(handed) != len(points) or not all(SERVER in c.servers for c in handed):
            raise ValueError("the script did not start an LMCache server on every point")
        servers = [{n: v for n, v in c.servers[SERVER].items() if n not in SERVER_OWN} for c in handed]
        for name in ("--l1-size-gb", "--chunk-size", "--supported-transfer-mode"):
            if any(name not in s for s in servers):
                raise ValueError(f"the LMCache server is started without {name} on some point (the arm sets it)")
        knobs: dict[str, Any] = {
            "l1-fraction": l1_fraction([(p.total_cpu_dram_gb, s["--l1-size-gb"]) for p, s in zip(points, servers)]),
            "chunk-size": _one([s["--chunk-size"] for s in servers], "the server's --chunk-size"),
            "transfer-mode": _one([s["--supported-transfer-mode"] for s in servers], "--supported-transfer-mode"),
        }
        timeouts = [e.get("lmcache.mp.mq_timeout") for e in extras]
        if (timeout := _one(timeouts, "lmcache.mp.mq_timeout")) is not None:
            knobs["mq-timeout-s"] = timeout
        rest = [{n: v for n, v in s.items() if n not in TYPED_FLAGS} for s in servers]
        if flags := _one(rest, "the LMCache server's flags"):
            knobs["server-flags"] = flags
        return knobs

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


def l1_fraction(sizes: Sequence[tuple[int, object]]) -> float:
    """The fraction with the fewest decimals that l1_size_gb turns each (budget GB, L1 GB) pair's budget into
    its L1; ValueError when none does (L1 is not a fraction of the budget)."""
    pairs = [(budget, l1) for budget, l1 in sizes if isinstance(l1, int) and l1 > 0]
    if not pairs or len(pairs) != len(sizes):
        raise ValueError("the server's --l1-size-gb is not a whole number of GB on every point")
    low = max(l1 / budget for budget, l1 in pairs)
    high = min((l1 + 1) / budget for budget, l1 in pairs)
    for digits in range(1, 7):
        scale: int = 10**digits
        for k in range(math.floor(low * scale), math.ceil(high * scale) + 1):
            fraction = round(k / scale, digits)
            if 0 < fraction <= 1 and all(l1_size_gb(budget, fraction) == l1 for budget, l1 in pairs):
                return fraction
    raise ValueError("the server's --l1-size-gb is no fixed fraction of the points' DRAM budgets")


def _one(values: Sequence[Any], what: str) -> Any:
    if len({json.dumps(v, sort_keys=True) for v in values}) != 1:
        raise ValueError(f"{what} differs between points")
    return values[0]


def check_shm(spec: LMCacheSpec, shm: Path = Path("/dev/shm")) -> str | None:
    """L1 in /dev/shm (a named --shm-name) is silently capped by the tmpfs size: refuse instead."""
    if not spec.shm_name():
        return None
    free = shutil.disk_usage(shm).free
    need = spec.host_memory_bytes()
    return f"/dev/shm has {free / GB:.1f} GB free, the L1 pool needs {need / GB:.0f} GB" if free < need else None


BACKEND = LMCache()
