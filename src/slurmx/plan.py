"""Config key -> list of frozen, fully resolved sweep points (InferenceX's expansion, exactly).

Each point carries its DRAM budget by InferenceX's formula and a deterministic point id:
a short hash of the canonical fields that decide what runs, never of names derived from them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property, partial
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from slurmx.config.clusters import ClusterProfile
from slurmx.config.load import Clusters, Masters, suggest
from slurmx.config.master import (
    AgenticCoding,
    KvOffloadBackend,
    MasterConfig,
    MultiNodeEntry,
    Router,
    Scenarios,
    SingleNodeEntry,
    WorkerSpec,
)
from slurmx.config.master import server_gpus as server_gpus  # the formula's home is config; plan's callers keep it
from slurmx.config.srt import row_framework
from slurmx.errors import ConfigError

Scenario = Literal["fixed-seq-len", "agentic-coding"]

# InferenceX caps the usable host DRAM per node (MiB) before applying dram-utilization.
DRAM_CAP_MIB = 2_861_022
AGENTIC_DURATION_S = 3600
# InferenceX names only these two; any other pair is spelled isl_osl (1024_8192).
_SEQ_LEN_NAMES = {(1024, 1024): "1k1k", (8192, 1024): "8k1k"}


def dram_budget_gb(available_cpu_dram_mib: int, gpus_per_node: int, dram_utilization: float, gpu_share: int) -> int:
    """InferenceX's host-DRAM budget in GB for a server on `gpu_share` (tp*pp*pcp) GPUs of a node.

    In decimal arithmetic from the utilization's text, in InferenceX's order of operations, so that no
    binary-float rounding can move the truncated integer away from InferenceX's.
    """
    dram_bytes = (
        Decimal(min(available_cpu_dram_mib, DRAM_CAP_MIB))
        * 1024
        * 1024
        * Decimal(str(dram_utilization))
        * min(gpu_share, gpus_per_node)
        / gpus_per_node
    )
    return int(dram_bytes / 1_000_000_000)


@dataclass(frozen=True)
class Point:
    """One sweep point: what runs, where, with which budget."""

    config_key: str
    scenario: Scenario
    image: str
    model: str
    model_prefix: str
    precision: str
    framework: str
    runner: str
    multinode: bool
    disagg: bool
    spec_decoding: str
    conc: int  # the concurrency the point replays at; a multi-concurrency point's first
    # Every concurrency of a multi-concurrency point (InferenceX's multinode fixed-seq-len entry is one point
    # for its whole list); empty for a point of one concurrency.
    concs: tuple[int, ...] = ()
    tp: int = 0
    pp: int = 1
    dcp_size: int = 1
    pcp_size: int = 1
    ep: int = 1
    dp_attn: bool = False
    prefill: WorkerSpec | None = None
    decode: WorkerSpec | None = None
    isl: int | None = None
    osl: int | None = None
    kv_offloading: str = "none"
    kv_offload_backend: KvOffloadBackend | None = None
    router: Router | None = None
    kv_p2p_transfer: str | None = None
    dram_utilization: float | None = None
    total_cpu_dram_gb: int = 0
    duration_s: int | None = None
    # Derived from the fields above as the point is built, unless given (a point.json read back keeps its own).
    exp_name: str = ""
    point_id: str = field(default="", compare=False)
    # The framework of the slurmx engine that serves it (engines' registry key): the row's framework, or what its
    # srt-slurm recipe serves with directly (config/srt.py's served_framework). Not part of InferenceX's row.
    engine: str = ""

    def __post_init__(self) -> None:
        # The one place a frozen dataclass may set its own derived fields: construction is not over yet.
        if not self.engine:
            object.__setattr__(self, "engine", self.framework)
        if not self.exp_name:
            object.__setattr__(self, "exp_name", _exp_name(self))
        if not self.point_id:
            object.__setattr__(self, "point_id", _point_id(self))

    @property
    def concurrencies(self) -> tuple[int, ...]:
        """The concurrencies the point runs: its list, or its one."""
        return self.concs or (self.conc,)

    @property
    def gpus(self) -> int:
        """GPUs of one single-node server: tensor x pipeline x prefill-context parallel."""
        return server_gpus(self.tp, self.pp, self.pcp_size)

    @property
    def server_gpus(self) -> int:
        """GPUs of the server the DRAM budget is for, whose ranks share it: the single-node server, or one
        prefill worker of a multinode point (plan's multinode budget follows the prefill worker)."""
        if self.multinode:
            assert self.prefill is not None
            return self.prefill.gpus
        return self.gpus

    @property
    def backend_name(self) -> str:
        return self.kv_offload_backend.name if self.kv_offload_backend else "none"

    @property
    def parallelism(self) -> str:
        """Short label such as TP8, DEP8, TP8-DCP8, or p1x8_d1x8 for multinode."""
        if self.multinode:
            assert self.prefill and self.decode
            return f"{_worker_label('p', self.prefill)}_{_worker_label('d', self.decode)}"
        return parallelism_label(self.tp, self.ep, self.dp_attn, self.pp, self.dcp_size, self.pcp_size)

    def row(self) -> dict[str, Any]:
        """The row InferenceX's generator emits for this point, under its field names (a copy to change)."""
        return dict(self._built_row)

    @cached_property
    def _built_row(self) -> dict[str, Any]:
        # built once: the point id, plan's output and the server groups all read it (the point is frozen)
        return _row(self)


@dataclass(frozen=True)
class NodeLayout:
    """How a point's engine spreads over nodes: what each node is asked for and how many ranks it runs."""

    nodes: int
    gpus_per_node: int  # GPUs asked of each node (the GRES count of the request)
    ranks_per_node: int  # data-parallel engine ranks on each node; 0 when one rank spans nodes
    ranks: int  # data-parallel ranks in all (the aggregated deployment's --data-parallel-size)

    @property
    def multinode(self) -> bool:
        return self.nodes > 1


def _side_layout(worker: WorkerSpec, gpus_per_node: int) -> NodeLayout:
    """Workers of one side: whole nodes per worker when a worker spans nodes, else workers tiling nodes."""
    worker_gpus = worker.gpus
    if worker.num_worker == 0:
        return NodeLayout(0, 0, 0, 0)
    if worker_gpus > gpus_per_node:
        nodes = worker.num_worker * -(-worker_gpus // gpus_per_node)
        return NodeLayout(nodes, gpus_per_node, 0, worker.num_worker)
    per_node = gpus_per_node // worker_gpus
    ranks_per_node = min(per_node, worker.num_worker)
    nodes = -(-worker.num_worker // per_node)
    return NodeLayout(nodes, ranks_per_node * worker_gpus, ranks_per_node, worker.num_worker)


def node_layout(point: Point, gpus_per_node: int) -> NodeLayout:
    """One node for a single-node point; for a multinode point, the nodes its workers need on this hardware
    (prefill and decode workers on nodes of their own when disaggregated)."""
    if not point.multinode:
        return NodeLayout(1, point.gpus, 1, 1)
    assert point.prefill is not None and point.decode is not None
    prefill = _side_layout(point.prefill, gpus_per_node)
    decode = _side_layout(point.decode, gpus_per_node)
    if not decode.nodes:
        return prefill
    if not prefill.nodes:
        return decode
    return NodeLayout(
        prefill.nodes + decode.nodes,
        max(prefill.gpus_per_node, decode.gpus_per_node),
        0,  # the sides differ: ranks are per side, not per node
        prefill.ranks + decode.ranks,
    )


def parallelism_label(tp: int, ep: int, dp_attn: bool, pp: int = 1, dcp: int = 1, pcp: int = 1) -> str:
    """TP8, DEP8 (data-parallel attention + experts), TP8-EP8, TP8-DCP8, TP4-PP2: one spelling everywhere."""
    label = f"DEP{tp}" if dp_attn and ep > 1 else f"TP{tp}"
    if ep > 1 and not dp_attn:
        label += f"-EP{ep}"
    for name, size in (("PP", pp), ("DCP", dcp), ("PCP", pcp)):
        if size > 1:
            label += f"-{name}{size}"
    return label


def _worker_label(side: str, worker: WorkerSpec) -> str:
    label = f"{side}{worker.num_worker}x{worker.tp}"
    if worker.ep > 1:
        label += f"ep{worker.ep}"
    if worker.dp_attn:
        label += "dpa"
    return label


def _dump(model: BaseModel) -> dict[str, Any]:
    return dict(model.model_dump(by_alias=True, exclude_none=True))


def _worker_row(worker: WorkerSpec) -> dict[str, Any]:
    return _dump(worker)


def _row_conc(multinode: bool, conc: int, concs: tuple[int, ...]) -> int | list[int]:
    """The row's conc: a multinode row lists its concurrencies, a single-node row has one."""
    return list(concs or (conc,)) if multinode else conc


def _row(p: Point) -> dict[str, Any]:
    row: dict[str, Any] = {
        "image": p.image,
        "model": p.model,
        "model-prefix": p.model_prefix,
        "precision": p.precision,
        "framework": p.framework,
        "runner": p.runner,
    }
    if p.scenario == "fixed-seq-len":
        row["isl"], row["osl"] = p.isl, p.osl
    if p.multinode:
        assert p.prefill is not None and p.decode is not None
        row["spec-decoding"] = p.spec_decoding
        row["prefill"] = _worker_row(p.prefill)
        row["decode"] = _worker_row(p.decode)
        row["conc"] = _row_conc(p.multinode, p.conc, p.concs)
    else:
        row.update({"tp": p.tp, "pp": p.pp, "dcp-size": p.dcp_size, "pcp-size": p.pcp_size})
        if p.scenario == "fixed-seq-len":
            row["conc"] = _row_conc(p.multinode, p.conc, p.concs)
            row["max-model-len"] = (p.isl or 0) + (p.osl or 0) + 256
        row.update({"ep": p.ep, "dp-attn": p.dp_attn, "spec-decoding": p.spec_decoding})
        if p.scenario == "agentic-coding":
            row["conc"] = _row_conc(p.multinode, p.conc, p.concs)
    if p.scenario == "fixed-seq-len":
        if p.multinode:
            row["max-model-len"] = (p.isl or 0) + (p.osl or 0) + 256
        row["exp-name"] = p.exp_name
        row["disagg"] = p.disagg
        row["run-eval"] = False
    else:
        row["kv-offloading"] = p.kv_offloading
        row["total-cpu-dram-gb"] = p.total_cpu_dram_gb
        row["duration"] = p.duration_s
        row["exp-name"] = p.exp_name
        if p.multinode:
            row["disagg"] = p.disagg
        row["scenario-type"] = p.scenario
        if p.kv_offload_backend is not None:
            row["kv-offload-backend"] = _dump(p.kv_offload_backend)
    if p.router is not None:
        row["router"] = _dump(p.router)
    if p.kv_p2p_transfer is not None:
        row["kv-p2p-transfer"] = p.kv_p2p_transfer
    return row


def _exp_name(p: Point) -> str:
    if p.scenario == "fixed-seq-len":
        assert p.isl is not None and p.osl is not None
        return f"{p.model_prefix}_{_SEQ_LEN_NAMES.get((p.isl, p.osl), f'{p.isl}_{p.osl}')}"
    kv = f"kv{p.kv_offloading}-{p.backend_name}" if p.kv_offloading != "none" else "kvnone"
    if p.multinode:
        name = f"{p.model_prefix}_{p.parallelism}_conc{p.conc}"
        return name if p.kv_offloading == "none" else f"{name}_{kv}"
    name = f"{p.model_prefix}_tp{p.tp}_conc{p.conc}_{kv}"
    return name if p.spec_decoding == "none" else f"{name}_spec-{p.spec_decoding}"


# Built once (json.dumps with options builds an encoder per call); a row is a tree, with no cycle to look for.
_ID_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), check_circular=False)
_NOT_HASHED = ("exp-name", "run-eval")
# Stands in for a row's conc while its siblings' ids are made: no config value holds a NUL character.
_CONC_MARK = "\x00conc\x00"


def _hashed(p: Point) -> dict[str, Any]:
    """What a point id hashes: the InferenceX row without names derived from it, plus the key."""
    canonical = {k: v for k, v in p._built_row.items() if k not in _NOT_HASHED}
    canonical["config-key"] = p.config_key
    return canonical


def _digest(blob: str) -> str:
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _point_id(p: Point) -> str:
    """Hash of what runs: the InferenceX row without names derived from it, plus the key."""
    return _digest(_ID_ENCODER.encode(_hashed(p)))


def _at_concurrencies(make: Callable[..., Point], concs: list[int]) -> list[Point]:
    """The points `make(conc=..., point_id=...)` builds at each of `concs`. Only conc and the names derived
    from it differ between them, so each id after the first hashes the first's encoded row with its own conc
    in conc's place: one row encoded per search-space entry, not one per point (encoding and hashing
    were a third of expanding)."""
    first: Point = make(conc=concs[0])
    if len(concs) < 2:
        return [first]
    mark = _ID_ENCODER.encode(_CONC_MARK)
    halves = _ID_ENCODER.encode(_hashed(first) | {"conc": _CONC_MARK}).split(mark)
    points = [first]
    for conc in concs[1:]:
        value = _row_conc(first.multinode, conc, first.concs)
        # a mark found elsewhere too (it cannot be) leaves the id to the point itself
        given = _digest(_ID_ENCODER.encode(value).join(halves)) if len(halves) == 2 else ""
        points.append(make(conc=conc, point_id=given))
    return points


def _key_error(masters: Masters, key: str, field: str, message: str) -> ConfigError:
    source = masters.sources[key]
    return ConfigError(source.path, source.line, f"{key}.{field}" if field else key, message)


def _hardware(key: str, config: MasterConfig, masters: Masters, clusters: Clusters, why: str) -> ClusterProfile:
    """The runner's hardware figures, which this key needs (`why`); InferenceX needs them only for a budget."""
    profile = clusters.profile(config.runner)
    if profile is None:
        known = sorted(clusters.profiles)
        raise _key_error(
            masters,
            key,
            "runner",
            f"no hardware entry for cluster label {config.runner!r} in {clusters.path}, needed for {why}"
            f"{suggest(config.runner, known)}",
        )
    return profile


def _check_fits(key: str, tp_path: str, gpus: int, profile: ClusterProfile, runner: str, masters: Masters) -> None:
    if gpus > profile.gpus_per_node:
        raise _key_error(masters, key, tp_path, f"needs {gpus} GPUs but {runner} has {profile.gpus_per_node} per node")


def _worker_share(key: str, where: str, worker: WorkerSpec, gpus_per_node: int, masters: Masters) -> int:
    """GPUs of one worker replica on one node, as InferenceX sizes a multinode DRAM budget: a replica
    must fill whole nodes or tile one node evenly."""
    gpus = worker.gpus
    if gpus > gpus_per_node:
        if gpus % gpus_per_node:
            message = f"tp*pp*pcp-size={gpus} spans nodes but is not a multiple of gpus-per-node={gpus_per_node}"
            raise _key_error(masters, key, where, message)
        return gpus_per_node
    if gpus_per_node % gpus:
        raise _key_error(masters, key, where, f"tp*pp*pcp-size={gpus} does not divide gpus-per-node={gpus_per_node}")
    return gpus


def _point(
    key: str,
    config: MasterConfig,
    entry: SingleNodeEntry | MultiNodeEntry,
    *,
    scenario: Scenario,
    conc: int,
    concs: tuple[int, ...] = (),
    isl: int | None = None,
    osl: int | None = None,
    kv_offloading: str = "none",
    kv_offload_backend: KvOffloadBackend | None = None,
    dram_utilization: float | None = None,
    total_cpu_dram_gb: int = 0,
    duration_s: int | None = None,
    point_id: str = "",
    tree: Path | None = None,
) -> Point:
    """A point of one search-space entry: the key's fields, the entry's parallelism or workers, the scenario's rest."""
    single = entry if isinstance(entry, SingleNodeEntry) else None
    workers = entry if isinstance(entry, MultiNodeEntry) else None
    settings = workers.prefill.additional_settings if workers else None
    return Point(
        config_key=key,
        scenario=scenario,
        image=config.image,
        model=config.model,
        model_prefix=config.model_prefix,
        precision=config.precision,
        framework=config.framework,
        runner=config.runner,
        multinode=config.multinode,
        disagg=config.disagg,
        spec_decoding=entry.spec_decoding,
        conc=conc,
        concs=concs,
        tp=single.tp if single else 0,
        pp=single.pp if single else 1,
        dcp_size=single.dcp_size if single else 1,
        pcp_size=single.pcp_size if single else 1,
        ep=(single.ep or 1) if single else 1,
        dp_attn=bool(single.dp_attn) if single else False,
        prefill=workers.prefill if workers else None,
        decode=workers.decode if workers else None,
        isl=isl,
        osl=osl,
        kv_offloading=kv_offloading,
        kv_offload_backend=kv_offload_backend,
        router=entry.router or config.router,
        kv_p2p_transfer=(workers.kv_p2p_transfer if workers else None) or config.kv_p2p_transfer,
        dram_utilization=dram_utilization,
        total_cpu_dram_gb=total_cpu_dram_gb,
        duration_s=duration_s,
        point_id=point_id,
        engine=row_framework(tree, config.framework, settings) if tree is not None else "",
    )


def expand_key(key: str, masters: Masters, clusters: Clusters) -> list[Point]:
    """Every point of one config key, in InferenceX's order."""
    config = masters.configs[key]
    points: list[Point] = []
    scenarios: Scenarios[Any, Any] = config.scenarios
    tree = _checkout_of(key, config, masters)
    for fsl in scenarios.fixed_seq_len or []:
        for entry in fsl.search_space:
            if isinstance(entry, MultiNodeEntry):
                concs = tuple(entry.concurrencies())
                points.append(
                    _point(
                        key,
                        config,
                        entry,
                        tree=tree,
                        scenario="fixed-seq-len",
                        conc=concs[0],
                        concs=concs,
                        isl=fsl.isl,
                        osl=fsl.osl,
                    )
                )
                continue
            make = partial(_point, key, config, entry, tree=tree, scenario="fixed-seq-len", isl=fsl.isl, osl=fsl.osl)
            points.extend(_at_concurrencies(make, entry.concurrencies()))
    for index, agentic in enumerate(scenarios.agentic_coding or []):
        points.extend(_expand_agentic(key, index, config, agentic, masters, clusters, tree))
    return points


def _checkout_of(key: str, config: MasterConfig, masters: Masters) -> Path | None:
    """The InferenceX checkout whose srt-slurm recipes an aggregated multinode key's rows name: the one holding its
    master (configs/X-master.yaml); None for any other key (its framework is its engine's)."""
    source = masters.sources.get(key)
    if source is None or not config.multinode or config.disagg:
        return None
    return source.path.resolve().parents[1]


def _expand_agentic(
    key: str,
    index: int,
    config: MasterConfig,
    agentic: AgenticCoding[Any],
    masters: Masters,
    clusters: Clusters,
    tree: Path | None = None,
) -> list[Point]:
    points = []
    for entry_index, entry in enumerate(agentic.search_space):
        offloading = entry.kv_offloading or "none"
        where = f"scenarios.agentic-coding[{index}].search-space[{entry_index}]"
        share = 0
        # InferenceX reads the runner's hardware only for a DRAM budget; slurmx also checks that a
        # single-node server fits the node when the figures are there.
        profile = (
            _hardware(key, config, masters, clusters, "the kv-offloading dram budget")
            if offloading == "dram"
            else clusters.profile(config.runner)
        )
        if isinstance(entry, SingleNodeEntry):
            share = server_gpus(entry.tp, entry.pp, entry.pcp_size)
            if profile is not None:
                _check_fits(key, f"{where}.tp", share, profile, config.runner, masters)
        elif offloading == "dram":
            assert profile is not None
            # Multinode budgets follow the prefill worker (only prefill offloads to DRAM in InferenceX).
            share = _worker_share(key, f"{where}.prefill", entry.prefill, profile.gpus_per_node, masters)
        budget = 0
        if offloading == "dram" and agentic.dram_utilization is not None:
            assert profile is not None
            budget = dram_budget_gb(
                profile.available_cpu_dram_mib, profile.gpus_per_node, agentic.dram_utilization, share
            )
        make = partial(
            _point,
            key,
            config,
            entry,
            tree=tree,
            scenario="agentic-coding",
            kv_offloading=offloading,
            kv_offload_backend=entry.kv_offload_backend,
            dram_utilization=agentic.dram_utilization,
            total_cpu_dram_gb=budget,
            duration_s=AGENTIC_DURATION_S,
        )
        points.extend(_at_concurrencies(make, entry.concurrencies()))
    return points


def resolve_keys(requested: list[str], masters: Masters) -> list[str]:
    """Check each key exists and loaded cleanly; an unknown key names the closest ones, a bad key its problem."""
    known = list(masters.sources)
    for key in requested:
        if key in masters.errors:
            raise masters.errors[key]
        if key not in masters.configs:
            files = ", ".join(str(f) for f in masters.files)
            raise ConfigError(files, None, key, f"unknown config key{suggest(key, known)}")
    return requested


def expand(keys: list[str], masters: Masters, clusters: Clusters) -> list[Point]:
    """Points of all `keys`; the first problem of any of them is raised."""
    points, errors = expand_each(keys, masters, clusters)
    if errors:
        raise errors[0]
    return points


def expand_each(keys: list[str], masters: Masters, clusters: Clusters) -> tuple[list[Point], list[ConfigError]]:
    """Points of every good key, and one error per bad key, in key order: a bad key blocks only itself."""
    points: list[Point] = []
    errors: list[ConfigError] = []
    for key in keys:
        try:
            resolve_keys([key], masters)
            key_points = expand_key(key, masters, clusters)
            _check_distinct(key_points, masters)
        except ConfigError as error:
            errors.append(error)
            continue
        points.extend(key_points)
    return points, errors


def _check_distinct(points: list[Point], masters: Masters) -> None:
    """Point ids hash the config key, so only one key's own points can collide."""
    seen: set[str] = set()
    for p in points:
        if p.point_id in seen:
            raise _key_error(masters, p.config_key, "", f"two sweep points are identical ({p.exp_name}); remove one")
        seen.add(p.point_id)


def server_groups(points: list[Point]) -> list[list[Point]]:
    """Points that can share one server: same serving config, different concurrency (plan order)."""
    groups: dict[str, list[Point]] = {}
    for p in points:
        shape = {k: v for k, v in p.row().items() if k not in ("conc", "exp-name")}
        groups.setdefault(json.dumps([p.config_key, shape], sort_keys=True), []).append(p)
    return list(groups.values())
