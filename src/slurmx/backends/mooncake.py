"""Mooncake store: a master process and MooncakeStoreConnector (on the local stack: the non-CUDA wheel over tcp).

Two ways a script configures the embedded store, both an arm of this backend:
- the connector JSON carries the master's address and each rank's segment (`global_segment_size_gb` =
  budget / GPUs), the default;
- `config-file`: the connector JSON carries only its own settings, and each rank reads the store's config from
  the JSON file MOONCAKE_CONFIG_PATH names, which the node writes into the point's run directory: the master's
  address, each rank's segment (the budget less what the arm reserves, per node and per rank), the local buffer
  and the arm's other settings (mode, protocol, device_name, ...), as InferenceX's MiniMax-M3 and Kimi-K3
  scripts write theirs.

The tier's own side is the master's /metrics (its `-metrics_port`, a free port of the node), which the node scrapes
right before and after the replay (aiperf 0.13 cannot read it): `mem_cache_hit_nums_` counts the stored KV blocks the master served back to the engine
(docs/local-stack.md, measured with vLLM 0.32 CPU and mooncake-transfer-engine-non-cuda 0.3.13.post1).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, field_validator

from slurmx.backends.base import (
    GB,
    KV_STORE,
    Arm,
    ArmCapture,
    ArmProblem,
    BackendSpec,
    BaseBackend,
    EngineFile,
    TierReading,
    backend_version,
    budget_probes,
)
from slurmx.config.master import kebab
from slurmx.engines import DEFAULT as DEFAULT_ENGINE
from slurmx.engines.base import KvOffload
from slurmx.flags import Flags, render_flags
from slurmx.plan import Point
from slurmx.process import Process, ServerPorts, loopback
from slurmx.runtimes.base import Runtime

GIB = 1 << 30
CONNECTOR = "MooncakeStoreConnector"
CONFIG_ENV = "MOONCAKE_CONFIG_PATH"  # where the store's ranks read their config file
CONFIG_NAME = "mooncake_config.json"  # under the point's run directory
MASTER = "mooncake-master"
METRICS = "mooncake-metrics"  # the master's HTTP metrics port
# The master's counters (by family name: these end in `_` and carry no `_total`): GetReplicaList results served from the memory pool, one per KV block read back, and their bytes; its
# key count and allocated bytes are gauges. Per master lifetime: read as deltas over the replay window.
OWN_MASTER_FLAGS = frozenset({"port", "rpc_port", "rpc_address", "metrics_port"})  # what servers() passes itself
HIT_BLOCKS = "mem_cache_hit_nums_"
TIER_COUNTERS = {"hit_blocks": HIT_BLOCKS, "hit_bytes": "mem_cache_hit_bytes", "gets": "total_get_nums_"}
TIER_GAUGES = {"keys_max": "master_key_count", "allocated_bytes_max": "master_allocated_bytes"}
# what the backend writes from the point itself, in the connector JSON and in the config file
CONNECTOR_OWN = frozenset({"master_server_address", "global_segment_size_gb"})
CONFIG_OWN = frozenset({"master_server_address", "global_segment_size", "local_buffer_size"})
HOST = "127.0.0.1"
STORE_KEYS = frozenset({"store_config", "master_extra_args"})  # what of the section the backend carries out
_SIZE = re.compile(r"(\d+)GB")  # Mooncake's size text, as the scripts write it
Scalar = str | int | float | bool


def _plain(value: dict[str, Scalar], own: frozenset[str], what: str) -> dict[str, Scalar]:
    named = sorted(set(value) & own)
    if named:
        raise ValueError(f"{', '.join(named)}: written by the backend from the point, not {what}")
    return value


class ConfigFile(BaseModel):
    """The store configured from a file. Each rank's segment, in whole budget units:
    (budget in `budget-unit` - `reserve-per-node`) // ranks - `reserve-per-rank` (integer division, as the
    scripts' shell arithmetic), written with Mooncake's GB suffix; a point it leaves nothing is refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, alias_generator=kebab, populate_by_name=True)

    budget_unit: Literal["GB", "GiB"] = "GB"  # GiB: the budget's bytes in whole GiB first
    reserve_per_node: NonNegativeInt = 0  # e.g. the checkpoint's page cache, left to the node
    reserve_per_rank: NonNegativeInt = 0  # e.g. a rank's --cpu-offload-gb and its local buffer
    local_buffer_gb: PositiveInt = 4  # local_buffer_size
    # global_segment_size as a recipe fixes it (srt-slurm's mooncake_kv_store), in GB per rank, over the budget
    # derivation above; the ranks' segments on a node must fit the node's DRAM budget
    segment_gb: PositiveInt | None = None
    # the file's other settings, written as given (mode, metadata_server, protocol, device_name, ...)
    settings: dict[str, Scalar] = Field(default_factory=dict)

    @field_validator("settings")
    @classmethod
    def _not_the_backends(cls, value: dict[str, Scalar]) -> dict[str, Scalar]:
        return _plain(value, CONFIG_OWN, "settings")


class MooncakeArm(Arm):
    master_flags: Flags = Field(default_factory=dict)
    load_failure_policy: Literal["recompute", "fail"] | None = "recompute"  # None: not passed (vLLM's default)
    distribution: str = "mooncake-transfer-engine"  # the wheel built for the image's CUDA major
    # kv_connector_extra_config settings passed as written (load_async, ...); the sizes are the backend's
    connector_settings: dict[str, Scalar] = Field(default_factory=dict)
    config_file: ConfigFile | None = None  # None: the master and the segment go in the connector JSON

    @field_validator("connector_settings")
    @classmethod
    def _not_the_sizes(cls, value: dict[str, Scalar]) -> dict[str, Scalar]:
        return _plain(value, CONNECTOR_OWN, "connector-settings")


class MooncakeSpec(BackendSpec):
    per_rank_gb: float  # each rank's segment (config-file mode: whole units of the arm's budget-unit)
    master_flags: list[str] = []
    load_failure_policy: str | None
    distribution: str = "mooncake-transfer-engine"
    connector_settings: dict[str, Scalar] = Field(default_factory=dict)
    # config-file mode: the file's settings beyond the master and the sizes (None: connector mode)
    config_settings: dict[str, Scalar] | None = None
    local_buffer_gb: int = 0

    def pool_gb_per_gpu(self) -> float:
        return self.per_rank_gb  # each rank (one per GPU) registers its own segment with the master


def segment_size(point: Point, config: ConfigFile) -> int:
    """A rank's segment under the arm's config-file knobs (see ConfigFile)."""
    if config.segment_gb is not None:
        return config.segment_gb
    budget = _in_unit(point.total_cpu_dram_gb, config.budget_unit)
    return (budget - config.reserve_per_node) // point.server_gpus - config.reserve_per_rank


def _in_unit(budget_gb: int, unit: str) -> int:
    return budget_gb if unit == "GB" else budget_gb * GB // GIB


def segment_knobs(seen: Sequence[tuple[Point, int]]) -> dict[str, Any]:
    """The one (budget-unit, reserve-per-node, reserve-per-rank) under which every point's captured segment
    follows segment_size; ValueError when none does or the points leave more than one."""
    found = []
    for unit in ("GB", "GiB"):
        budgets = [(_in_unit(p.total_cpu_dram_gb, unit), p.server_gpus, s) for p, s in seen]
        for node in range(min(b for b, _, _ in budgets) + 1):
            ranks = {(b - node) // r - s for b, r, s in budgets}
            if len(ranks) == 1 and (rank := ranks.pop()) >= 0:
                found.append({"budget-unit": unit, "reserve-per-node": node, "reserve-per-rank": rank})
    if not found:
        raise ValueError("global_segment_size follows no (budget - reserve per node) // ranks - reserve per rank")
    if len(found) > 1:
        raise ValueError(f"global_segment_size fits {len(found)} reserve splits on these points (e.g. {found[:2]})")
    return found[0]


def _one(values: Sequence[Any], what: str) -> Any:
    if len({json.dumps(v, sort_keys=True) for v in values}) != 1:
        raise ValueError(f"{what} differs between points")
    return values[0]


def _size(text: object, what: str) -> int:
    match = _SIZE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{what} {text!r} is not Mooncake's <n>GB")
    return int(match[1])


class Mooncake(BaseBackend[MooncakeSpec]):
    name = "mooncake"
    arm_model = MooncakeArm
    spec_model = MooncakeSpec
    port_names = (MASTER, METRICS)
    connector = CONNECTOR
    own_env = (CONFIG_ENV,)
    # a multinode point runs one master, on the head at its address, that every node's ranks register their
    # segments with (as srt-slurm's one mooncake-master service; docs/multinode.md)
    head_servers = True
    # a rank over several nodes: the budget derivation would size its segment as the node's budget over the whole
    # rank; such a point runs only with the segment its recipe fixes (ConfigFile.segment_gb, from an srt recipe)
    rank_span_refusal = (
        "a Mooncake segment derived from the DRAM budget for a rank over several nodes: slurmx sizes a rank's segment "
        "as the node's budget over the whole rank; only a segment size the recipe fixes serves it"
    )
    # kv-offload-backend.version pins this wheel by default (vLLM's docs: the CUDA 12 build); CUDA 13 images
    # need mooncake-transfer-engine-cuda13, which the recipe arm names as `distribution`
    distribution = "mooncake-transfer-engine"

    def distribution_of(self, spec: MooncakeSpec) -> str | None:
        return spec.distribution

    def import_checks(self, spec: MooncakeSpec, engine: str = DEFAULT_ENGINE) -> list[str]:
        return ["mooncake.store"]  # what MooncakeStoreConnector imports: a wheel for the wrong CUDA fails here

    def check_arm(self, arm: Arm, engine_flags: Flags, env: dict[str, str], block_size: int) -> list[ArmProblem]:
        # the node names the file it writes; a recipe's own path would point the ranks at another config
        problems = [ArmProblem(("env", name), f"{name} is set by the backend") for name in self.own_env if name in env]
        if isinstance(arm, MooncakeArm):  # the master's ports and address are the node's choice, once
            problems += [ArmProblem(("master-flags", flag), f"{flag} is set by the backend")
                         for flag in arm.master_flags if flag.lstrip("-") in OWN_MASTER_FLAGS]  # fmt: skip
        return problems

    def spec(self, arm: Arm, point: Point) -> MooncakeSpec:
        assert isinstance(arm, MooncakeArm)
        config = arm.config_file
        per_rank: float = round(point.total_cpu_dram_gb / point.server_gpus, 3)  # each rank brings one segment
        if config is not None:
            per_rank = segment_size(point, config)
            if per_rank <= 0:
                raise ArmProblem(("config-file",), (
                    f"{point.exp_name}: a {point.total_cpu_dram_gb} GB budget less the reserves leaves each of "
                    f"{point.server_gpus} ranks a {per_rank} {config.budget_unit} segment"
                ))  # fmt: skip
        return MooncakeSpec(
            name=self.name,
            version=backend_version(point),
            per_rank_gb=per_rank,
            master_flags=render_flags(arm.master_flags),
            load_failure_policy=arm.load_failure_policy,
            distribution=arm.distribution,
            startup_timeout_s=arm.startup_timeout_s,
            connector_settings=dict(arm.connector_settings),
            config_settings=dict(config.settings) if config is not None else None,
            local_buffer_gb=config.local_buffer_gb if config is not None else 0,
        )

    def server_names(self, spec: MooncakeSpec) -> tuple[str, ...]:
        return (MASTER,)

    def servers(self, spec: MooncakeSpec, ports: ServerPorts, runtime: Runtime, env: dict[str, str]) -> list[Process]:
        # RPC on loopback where the node's own engine ranks are its only clients, on the head's address where every
        # node's are (a multinode point: the head's master only); metrics on a free port, not the fixed default 9003
        # (another master on the host, or anything else there, may hold it)
        if not ports.store_here:
            return []
        argv = [runtime.mooncake_master_bin, "--port", str(ports[MASTER]), "--rpc_address", ports.store_host or HOST,
                "--metrics_port", str(ports[METRICS]), *spec.master_flags]  # fmt: skip
        return [Process(MASTER, runtime.wrap(argv, MASTER), {}, None, 60)]

    def offload(self, spec: MooncakeSpec, ports: ServerPorts, engine: str) -> KvOffload | None:
        settings: dict[str, object] = {}
        if spec.config_settings is None:  # the connector JSON carries the store's address and size
            settings = {"master_server_address": _master(ports), "global_segment_size_gb": spec.per_rank_gb}
        settings.update(spec.connector_settings)
        return KvOffload(self.connector, settings, load_failure_policy=spec.load_failure_policy)

    def engine_files(self, spec: MooncakeSpec, ports: ServerPorts, run_dir: Path) -> list[EngineFile]:
        if spec.config_settings is None:
            return []
        config = {
            "master_server_address": _master(ports),
            "global_segment_size": f"{int(spec.per_rank_gb)}GB",
            "local_buffer_size": f"{spec.local_buffer_gb}GB",
            **spec.config_settings,
        }
        return [EngineFile(CONFIG_ENV, run_dir / CONFIG_NAME, json.dumps(config, indent=2) + "\n")]

    def probes(self, point: Point) -> list[Point]:
        # the segment formula has three unknowns: the node reserve's remainder, GB or GiB, the node/rank split
        return budget_probes(point, point.server_gpus)

    def knobs_from_connector(
        self, configs: list[dict[str, Any]], points: list[Point], handed: Sequence[ArmCapture] = ()
    ) -> dict[str, Any]:
        """The arm knobs that rebuild the captured MooncakeStoreConnector JSON, the config file its engine's env
        names (config-file mode) and the master's flags."""
        if not configs or any(c.get("kv_connector") != CONNECTOR for c in configs):
            raise ValueError(f"no {CONNECTOR} JSON was captured on every point")
        extras = [c.get("kv_connector_extra_config", {}) for c in configs]
        if not all(isinstance(e, dict) for e in extras):
            raise ValueError("kv_connector_extra_config is not a JSON object")
        knobs: dict[str, Any] = {}
        policy = _one([c.get("kv_load_failure_policy") for c in configs], "kv_load_failure_policy")
        if policy != "recompute":
            knobs["load-failure-policy"] = policy
        if handed and all(MASTER in c.servers for c in handed):
            # --port is the one slurmx picks on the node
            seen = [{n: v for n, v in c.servers[MASTER].items() if n != "--port"} for c in handed]
            flags = _one(seen, "the master's flags")
            if flags:
                knobs["master-flags"] = flags
        wheels = {name for c in handed for name in c.installs if name.startswith(self.distribution)}
        if len(wheels) > 1:
            raise ValueError(f"the points install different Mooncake wheels ({', '.join(sorted(wheels))})")
        if wheels and (wheel := wheels.pop()) != self.distribution:  # e.g. the CUDA 13 build
            knobs["distribution"] = wheel
        files = [c.files.get(CONFIG_ENV) for c in handed]
        if handed and all(f is not None for f in files):
            knobs["config-file"] = _config_knobs([json.loads(f or "") for f in files], points)
            own: frozenset[str] = frozenset()
        else:
            own = CONNECTOR_OWN
            sizes = [e.get("global_segment_size_gb") for e in extras]
            if sizes != [round(p.total_cpu_dram_gb / p.server_gpus, 3) for p in points]:
                raise ValueError("global_segment_size_gb is not the DRAM budget / GPUs on every point")
        settings = {}
        for name in dict.fromkeys(k for e in extras for k in e if k not in own):
            value = _one([e.get(name) for e in extras], f"connector setting {name}")
            if not isinstance(value, (str, int, float, bool)):
                raise ValueError(f"connector setting {name} is not a plain value")
            settings[name] = value
        if settings:
            knobs["connector-settings"] = settings
        return knobs

    def fixed_knobs(self, config: dict[str, Any]) -> dict[str, Any] | None:
        """The store as an srt recipe fixes it (its `kv_store` section beside the connector JSON): the config file
        with the recipe's global_segment_size per rank and its other settings, the master's extra args, the
        connector's settings; None where the recipe has no store section."""
        store = config.get(KV_STORE)
        if store is None:
            return None
        if not isinstance(store, dict) or not isinstance(files := store.get("store_config"), dict):
            raise ValueError("the store section has no store_config mapping")
        if unknown := sorted(set(store) - STORE_KEYS):
            raise ValueError(f"store section key(s) {', '.join(unknown)}: not carried out by slurmx")
        file: dict[str, Any] = {"segment-gb": _size(files.get("global_segment_size"), "global_segment_size")}
        buffer = _size(files.get("local_buffer_size", f"{ConfigFile().local_buffer_gb}GB"), "local_buffer_size")
        if buffer != ConfigFile().local_buffer_gb:
            file["local-buffer-gb"] = buffer
        if settings := {k: v for k, v in files.items() if k not in CONFIG_OWN}:
            file["settings"] = settings
        knobs: dict[str, Any] = {"config-file": file}
        flags: dict[str, Any] = {}
        for arg in store.get("master_extra_args") or []:  # gflags' --name=value
            name, given, value = str(arg).partition("=")
            flags[name] = value if given else True
        if flags:
            knobs["master-flags"] = flags
        if (policy := config.get("kv_load_failure_policy")) != "recompute":
            knobs["load-failure-policy"] = policy
        extra = config.get("kv_connector_extra_config", {})
        if not isinstance(extra, dict):
            raise ValueError("kv_connector_extra_config is not a JSON object")
        if settings := {k: v for k, v in extra.items() if k not in CONNECTOR_OWN}:
            knobs["connector-settings"] = settings
        return knobs

    def metrics_urls(self, spec: MooncakeSpec, ports: ServerPorts) -> list[str]:
        return [loopback(ports[METRICS], "/metrics")]

    def tier_reading(self, deltas: Mapping[str, float], gauges: Mapping[str, float]) -> TierReading:
        counters = {field: deltas[name] for field, name in TIER_COUNTERS.items() if name in deltas}
        counters |= {field: gauges[name] for field, name in TIER_GAUGES.items() if name in gauges}
        hits = counters.get("hit_blocks")
        if hits is not None:  # blocks the store served the engine: its side of the hit figure, in blocks
            return TierReading(counters, hit_blocks=hits)
        return TierReading(counters, absent=f"no Mooncake master counter {HIT_BLOCKS} in the master's /metrics")


def _master(ports: ServerPorts) -> str:
    return f"{ports.store_host or HOST}:{ports[MASTER]}"


def _config_knobs(configs: list[Any], points: list[Point]) -> dict[str, Any]:
    if not all(isinstance(c, dict) for c in configs):
        raise ValueError(f"{CONFIG_ENV} names no JSON object")
    for c in configs:
        if not re.fullmatch(r"127\.0\.0\.1:\d+", str(c.get("master_server_address"))):
            raise ValueError(f"master_server_address {c.get('master_server_address')!r} is not the node's master")
    knobs: dict[str, Any] = segment_knobs(
        [(p, _size(c.get("global_segment_size"), "global_segment_size")) for p, c in zip(points, configs)]
    )
    buffer = _one([_size(c.get("local_buffer_size"), "local_buffer_size") for c in configs], "local_buffer_size")
    if buffer != ConfigFile().local_buffer_gb:
        knobs["local-buffer-gb"] = buffer
    settings = {}
    for name in dict.fromkeys(k for c in configs for k in c if k not in CONFIG_OWN):
        value = _one([c.get(name) for c in configs], f"{CONFIG_NAME} setting {name}")
        if not isinstance(value, (str, int, float, bool)):
            raise ValueError(f"{CONFIG_NAME} setting {name} is not a plain value")
        settings[name] = value
    if settings:
        knobs["settings"] = settings
    defaults = {"budget-unit": "GB", "reserve-per-node": 0, "reserve-per-rank": 0}
    return {k: v for k, v in knobs.items() if defaults.get(k) != v}


BACKEND = Mooncake()
