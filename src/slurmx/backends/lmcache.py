"""LMCache multiprocess server and its LMCacheMPConnector (the connector's module path is always set).

Two layouts, the arm's `servers` knob:
- `one` (the default): one server holds the whole L1 pool; the connector JSON names its host and port;
- `per-rank`: one server per TP rank (`lmcache.0` .. `lmcache.<TP-1>`), each holding `L1 // TP` GB, each on its
  own pair of ports, health-checked and torn down like the one; the connector JSON lists every server's URL
  (`lmcache.mp.server_urls`), as InferenceX's MiniMax-M3 MI300X/MI355X scripts start theirs.

`in-process: true` starts no server: every engine rank holds its own LMCache local-CPU pool through the engine's
in-process connector (ATOM's `lmcache_offload`), configured by LMCache's own env (LMCACHE_LOCAL_CPU,
LMCACHE_MAX_LOCAL_CPU_SIZE in GB a rank, LMCACHE_CHUNK_SIZE). `servers` then sizes each rank's pool: `per-rank`
L1 // TP (kimik3_fp4_mi355x_atom_mtp.sh: TOTAL_CPU_DRAM_GB / TP), `one` the whole L1 in every rank
(glm5.2_fp4_mi355x_atom_mtp.sh: TOTAL_CPU_DRAM_GB each).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
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
    budget_probes,
)
from slurmx.engines import DEFAULT as DEFAULT_ENGINE
from slurmx.engines.base import KvOffload
from slurmx.flags import Flags, render_flags
from slurmx.plan import Point
from slurmx.process import COMMON_ENV, Process, ServerPorts, loopback
from slurmx.runtimes.base import Runtime

CONNECTOR = "LMCacheMPConnector"
IN_PROCESS = "lmcache-in-process"  # the engine's own in-process LMCache connector, by its engine-neutral name
# LMCache's env config of an in-process local-CPU pool (lmcache/v1/config.py reads LMCACHE_<FIELD>)
LOCAL_CPU_ENV, POOL_ENV, CHUNK_ENV = "LMCACHE_LOCAL_CPU", "LMCACHE_MAX_LOCAL_CPU_SIZE", "LMCACHE_CHUNK_SIZE"
# LMCache ships its connector for each engine in an integration module named after that engine
CONNECTOR_MODULES = "lmcache.integration.{engine}.lmcache_mp_connector"
CONNECTOR_MODULE = CONNECTOR_MODULES.format(engine=DEFAULT_ENGINE)  # the default engine's
# Server flags built from the arm's typed knobs: server-flags may not repeat them, or a second
# --chunk-size would bypass the chunk/block rule.
TYPED_FLAGS = frozenset({
    "--host", "--port", "--http-host", "--http-port", "--l1-size-gb", "--chunk-size", "--supported-transfer-mode",
})  # fmt: skip
PORT_FLAGS = frozenset({"--port", "--http-port", "--l1-size-gb"})  # one server's own (import compares the rest)
# what the backend writes into the connector JSON from the point and the arm's typed knobs
CONNECTOR_OWN = frozenset({"lmcache.mp.host", "lmcache.mp.port", "lmcache.mp.server_urls", "lmcache.mp.mq_timeout"})
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


SERVER = "lmcache"  # the one server's process name; per-rank servers are lmcache.0, lmcache.1, ...
PORT, HTTP_PORT = "lmcache", "lmcache-http"
HOST = "127.0.0.1"
SHM_CAP = 0.9  # the share of free /dev/shm an L1 pool may take (InferenceX's MI355X MiniMax-M3 rule)
GIB = 1 << 30
Layout = Literal["one", "per-rank"]


class LMCacheArm(Arm):
    l1_fraction: float = Field(gt=0, le=1)  # L1 = this x total-cpu-dram-gb
    servers: Layout = "one"  # per-rank: one server per TP rank, each L1 // TP GB
    # refuse a point whose L1 pool exceeds SHM_CAP of free /dev/shm even without --shm-name (the script's own check)
    shm_check: bool = False
    chunk_size: int = Field(gt=0)
    # the server's --supported-transfer-mode (no server in-process: none)
    transfer_mode: Literal["lmcache_driven", "engine_driven", "auto"] | None = None
    in_process: bool = False  # each engine rank holds its own pool (no server; see the module's docstring)
    mq_timeout_s: float | None = None
    server_flags: Flags = Field(default_factory=dict)
    import_check: list[str] = Field(default_factory=list)  # modules beyond the connector's (provisioning)


class LMCacheSpec(BackendSpec):
    l1_size_gb: int  # the whole pool: each of `servers` servers holds l1_size_gb // servers
    l1_fraction: float
    servers: int = 1
    shm_check: bool = False
    chunk_size: int
    transfer_mode: str | None = None
    in_process: bool = False  # servers: the engine ranks, each holding its own pool of shard_gb()
    mq_timeout_s: float | None = None
    server_flags: list[str] = []
    import_check: list[str] = []

    def shard_gb(self) -> int:
        """Each server's --l1-size-gb."""
        return self.l1_size_gb // self.servers

    def host_memory_bytes(self) -> int:
        return self.shard_gb() * self.servers * GB

    def names(self) -> list[str]:
        """The servers' process names, in start order (none in-process)."""
        if self.in_process:
            return []
        return [SERVER] if self.servers == 1 else [f"{SERVER}.{i}" for i in range(self.servers)]

    def server_count(self) -> int:
        return len(self.names())

    def ports(self, index: int) -> tuple[str, str]:
        """The names of server `index`'s ZMQ and HTTP ports."""
        return (PORT, HTTP_PORT) if self.servers == 1 else (f"{PORT}.{index}", f"{HTTP_PORT}.{index}")

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
    own_env = (LOCAL_CPU_ENV, POOL_ENV, CHUNK_ENV)  # an in-process pool's, built from the arm's knobs

    def check_arm(self, arm: Arm, engine_flags: Flags, env: dict[str, str], block_size: int) -> list[ArmProblem]:
        assert isinstance(arm, LMCacheArm)
        problems = [
            ArmProblem(("server-flags", name), f"{name} is built from the arm's typed fields, not server-flags")
            for name in arm.server_flags
            if name in TYPED_FLAGS
        ]
        problems += [ArmProblem(("env", name), f"{name} is built from the arm's knobs") for name in self.own_env
                     if name in env or name in arm.env]  # fmt: skip
        if arm.in_process and (arm.server_flags or arm.transfer_mode or arm.mq_timeout_s is not None):
            problems.append(ArmProblem(("in-process",), "an in-process pool has no server: no server-flags, "
                                       "transfer-mode or mq-timeout-s"))  # fmt: skip
        if not arm.in_process and arm.transfer_mode is None:
            problems.append(ArmProblem(("transfer-mode",), "the LMCache server needs a transfer-mode"))
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
        servers = point.tp if arm.servers == "per-rank" or arm.in_process else 1
        if arm.in_process and arm.servers == "one":
            size *= point.tp  # every rank holds the whole L1: TP pools of it
        if size < servers:
            raise ArmProblem(
                ("servers",), f"{point.exp_name}: an L1 of {size} GB leaves each of {servers} servers 0 GB"
            )
        return LMCacheSpec(
            name=self.name,
            version=backend_version(point),
            in_process=arm.in_process,
            l1_size_gb=size,
            l1_fraction=arm.l1_fraction,
            servers=servers,
            shm_check=arm.shm_check,
            chunk_size=arm.chunk_size,
            transfer_mode=arm.transfer_mode,
            mq_timeout_s=arm.mq_timeout_s,
            server_flags=render_flags(arm.server_flags),
            import_check=list(arm.import_check),
            startup_timeout_s=arm.startup_timeout_s,
        )

    def probes(self, point: Point) -> list[Point]:
        # L1 = int(budget x fraction) // servers: the budgets narrow the fractions that fit down to one; half the
        # TP shows whether the servers follow the ranks
        return budget_probes(point, point.tp)

    def knobs_from_connector(
        self, configs: list[dict[str, Any]], points: list[Point], handed: Sequence[ArmCapture] = ()
    ) -> dict[str, Any]:
        """The arm knobs that rebuild the captured LMCacheMPConnector JSON and the servers the script started: one
        (the JSON names its port) or one per TP rank (the JSON lists their URLs, rank order), their L1 sizes, flags,
        the modules the script checks import and whether it sized the pool against free /dev/shm."""
        if configs and all(c.get("kv_connector") == IN_PROCESS for c in configs):
            return _in_process_knobs(points, handed)
        if not configs or any(c.get("kv_connector") != CONNECTOR for c in configs):
            raise ValueError(f"no {CONNECTOR} JSON was captured on every point")
        if len(handed) != len(points):
            raise ValueError("the LMCache servers the script started were not captured on every point")
        extras = [c.get("kv_connector_extra_config", {}) for c in configs]
        if not all(isinstance(e, dict) for e in extras):
            raise ValueError("kv_connector_extra_config is not a JSON object")
        layouts, sizes, flags = set(), [], []
        for point, seen, extra in zip(points, handed, extras, strict=True):
            names = sorted((n for n in seen.servers if n.partition(".")[0] == SERVER), key=_rank)
            layout = _layout(point, names, extra, seen.servers)
            layouts.add(layout)
            shards = {_int_flag(seen.servers[n], "--l1-size-gb") for n in names}
            if len(shards) != 1:
                raise ValueError(f"{point.exp_name or point.parallelism}: the servers' --l1-size-gb differ")
            sizes.append((point, len(names), shards.pop()))
            flags += [{k: v for k, v in seen.servers[n].items() if k not in PORT_FLAGS} for n in names]
        if len(layouts) != 1:
            raise ValueError("the points start one LMCache server on some and one per rank on others")
        server = _one(flags, "the LMCache servers' flags")
        knobs: dict[str, Any] = {"l1-fraction": l1_fraction(sizes)}
        if layouts.pop() == "per-rank":
            knobs["servers"] = "per-rank"
        knobs["chunk-size"] = _int_flag(server, "--chunk-size")
        knobs["transfer-mode"] = server.get("--supported-transfer-mode")
        if knobs["transfer-mode"] is None:
            raise ValueError("the LMCache server passes no --supported-transfer-mode")
        timeouts = [e.get("lmcache.mp.mq_timeout") for e in extras]
        if (timeout := _one(timeouts, "lmcache.mp.mq_timeout")) is not None:
            knobs["mq-timeout-s"] = timeout
        unknown = sorted({k for e in extras for k in e} - CONNECTOR_OWN)
        if unknown:
            raise ValueError(f"connector setting {', '.join(unknown)}: the lmcache arm has no knob for it")
        rest = {k: v for k, v in server.items() if k not in TYPED_FLAGS}
        if rest:
            knobs["server-flags"] = rest
        module = CONNECTOR_MODULES.format(engine=DEFAULT_ENGINE)
        checks = _one([[m for m in c.import_checks if m != module] for c in handed], "the modules checked")
        if checks:
            knobs["import-check"] = checks
        if all("/dev/shm" in c.measured for c in handed):
            knobs["shm-check"] = True
        return knobs

    def ports_of(self, spec: LMCacheSpec) -> tuple[str, ...]:
        return tuple(name for i in range(spec.server_count()) for name in spec.ports(i))

    def server_names(self, spec: LMCacheSpec) -> tuple[str, ...]:
        return tuple(spec.names())

    def servers(self, spec: LMCacheSpec, ports: ServerPorts, runtime: Runtime, env: dict[str, str]) -> list[Process]:
        # the server hashes chunks with the same seed as the engine, or no lookup ever hits
        if spec.in_process or spec.transfer_mode is None:  # the engine's ranks hold the pool
            return []
        server_env = {**COMMON_ENV, "PYTHONHASHSEED": env["PYTHONHASHSEED"], "LMCACHE_DISABLE_BANNER": "1"}
        processes = []
        for index, name in enumerate(spec.names()):
            port, http = spec.ports(index)
            argv = [
                runtime.lmcache_bin, "server",
                "--host", HOST,
                "--port", str(ports[port]),
                "--http-host", HOST,
                "--http-port", str(ports[http]),
                "--l1-size-gb", str(spec.shard_gb()),
                "--chunk-size", str(spec.chunk_size),
                "--supported-transfer-mode", spec.transfer_mode,
                *spec.server_flags,
            ]  # fmt: skip
            health = loopback(ports[http], "/healthcheck")
            processes.append(Process(name, runtime.wrap(argv, name), dict(server_env), health, spec.startup_timeout_s))
        return processes

    def offload(self, spec: LMCacheSpec, ports: ServerPorts, engine: str) -> KvOffload | None:
        if spec.in_process:  # LMCache's own env, which the engine hands its ranks
            pool = {LOCAL_CPU_ENV: "True", POOL_ENV: str(spec.shard_gb()), CHUNK_ENV: str(spec.chunk_size)}
            return KvOffload(IN_PROCESS, pool)
        if spec.servers > 1:  # the connector talks to rank i's server at the i-th URL
            urls = [f"tcp://{HOST}:{ports[spec.ports(i)[0]]}" for i in range(spec.servers)]
            extra: dict[str, Any] = {"lmcache.mp.server_urls": ",".join(urls)}
        else:
            extra = {"lmcache.mp.host": f"tcp://{HOST}", "lmcache.mp.port": ports[PORT]}
        if spec.mq_timeout_s is not None:
            extra["lmcache.mp.mq_timeout"] = spec.mq_timeout_s
        return KvOffload(CONNECTOR, extra, module=CONNECTOR_MODULES.format(engine=engine))

    def preflight(self, spec: LMCacheSpec, runtime: Runtime) -> list[str]:
        return [p for p in (check_shm(spec),) if p]

    def import_checks(self, spec: LMCacheSpec, engine: str = DEFAULT_ENGINE) -> list[str]:
        if spec.in_process:  # the engine's own connector loads the image's LMCache, as the scripts leave it
            return list(spec.import_check)
        return [CONNECTOR_MODULES.format(engine=engine), *spec.import_check]

    def distribution_of(self, spec: LMCacheSpec) -> str | None:
        # in-process: the LMCache the engine's image ships (the ATOM scripts install none)
        return None if spec.in_process else self.distribution

    def metrics_urls(self, spec: LMCacheSpec, ports: ServerPorts) -> list[str]:
        return [loopback(ports[spec.ports(i)[1]], "/metrics") for i in range(spec.server_count())]

    def cache_reset_urls(self, spec: LMCacheSpec, ports: ServerPorts) -> list[str]:
        return [loopback(ports[spec.ports(i)[1]], "/cache/clear") for i in range(spec.server_count())]

    def tier_reading(self, deltas: Mapping[str, float], gauges: Mapping[str, float]) -> TierReading:
        counters = {field: deltas[name] for field, name in TIER_COUNTERS.items() if name in deltas}
        counters |= {field: gauges[name] for field, name in TIER_GAUGES.items() if name in gauges}
        hits = counters.get("lookup_hit_tokens")
        absent = None if hits is not None else "no LMCache lookup counter in its /metrics"
        return TierReading(counters, hits, absent)


def l1_fraction(sizes: Sequence[tuple[Point, int, int]]) -> float:
    """The one l1-fraction (in hundredths, the fewest digits first) under which every (point, servers, each
    server's L1 GB) follows int(budget x fraction) // servers; ValueError when none does."""
    fits = [k / 100 for k in range(100, 0, -1)
            if all(l1_size_gb(p.total_cpu_dram_gb, k / 100) // n == gb for p, n, gb in sizes)]  # fmt: skip
    if not fits:
        raise ValueError("--l1-size-gb follows no int(budget x fraction) // servers on these points")
    return min(fits, key=lambda f: (len(repr(f)), -f))


def _in_process_knobs(points: Sequence[Point], handed: Sequence[ArmCapture]) -> dict[str, Any]:
    """The knobs of an in-process pool from the LMCache env the engine got on every point: each rank's
    LMCACHE_MAX_LOCAL_CPU_SIZE as int(budget x fraction) // TP (per-rank) or the whole of it (one), its chunk."""
    if len(handed) != len(points):
        raise ValueError("the engine's env was not captured on every point")
    envs = [h.engine_env for h in handed]
    if any(e.get(LOCAL_CPU_ENV, "").lower() != "true" for e in envs):
        raise ValueError(f"an in-process pool without {LOCAL_CPU_ENV}=True on every point")
    pools = [(p, _int_env(e, POOL_ENV)) for p, e in zip(points, envs, strict=True)]
    knobs: dict[str, Any] = {"in-process": True}
    try:
        knobs["l1-fraction"], knobs["servers"] = l1_fraction([(p, p.tp, gb) for p, gb in pools]), "per-rank"
    except ValueError:
        knobs["l1-fraction"] = l1_fraction([(p, 1, gb) for p, gb in pools])  # each rank the whole L1
    knobs["chunk-size"] = _one([_int_env(e, CHUNK_ENV) for e in envs], CHUNK_ENV)
    return knobs


def _int_env(env: Mapping[str, str], name: str) -> int:
    value = env.get(name, "")
    if not value.isdigit():
        raise ValueError(f"the engine's {name} {value!r} is not a whole number")
    return int(value)


def _layout(point: Point, names: list[str], extra: dict[str, Any], servers: Mapping[str, Flags]) -> Layout:
    """One server whose port the JSON names, or one per TP rank whose URLs it lists in rank order."""
    if names == [SERVER] and "lmcache.mp.server_urls" not in extra:
        port = extra.get("lmcache.mp.port")
        if port is not None and str(port) != str(servers[SERVER].get("--port")):
            raise ValueError(f"lmcache.mp.port {port} is not the server's --port")
        return "one"
    ranks = [f"{SERVER}.{i}" for i in range(point.tp)]
    if names != ranks:
        raise ValueError(f"{len(names)} LMCache servers on a TP{point.tp} point: neither one nor one per rank")
    urls = str(extra.get("lmcache.mp.server_urls", "")).split(",")
    ports = [f"tcp://{HOST}:{servers[n].get('--port')}" for n in ranks]
    if urls != ports:
        raise ValueError(f"lmcache.mp.server_urls {','.join(urls)!r} are not the servers' ports in rank order")
    return "per-rank"


def _rank(name: str) -> int:
    return int(name.partition(".")[2] or 0)


def _int_flag(flags: Flags, name: str) -> int:
    value = flags.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"the LMCache server's {name} {value!r} is not a whole number")
    return value


def _one(values: Sequence[Any], what: str) -> Any:
    if len({json.dumps(v, sort_keys=True) for v in values}) != 1:
        raise ValueError(f"{what} differ between points")
    return values[0]


def check_shm(spec: LMCacheSpec, shm: Path = Path("/dev/shm")) -> str | None:
    """L1 in /dev/shm (a named --shm-name, or any L1 where the arm asks for the script's check) is silently capped
    by the tmpfs size: refuse a pool over SHM_CAP of its free space, in whole GiB as `df -BG` reports it (InferenceX's
    minimaxm3_fp4_mi355x_mtp.sh: SHM_CAP_GB=$((SHM_FREE_GB * 90 / 100)), refused when L1 exceeds it)."""
    if not spec.shm_name() and not spec.shm_check:
        return None
    free_gib = -(-shutil.disk_usage(shm).free // GIB)  # df -BG rounds up
    cap = free_gib * int(SHM_CAP * 100) // 100
    need = spec.host_memory_bytes() // GB
    return f"/dev/shm has {free_gib} GiB free, the L1 pool needs {need} GB (over {cap}, 90%)" if need > cap else None


BACKEND = LMCache()
