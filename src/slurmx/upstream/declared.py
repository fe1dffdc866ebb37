"""Declared differences from upstream: reviewed rows (process, item, upstream value, slurmx value, kind, why)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from slurmx import engines
from slurmx.backends import mooncake
from slurmx.config.yamlfile import load_yaml
from slurmx.errors import ConfigError
from slurmx.upstream.capture import PORT
from slurmx.upstream.facts import Difference, number

KINDS = {"review-bug-fixed", "run-time-port", "deliberate", "cluster-layout", "open"}
FIELDS = {"keys", "processes", "item", "upstream", "slurmx", "kind", "why", "generated"}


@dataclass(frozen=True)
class Declared:
    """One reviewed row of the table: a difference that is meant, and why."""

    keys: tuple[str, ...]  # config keys it applies to; () for all
    processes: tuple[str, ...]  # the processes it applies to (`lmcache` also each of its servers: lmcache.0, ...)
    item: str
    upstream: str | None
    slurmx: str | None
    kind: str
    why: str
    where: str = ""  # file:line, to name a stale row
    generated: bool = False  # written by `recipes import` (rewritten by the next import), not by a person

    def covers(self, key: str, diff: Difference) -> bool:
        return (
            (not self.keys or key in self.keys)
            and (diff.process in self.processes or diff.process.partition(".")[0] in self.processes)
            and (self.item, self.upstream, self.slurmx) == (diff.item, diff.upstream, diff.slurmx)
        )


def _text(value: object) -> str | None:
    return None if value is None else number(str(value)) if not isinstance(value, str) else value


def load_declared(path: Path) -> list[Declared]:
    """The table's rows; a bad row is a ConfigError naming file, line and field."""
    data, index = load_yaml(path)
    rows: Any = data.get("differences") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ConfigError(path, 1, "differences", "a differences table is a mapping with a 'differences' list")
    out = []
    for n, row in enumerate(rows):
        line = index.line_of(data, ("differences", n))
        if not isinstance(row, dict):
            raise ConfigError(path, line, f"differences[{n}]", "each row is a mapping")
        for name in sorted(set(row) - FIELDS):
            raise ConfigError(
                path,
                index.line_of(data, ("differences", n, name)),
                name,
                f"unknown field (have: {', '.join(sorted(FIELDS))})",
            )
        for name in ("processes", "item", "upstream", "slurmx", "kind", "why"):
            if name not in row:
                raise ConfigError(path, line, f"differences[{n}].{name}", "missing")
        if row["kind"] not in KINDS:
            raise ConfigError(
                path, index.line_of(data, ("differences", n, "kind")), "kind", f"{row['kind']!r} not in {sorted(KINDS)}"
            )
        if not isinstance(row.get("generated", False), bool):
            raise ConfigError(path, index.line_of(data, ("differences", n, "generated")), "generated", "true or false")
        if not row["why"]:
            raise ConfigError(
                path, index.line_of(data, ("differences", n, "why")), "why", "every declared difference says why"
            )
        out.append(
            Declared(
                keys=tuple(row.get("keys", ())),
                processes=tuple(row["processes"]),
                item=row["item"],
                upstream=_text(row["upstream"]),
                slurmx=_text(row["slurmx"]),
                kind=row["kind"],
                why=row["why"],
                where=f"{path}:{line}",
                generated=row.get("generated") is True,
            )
        )
    return out


LAYOUT_WHY = (
    "cluster layout: upstream's weights and draft live where its launcher stages them ($MODEL_PATH) or where the "
    "script downloads them at each job (a directory of its own); slurmx stages both once under the cluster "
    "profile's model root"
)  # fmt: skip
SERVED_NAME_WHY = (
    "slurmx serves the model under its config name, the hub id clients send (as InferenceX's b300-nv launcher "
    "does); this cluster's launcher exports MODEL=$MODEL_PATH, so upstream serves and asks for it by its path"
)
_LAYOUT_MARKS = ("$MODEL_PATH", "<work>/")


def is_layout(diff: Difference) -> bool:
    """A difference in where files live only: a staged path on one side, the model root's on the other (or the
    same directory under two roots: the launcher's staging tree and the cluster profile's model root)."""
    if diff.item.startswith("download model "):
        return diff.upstream is None or diff.upstream.startswith(_LAYOUT_MARKS) or _same_dir(diff)
    # both sides name a file: upstream's staged or downloaded copy, slurmx's under the model root
    return (
        diff.upstream is not None
        and diff.slurmx is not None
        and diff.slurmx.startswith(("/", "$"))
        and (diff.upstream.startswith(_LAYOUT_MARKS) or _same_dir(diff))
    )


def _same_dir(diff: Difference) -> bool:
    a, b = diff.upstream or "", diff.slurmx or ""
    if _hub_id(a) and b.startswith("/") and b.endswith("/" + a):  # the hub's model, staged by slurmx
        return True
    return a.startswith("/") and b.startswith("/") and a != b and Path(a).name == Path(b).name


def _hub_id(value: str) -> bool:
    return "/" in value and value[:1] not in ("/", "$", "<") and ":" not in value


DEFAULT_HASH_SEED = "0"  # the importer's where upstream sets none on any arm (declared below, for review)
# slurmx's own choices, the same for every imported key: (process or "*", item, upstream, slurmx) -> why
OWN_CHOICES: dict[tuple[str, str, str | None, str | None], str] = {
    ("*", "--host", "0.0.0.0", "127.0.0.1"): (
        "loopback: nothing off the node talks to the engine (the replay and the metric scrapes run on it), so "
        "slurmx does not expose an unauthenticated OpenAI-compatible endpoint on every interface"
    ),
    ("*", "env PYTHONUNBUFFERED", None, "1"): (
        "slurmx starts every process unbuffered (process.COMMON_ENV) so its log is whole when the point ends"
    ),
    ("replay", "env GPU_METRICS_CSV", "$RESULT_DIR/gpu_metrics.csv", None): (
        "InferenceX's GPU power monitor writes beside the result; slurmx samples the GPUs with its own sampler "
        "(node/telemetry.py) into the point's telemetry/"
    ),
}


HASH_SEED_WHY = (
    "this arm of the script fixes no hash seed; slurmx's recipes hash prefixes with one fixed seed in every arm, "
    "the one the script's other arms set (0 where none does) (seed 000's review: arms with different seeds build "
    "different prefix-cache keys)"
)
ROUTER_ENV_WHY = (
    "a setting the script exports to its whole shell, which the router (a Rust binary: it reads none of the "
    "engine's, torch's or aiperf's variables) inherits unread; slurmx gives each process only its own env"
)
BACKEND_MASTER_WHY = (
    "a setting the script exports to its whole shell, which mooncake_master (the store's metadata and eviction "
    "service, set by its flags) inherits; the transfer engine (MC_*), the config file and the segments are the "
    "store clients' in the engine, which gets them (compared there); slurmx gives the master its flags only"
)
BACKEND_FILE_PATH_WHY = (
    "the path of the config file the script writes for the store's clients in the engine, which aiperf inherits "
    "from the script's shell unread; slurmx names it to the engine only"
)
LOOPBACK_URL_WHY = (
    "the servers bind 127.0.0.1 only (see --host), so slurmx names that address; `localhost` can resolve to ::1 "
    "first, where nothing listens"
)
LOCAL_METRICS_URLS = re.compile(
    r"http://(localhost|127\.0\.0\.1):\d+/metrics(,http://(localhost|127\.0\.0\.1):\d+/metrics)*$"
)
METRICS_URLS_WHY = (
    "benchmark_lib.sh's build_replay_cmd turns this variable into aiperf's --server-metrics flag; slurmx passes "
    "the flag itself (compared as replay --server-metrics)"
)
PARALLEL_DEFAULTS = ("--data-parallel-size", "--pipeline-parallel-size", "--decode-context-parallel-size")
PARALLEL_DEFAULT_WHY = "1 is the engine's default for this parallelism: slurmx passes the flag only above 1"
VERSION_WHY = (
    "slurmx reads the installed version back and records it; a mismatch with the pin fails the point at "
    "provisioning. Upstream installs with pip and does not check what landed"
)
ENGINE_METRICS = frozenset(f"http://{host}:{PORT}/metrics" for host in ("localhost", "127.0.0.1", "0.0.0.0"))
ENGINE_METRICS_WHY = (
    "the script names the engine's own /metrics to aiperf (AIPERF_SERVER_METRICS_URLS); aiperf scrapes the "
    "serving endpoint's /metrics by itself and drops the duplicate (benchmark_lib.sh build_replay_cmd), so "
    "slurmx names only other servers' endpoints"
)
TIER_METRICS_WHY = (
    "the script names aiperf no /metrics but the engine's, which aiperf scrapes at the serving endpoint by itself "
    "(benchmark_lib.sh build_replay_cmd drops the duplicate); slurmx names the KV tier's own /metrics (the Mooncake "
    "master's, on its metrics port), whose counters, scraped by the node too, are the tier's side of the evidence"
)
MASTER_FLAG_WHY = {
    "--rpc_address": (
        "the master's RPC binds loopback: its only clients are the engine ranks on the same node, which reach it at "
        "master_server_address 127.0.0.1:<port>; upstream leaves it on every interface"
    ),
    "--metrics_port": (
        "run-time port: the master's /metrics (the tier's counters, scraped by the node before and after the replay) on a port "
        "slurmx picks free on the node; upstream leaves Mooncake's fixed default 9003 and scrapes nothing there"
    ),
}
REPLAY_INHERITS_WHY = (
    "a setting of the engine's stack at this point, which the script exports to its whole shell, so aiperf "
    "inherits it unread; slurmx gives it to the engine only"
)
REPLAY_ONLY_ENV = "AIPERF_"  # aiperf's own settings: the replay's env, whatever else inherits them upstream
REPLAY_ENV_WHY = (
    "aiperf's own setting, which the script exports to its whole shell so the engine inherits it too; slurmx "
    "gives it to the replay, the one process that reads it"
)
PORT_WHY = (
    "run-time port: the script's env names the fixed port 8888; slurmx picks the server's port on the node and "
    "gives it to the process that needs it"
)
LAUNCHER_PORT_WHY = (
    "run-time port: the launcher exports the port its script serves on (8888, or one derived from the job id); "
    "slurmx picks the server's port on the node when the job starts"
)
SERVER_PORT_WHY = (
    "run-time port: the script gives each of its LMCache servers a fixed port; slurmx picks every server's ports free "
    "on the node when the job starts (render shows placeholders) and names them to the engine's connector"
)
_SERVER_URLS = re.compile(r"tcp://127\.0\.0\.1:\d+(,tcp://127\.0\.0\.1:\d+)*")
TOKENIZER_WHY = (
    "slurmx's replay reads the tokenizer from the staged model (a compute node may have no hub access); the "
    "script names the model's hub id"
)


def own_choice(diff: Difference) -> str | None:
    """Why a difference is one of slurmx's own constant choices (OWN_CHOICES, the staged tokenizer), or None."""
    if (diff.process, diff.item, diff.slurmx) == ("replay", "--tokenizer", "$MODEL_PATH") and _hub_id(
        diff.upstream or ""
    ):
        return TOKENIZER_WHY
    served_name = (diff.process, diff.item) in (("engine", "--served-model-name"), ("replay", "--model"))
    if served_name and diff.upstream == "$MODEL_PATH" and _hub_id(diff.slurmx or ""):
        return SERVED_NAME_WHY
    inherited = diff.process == "router" and diff.item.startswith("env ") and not diff.item.startswith("env RUST_")
    if inherited and diff.slurmx is None:
        return ROUTER_ENV_WHY
    if diff.process == mooncake.MASTER and diff.item.startswith(("env ", "file ")) and diff.slurmx is None:
        return BACKEND_MASTER_WHY
    if (diff.process, diff.item, diff.slurmx) == ("replay", f"env {mooncake.CONFIG_ENV}", None):
        return BACKEND_FILE_PATH_WHY
    local = re.fullmatch(r"http://localhost(:\d+.*)", diff.upstream or "")
    if local and diff.slurmx == f"http://127.0.0.1{local[1]}":
        return LOOPBACK_URL_WHY
    if (diff.process, diff.item, diff.slurmx) == ("replay", "env AIPERF_SERVER_METRICS_URLS", None):
        return METRICS_URLS_WHY if LOCAL_METRICS_URLS.match(diff.upstream or "") else None
    default = diff.item in PARALLEL_DEFAULTS and (diff.upstream, diff.slurmx) == ("1", None)
    if diff.process == "engine" and default:
        return PARALLEL_DEFAULT_WHY
    if diff.process == "provision" and diff.item.startswith("version ") and diff.upstream is None and diff.slurmx:
        return VERSION_WHY
    if (
        diff.process in ("engine", "replay")
        and (diff.item, diff.upstream) == ("env PYTHONHASHSEED", None)
        and (diff.slurmx or "").isdigit()
    ):
        return HASH_SEED_WHY
    if (diff.process, diff.item, diff.slurmx) == (
        "replay",
        "--server-metrics",
        None,
    ) and diff.upstream in ENGINE_METRICS:
        return ENGINE_METRICS_WHY
    # slurmx names a tier's /metrics where the script names the engine's own, or none
    tier_url = bool(diff.slurmx and LOCAL_METRICS_URLS.match(diff.slurmx)) and diff.slurmx not in ENGINE_METRICS
    engine_or_none = diff.upstream is None or diff.upstream in ENGINE_METRICS
    if (diff.process, diff.item) == ("replay", "--server-metrics") and tier_url and engine_or_none:
        return TIER_METRICS_WHY
    if diff.process == mooncake.MASTER and diff.upstream is None and diff.item in MASTER_FLAG_WHY:
        value = diff.slurmx or ""
        if value == mooncake.HOST if diff.item == "--rpc_address" else value.isdigit():
            return MASTER_FLAG_WHY[diff.item]
    if (diff.process, diff.item, diff.slurmx) == ("launcher", "env PORT", None) and (diff.upstream or "").isdigit():
        return LAUNCHER_PORT_WHY
    both = (diff.upstream or "", diff.slurmx or "")
    server_port = diff.process.partition(".")[0] == "lmcache" and diff.item in ("--port", "--http-port")
    if server_port and all(v.isdigit() for v in both):
        return SERVER_PORT_WHY
    urls = (diff.process, diff.item) == (
        "engine",
        "--kv-transfer-config/kv_connector_extra_config/lmcache.mp.server_urls",
    )
    if urls and all(_SERVER_URLS.fullmatch(v) for v in both) and len({v.count(",") for v in both}) == 1:
        return SERVER_PORT_WHY
    if diff.item.startswith("env ") and diff.slurmx is None and _names_port(diff.upstream or ""):
        return PORT_WHY
    if diff.process == "engine" and diff.item.startswith(f"env {REPLAY_ONLY_ENV}") and diff.slurmx is None:
        return REPLAY_ENV_WHY
    for process in (diff.process, "*"):
        why = OWN_CHOICES.get((process, diff.item, diff.upstream, diff.slurmx))
        if why is not None:
            return why
    return None


# settings of the engines' own stacks (each engine's, torch, NCCL, Triton): aiperf, which the script's shell hands
# them too, reads none of them
ENGINE_SIDE_ENV = tuple(
    f"env {prefix}"
    for prefix in (*(p for e in engines.REGISTRY.values() for p in e.env_prefixes), "PYTORCH_", "TORCH_", "NCCL_",
                   "CUDA_", "TRITON_")
)  # fmt: skip


def inherited_by_replay(diff: Difference, upstream: Mapping[tuple[str, str], str]) -> bool:
    """The replay has, upstream, an engine-stack setting of the same point's engine (`upstream`: that point's
    facts), which slurmx gives the engine only (REPLAY_INHERITS_WHY)."""
    replay_only = diff.process == "replay" and diff.slurmx is None and diff.item.startswith(ENGINE_SIDE_ENV)
    return replay_only and diff.upstream is not None and upstream.get(("engine", diff.item)) == diff.upstream


def _names_port(value: str) -> bool:
    return any(f"{host}:{PORT}" in value for host in ("localhost", "127.0.0.1", "0.0.0.0"))


def _kind(diff: Difference) -> str:
    why = own_choice(diff)
    ports = (PORT_WHY, LAUNCHER_PORT_WHY, SERVER_PORT_WHY)
    return "cluster-layout" if why is None else "run-time-port" if why in ports else "deliberate"


def render_rows(
    key: str, diffs: list[Difference], reviewed: Sequence[Declared] = (), reasons: Mapping[Difference, str] = {}
) -> str:
    """A key's declared rows: the reviewed rows a person wrote (kept as they are), then the generated ones."""
    kept = [
        {"keys": list(r.keys), "processes": list(r.processes), "item": r.item, "upstream": r.upstream,
         "slurmx": r.slurmx, "kind": r.kind, "why": r.why}
        for r in reviewed if not r.generated
    ]  # fmt: skip
    rows = kept + [
        {"keys": [key], "processes": [d.process], "item": d.item, "upstream": d.upstream, "slurmx": d.slurmx,
         "kind": "deliberate" if d in reasons else _kind(d), "why": reasons.get(d) or own_choice(d) or LAYOUT_WHY,
         "generated": True}
        for d in diffs
    ]  # fmt: skip
    head = (
        f"# {key}: declared rows. Reviewed rows are kept as written; `slurmx recipes import` writes the cluster-layout"
        " ones and slurmx's own constant choices (upstream/declared.py OWN_CHOICES).\n"
    )
    return head + yaml.safe_dump({"differences": rows}, sort_keys=False, width=120)
