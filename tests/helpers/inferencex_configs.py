"""Hypothesis strategies for InferenceX master configs and runners files: valid ones, and valid ones
broken by one mutation (each mutation names the InferenceX rule it trips, or none).

Valid configs stay inside slurmx's documented stricter rules (positive tp/ep/isl/osl, no duplicate sweep
point, single-node servers that fit the node), so that on them slurmx must plan exactly what InferenceX does.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

# label -> gpus per node; cluster:none has no hardware entry (fine unless a key offloads to DRAM)
LABELS = {"cluster:a": 8, "cluster:b": 4, "cluster:none": 0}
FIXED_RUNNERS = ["h100", "cluster:a", "b200-nv"]
BACKENDS = ["lmcache", "umbp", "vllm-native", "mooncake", "vllm-simple", "hicache"]
SPEC = ["none", "mtp", "draft_model"]
KEY_NAMES = ["dsv4-fp4-b200-vllm", "kimik3-fp4-b300-sglang-agentic", "glm5-fp8-mi355x-trt", "a", "k-2"]


@st.composite
def runners(draw: st.DrawFn) -> dict[str, Any]:
    hardware = {
        label: {
            "available-cpu-dram-mib": draw(st.integers(50_000, 4_000_000)),
            "gpus-per-node": gpus,
        }
        for label, gpus in LABELS.items()
        if gpus
    }
    labels = {label: [f"{label.split(':')[-1]}-node-0"] for label in [*LABELS, *FIXED_RUNNERS]}
    return {"labels": labels, "hardware": hardware}


def _conc(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"conc-list": draw(st.lists(st.integers(1, 300), min_size=1, max_size=4, unique=True))}
    start = draw(st.integers(1, 64))
    return {"conc-start": start, "conc-end": draw(st.integers(start, 512))}


def _maybe(draw: st.DrawFn, entry: dict[str, Any], key: str, values: st.SearchStrategy[Any]) -> None:
    if draw(st.booleans()):
        entry[key] = draw(values)


def _router() -> st.SearchStrategy[dict[str, str]]:
    return st.fixed_dictionaries({"name": st.sampled_from(["vllm-router", "sglang-router"]), "version": st.just("0.2")})


def _backend(draw: st.DrawFn) -> dict[str, str]:
    backend = {"name": draw(st.sampled_from(BACKENDS))}
    _maybe(draw, backend, "version", st.sampled_from(["0.5.4rc4", "1.0", "abc123"]))
    return backend


def _single_entry(draw: st.DrawFn, max_gpus: int, agentic: bool, dram_ok: bool) -> dict[str, Any]:
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if t <= max_gpus]))
    entry: dict[str, Any] = {"tp": tp}
    _maybe(draw, entry, "pp", st.sampled_from([p for p in (1, 2) if tp * p <= max_gpus]))
    _maybe(draw, entry, "dcp-size", st.sampled_from([d for d in (1, 2, 4) if tp % d == 0]))
    _maybe(draw, entry, "pcp-size", st.sampled_from([c for c in (1, 2) if tp * entry.get("pp", 1) * c <= max_gpus]))
    _maybe(draw, entry, "ep", st.sampled_from([1, 2, 8]))
    _maybe(draw, entry, "dp-attn", st.booleans())
    _maybe(draw, entry, "spec-decoding", st.sampled_from(SPEC))
    if agentic:
        entry["kv-offloading"] = draw(st.sampled_from(["none", "dram"] if dram_ok else ["none"]))
        if entry["kv-offloading"] == "dram":
            entry["kv-offload-backend"] = _backend(draw)
    return entry | _conc(draw)


def _shape(entry: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two entries' rows differ, besides concurrency (unique, so no two points are identical)."""
    defaults = {"spec-decoding": "none", "kv-offloading": "none"}
    keys = ("tp", "pp", "dcp-size", "pcp-size", "spec-decoding", "kv-offloading")
    return (
        *(entry.get(k, defaults.get(k, 1)) for k in keys),
        entry.get("ep") or 1,
        bool(entry.get("dp-attn")),
        str(entry.get("kv-offload-backend")),
        str(entry.get("prefill")),
        str(entry.get("decode")),
    )


def _worker(draw: st.DrawFn, gpus_per_node: int, hardware: str | None) -> dict[str, Any]:
    tp = draw(st.sampled_from([1, 2, 4, 8, 16]))
    worker: dict[str, Any] = {"num-worker": draw(st.integers(0, 4)), "tp": tp, "ep": draw(st.sampled_from([1, 4, 8]))}
    worker["dp-attn"] = draw(st.booleans())
    _maybe(draw, worker, "dcp-size", st.sampled_from([d for d in (1, 2) if tp % d == 0]))
    _maybe(draw, worker, "additional-settings", st.lists(st.sampled_from(["A=1", "B=2"]), max_size=2))
    if hardware:
        worker["hardware"] = hardware
    return worker


def _multi_entry(draw: st.DrawFn, agentic: bool, dram_gpus: int, transfer: bool) -> dict[str, Any]:
    hardware = draw(st.sampled_from([None, "gb200"]))
    entry: dict[str, Any] = {
        "prefill": _worker(draw, dram_gpus, hardware),
        "decode": _worker(draw, dram_gpus, hardware),
    }
    _maybe(draw, entry, "spec-decoding", st.sampled_from(SPEC))
    if transfer:
        entry["kv-p2p-transfer"] = draw(st.sampled_from(["nixl", "mooncake"]))
    if agentic:
        prefill_gpus = entry["prefill"]["tp"]
        tiles = dram_gpus and (prefill_gpus % dram_gpus == 0 or dram_gpus % prefill_gpus == 0)
        _maybe(draw, entry, "kv-offloading", st.sampled_from(["none", "dram"] if tiles else ["none"]))
        if entry.get("kv-offloading") == "dram":
            entry["kv-offload-backend"] = _backend(draw)
    return entry | _conc(draw)


# Defined once: hypothesis builds a signature (compiling source) for each composite it wraps, and
# one nested in master_key was wrapped anew for every key drawn.
@st.composite
def _entry(
    draw: st.DrawFn, multinode: bool, agentic: bool, dram_ok: bool, gpus: int, transfer: bool, router_at_top: bool
) -> dict[str, Any]:
    if multinode:
        e = _multi_entry(draw, agentic, gpus if dram_ok else 0, transfer)
    else:
        e = _single_entry(draw, gpus or 8, agentic, dram_ok)
    if not router_at_top and draw(st.booleans()):
        e["router"] = draw(_router())
    return e


@st.composite
def master_key(draw: st.DrawFn) -> dict[str, Any]:
    multinode = draw(st.booleans())
    has_agentic = draw(st.booleans())
    has_fixed = not has_agentic or draw(st.booleans())
    runner = draw(st.sampled_from(list(LABELS) if has_agentic else FIXED_RUNNERS))
    gpus = LABELS.get(runner, 0)
    config: dict[str, Any] = {
        "image": draw(st.sampled_from(["vllm/vllm-openai:v0.32.0", "lmsysorg/sglang:v0.5"])),
        "model": "org/Model-1",
        "model-prefix": draw(st.sampled_from(["dsv4", "kimik3", "glm5"])),
        "runner": runner,
        "precision": draw(st.sampled_from(["fp4", "fp8"])),
        "framework": draw(st.sampled_from(["vllm", "sglang", "trt", "dynamo-sglang"])),
        "multinode": multinode,
    }
    router_at_top = draw(st.booleans())
    if router_at_top and draw(st.booleans()):
        config["router"] = draw(_router())
    transfer_at_top = False
    if multinode:
        config["disagg"] = draw(st.booleans())
        transfer_at_top = draw(st.booleans())
        if transfer_at_top:
            config["kv-p2p-transfer"] = "nixl"
    transfer_in_entries = multinode and not transfer_at_top and (config.get("disagg", False) or draw(st.booleans()))

    def entry(agentic: bool, dram_ok: bool) -> st.SearchStrategy[dict[str, Any]]:
        return _entry(multinode, agentic, dram_ok, gpus, transfer_in_entries, router_at_top)

    scenarios: dict[str, Any] = {}
    if has_fixed:
        seq_lens = st.sampled_from([(1024, 1024), (8192, 1024), (1024, 8192), (2048, 128)])
        scenarios["fixed-seq-len"] = [
            {"isl": isl, "osl": osl, "search-space": draw(st.lists(entry(False, False), max_size=3, unique_by=_shape))}
            for isl, osl in draw(st.lists(seq_lens, min_size=1, max_size=2, unique=True))
        ]
    if has_agentic:
        dram_ok = gpus > 0
        item: dict[str, Any] = {"search-space": draw(st.lists(entry(True, dram_ok), max_size=3, unique_by=_shape))}
        needs = any(e.get("kv-offloading") == "dram" for e in item["search-space"])
        if needs or draw(st.booleans()):
            # Any float InferenceX reads: its budget goes through Decimal(str(x)), slurmx's must agree.
            item["dram-utilization"] = round(draw(st.floats(0.01, 1.0)), draw(st.integers(2, 17)))
        scenarios["agentic-coding"] = [item]
    if transfer_in_entries and not any(s["search-space"] for group in scenarios.values() for s in group):
        config["kv-p2p-transfer"] = "nixl"  # disagg with no entry at all needs it at the top
    config["scenarios"] = scenarios
    return config


@st.composite
def master(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(KEY_NAMES), min_size=1, max_size=3, unique=True))
    return {name: draw(master_key()) for name in names}


def _entries(config: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for group in config["scenarios"].values() for item in group for e in item["search-space"]]


def _agentic_entries(config: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for item in config["scenarios"].get("agentic-coding", []) for e in item["search-space"]]


# Each mutation breaks one InferenceX rule (validation.py names in the comment), or none ("noop").
MUTATIONS = [
    "noop",  # both accept
    "dram-without-backend",  # _validate_kv_offload_fields
    "backend-without-offloading",  # _validate_kv_offload_fields
    "spec-eagle",  # spec_decoding Literal
    "unknown-field",  # extra='forbid'
    "conc-start-above-end",  # _validate_conc_fields
    "conc-list-and-range",  # _validate_conc_fields
    "no-concurrency",  # _validate_conc_fields
    "router-without-version",  # ComponentMetadata.version required
    "router-top-and-entry",  # _validate_component_metadata_scope
    "dcp-not-dividing-tp",  # _validate_tp_context_topology
    "empty-backend-name",  # KVOffloadBackendMetadata.name min_length
    "image-version",  # validate_component_version
    "agentic-runner-not-cluster",  # _validate_agentic_runner_is_cluster
    "single-node-disagg",  # disagg Literal[False]
    "drop-kv-offloading",  # single-node agentic entries must specify kv-offloading
    "star-in-key",  # load_config_files: no '*' in keys
    "worker-without-ep",  # WorkerConfig.ep required
    "worker-hardware-unpaired",  # _validate_worker_hardware_pair
    "dram-utilization-above-1",  # AgenticCodingConfig.dram_utilization le=1
    "drop-dram-utilization",  # validate_dram_offload_capacity
    "dram-on-label-without-hardware",  # generator: runner_hardware_int
    "no-scenario",  # at_least_one_scenario
    "empty-search-space",  # accepted by both: zero rows
    "lone-conc-start-beside-list",  # accepted by both: the list wins
    "missing-image",  # image required
]


@st.composite
def mutated_master(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    config = draw(master())
    mutation = draw(st.sampled_from(MUTATIONS))
    mutated = copy.deepcopy(config)
    name = draw(st.sampled_from(sorted(mutated)))
    key = mutated[name]
    entries = _entries(key)
    agentic = _agentic_entries(key)

    def pick(items: list[dict[str, Any]]) -> dict[str, Any]:
        return draw(st.sampled_from(items))

    if mutation == "dram-without-backend" and agentic:
        e = pick(agentic)
        e["kv-offloading"] = "dram"
        e.pop("kv-offload-backend", None)
    elif mutation == "backend-without-offloading" and agentic:
        e = pick(agentic)
        e["kv-offloading"] = "none"
        e["kv-offload-backend"] = {"name": "lmcache"}
    elif mutation == "spec-eagle" and entries:
        pick(entries)["spec-decoding"] = "eagle"
    elif mutation == "unknown-field":
        target = pick(entries) if entries else key
        target[draw(st.sampled_from(["tpp", "conc", "kv-offload", "imagee"]))] = 1
    elif mutation == "conc-start-above-end" and entries:
        e = pick(entries)
        e.pop("conc-list", None)
        e.update({"conc-start": 16, "conc-end": 8})
    elif mutation == "conc-list-and-range" and entries:
        e = pick(entries)
        e.update({"conc-list": [4], "conc-start": 1, "conc-end": 8})
    elif mutation == "no-concurrency" and entries:
        e = pick(entries)
        for k in ("conc-list", "conc-start", "conc-end"):
            e.pop(k, None)
    elif mutation == "router-without-version":
        (pick(entries) if entries else key)["router"] = {"name": "vllm-router"}
    elif mutation == "router-top-and-entry" and entries:
        key["router"] = {"name": "r", "version": "1"}
        pick(entries)["router"] = {"name": "r", "version": "1"}
    elif mutation == "dcp-not-dividing-tp" and entries:
        e = pick(entries)
        if "tp" in e:
            e["tp"] = 4
            e["dcp-size"] = 3
        else:
            e["prefill"]["dcp-size"] = e["prefill"]["tp"] * 2
    elif mutation == "empty-backend-name" and agentic:
        e = pick(agentic)
        e["kv-offloading"] = "dram"
        e["kv-offload-backend"] = {"name": ""}
    elif mutation == "image-version" and agentic:
        e = pick(agentic)
        if e.get("kv-offload-backend"):
            e["kv-offload-backend"]["version"] = "image:vllm/vllm-openai:v1"
    elif mutation == "agentic-runner-not-cluster" and "agentic-coding" in key["scenarios"]:
        key["runner"] = "b300"
    elif mutation == "single-node-disagg" and not key["multinode"]:
        key["disagg"] = True
    elif mutation == "drop-kv-offloading" and agentic and not key["multinode"]:
        e = pick(agentic)
        e.pop("kv-offloading", None)
        e.pop("kv-offload-backend", None)
    elif mutation == "star-in-key":
        mutated[name + "*"] = mutated.pop(name)
    elif mutation == "worker-without-ep" and key["multinode"] and entries:
        pick(entries)["decode"].pop("ep")
    elif mutation == "worker-hardware-unpaired" and key["multinode"] and entries:
        e = pick(entries)
        e["prefill"]["hardware"] = "gb200"
        e["decode"].pop("hardware", None)
    elif mutation == "dram-utilization-above-1" and "agentic-coding" in key["scenarios"]:
        key["scenarios"]["agentic-coding"][0]["dram-utilization"] = 1.5
    elif mutation == "drop-dram-utilization" and "agentic-coding" in key["scenarios"]:
        key["scenarios"]["agentic-coding"][0].pop("dram-utilization", None)
    elif mutation == "dram-on-label-without-hardware" and agentic and not key["multinode"]:
        key["runner"] = "cluster:none"
        e = pick(agentic)
        e["kv-offloading"] = "dram"
        e["kv-offload-backend"] = {"name": "lmcache"}
        key["scenarios"]["agentic-coding"][0].setdefault("dram-utilization", 0.5)
    elif mutation == "no-scenario":
        key["scenarios"] = {}
    elif mutation == "empty-search-space":
        group = draw(st.sampled_from(sorted(key["scenarios"])))
        key["scenarios"][group][0]["search-space"] = []
        if key.get("disagg") and "kv-p2p-transfer" not in key:
            key["kv-p2p-transfer"] = "nixl"
            for e in _entries(key):
                e.pop("kv-p2p-transfer", None)
    elif mutation == "lone-conc-start-beside-list" and entries:
        e = pick(entries)
        if "conc-list" in e:
            e["conc-start"] = 2
    elif mutation == "missing-image":
        key.pop("image")
    return mutation, mutated
