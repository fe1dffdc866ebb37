"""`slurmx recipes import`: a key's recipe from InferenceX's script, captured on every point of the key.

The engine part comes from slurmx.upstream.derive (pure rules over the captured flags and env); this
module runs the captures, reads the arm knobs the backends build their connector JSON from, and writes
the recipe file with a header naming the upstream script, its digest, the tree's commit and the date.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from slurmx import backends, engines
from slurmx.backends.base import ArmCapture
from slurmx.config.master import kebab
from slurmx.flags import Flags, FlagValue
from slurmx.plan import Point
from slurmx.recipes.model import REPLAY_BUILT_FLAGS, REPLAY_FIELDS, Replay
from slurmx.recipes.spec import INFERENCEX_FILE, MODEL_PATH
from slurmx.store.atomic import write_text
from slurmx.upstream.capture import CAPTURE_TREE, PORT, Capture, Started, Upstream, capture, process_names, program_of
from slurmx.upstream.declared import DEFAULT_HASH_SEED, REPLAY_ONLY_ENV, Declared
from slurmx.upstream.derive import (
    MAX_NUM_SEQS,
    Derived,
    Observed,
    conc_ranges,
    derive,
    one_hash_seed,
    parse_flags,
    parse_value,
)
from slurmx.upstream.facts import Guard, capture_paths, image_edits, image_finds, provision_facts
from slurmx.upstream.inferencex import content_digest, git_commit

DATE_LINE = "# imported: "  # the header line that alone may differ between two imports of one tree


@dataclass(frozen=True)
class Captured:
    point: Point
    upstream: Upstream
    capture: Capture
    work: str  # the capture's work dir (gone; its paths are replaced by placeholders)


def capture_point(point: Point, upstream: Upstream) -> Captured:
    with tempfile.TemporaryDirectory(prefix="slurmx-import-") as work:
        cap = capture(point, upstream, Path(work))
        return Captured(point, upstream, cap, str(cap.work_dir))


def _engine(c: Captured) -> Started | None:
    programs = engines.get(c.point.engine).upstream_programs
    return next((s for s in c.capture.started if programs.get(program_of(s, programs)) == "engine"), None)


def _engine_started(c: Captured) -> tuple[list[str], list[str], dict[str, str]] | None:
    """The engine's command (the words its upstream program names: `mpirun -n 1 ... trtllm-serve` is one), the
    argv after them, and its env."""
    s = _engine(c)
    if s is None:
        return None
    words = program_of(s, engines.get(c.point.engine).upstream_programs).split()
    return words, s.argv[len(words) - 1 :], s.env_delta(c.capture.base_env)


def _connector(c: Captured, flags: Flags) -> dict[str, Any] | None:
    """The offload settings among the engine's flags (the engine knows where: a connector's JSON)."""
    return engines.get(c.point.engine).offload_in(flags)


LOCAL_URL = re.compile(r"(localhost|127\.0\.0\.1|0\.0\.0\.0):\d+")  # a port on the node: slurmx picks its own
# router flags slurmx sets itself (node/launch.py, recipes/resolve.py): its address, the engine behind it, the
# metrics address (metrics-port), the DP ranks it expands the engine into
ROUTER_COMPUTED = frozenset({
    "--host", "--port", "--worker-urls", "--prometheus-host", "--prometheus-port", "--intra-node-data-parallel-size",
})  # fmt: skip


def router_data(captured: Sequence[Captured]) -> dict[str, Any] | None:
    """The recipe's router from the points whose script started one: its flags (one value on every such
    point), the pin the script installs, whether it fronts exactly the DP-attention points, and the aiperf env
    only its points' replays get."""
    routed: list[tuple[Captured, list[str]]] = []
    for c in captured:
        roles = engines.get(c.point.engine).upstream_programs
        started = [s for s in c.capture.started if roles.get(program_of(s, roles)) == "router"]
        if started:  # the router's program, by its leading arguments too (`python3 -m sglang_router.launch_router`)
            words = program_of(started[-1], roles).split()
            routed.append((c, [" ".join(words), *started[-1].argv[len(words) - 1 :]]))
    if not routed:
        return None
    programs = {argv[0] for _, argv in routed}
    parsed = [parse_flags(argv[1:])[1] for _, argv in routed]
    flags = [{n: v for n, v in f.items() if n not in ROUTER_COMPUTED} for f in parsed]
    if len(programs) > 1 or any(f != flags[0] for f in flags):
        raise ImportRefused("the router's program or flags differ between the points that start it")
    program = programs.pop()
    names = {c.point.router.name for c, _ in routed if c.point.router is not None}
    data: dict[str, Any] = {"name": names.pop() if len(names) == 1 else program}
    # the router's pip installs, by its program's name (vllm-router) or the config's router name (sglang-router)
    installs = {f"pip install {program}", f"pip install {data['name']}"}
    pins = {v.split()[0].partition("==")[2] for c, _ in routed
            for (_, item), v in provision_facts(c.capture.started, {}).items() if item in installs}  # fmt: skip
    if not pins:  # no point's script installs it: the image's own runs (the DSv4 B200/B300 SGLang scripts)
        data["from-image"] = True
    if len(pins) == 1 and (pin := pins.pop()):
        data["version"] = pin
    data["launcher"] = program.split()
    with_router = {c.point.exp_name for c, _ in routed}
    if with_router == {c.point.exp_name for c in captured if c.point.dp_attn}:
        data["dp-attn"] = True
    if all("--prometheus-port" in f for f in parsed):
        data["metrics-port"] = True
    replays = {c.point.exp_name: _replay_delta(c) for c in captured}
    ours = _alike([replays[name] for name in with_router])
    others = [replays[c.point.exp_name] for c in captured if c.point.exp_name not in with_router]
    env = {k: v for k, v in ours.items()
           if k.startswith(REPLAY_ONLY_ENV) and not LOCAL_URL.search(v) and all(e.get(k) != v for e in others)}  # fmt: skip
    if env:
        data["replay-env"] = env
    if flags[0]:
        data["flags"] = _flag_data(flags[0])
    return data


def _replay(c: Captured) -> Started | None:
    """The point's replay: the last `aiperf profile` its script started."""
    return next((s for s in reversed(c.capture.started) if s.name == "aiperf" and s.argv[:1] == ["profile"]), None)


def _replay_delta(c: Captured) -> dict[str, str]:
    replay = _replay(c)
    return replay.env_delta(c.capture.base_env) if replay else {}


def _without(per_arm: dict[str, dict[str, str]], names: set[str]) -> dict[str, dict[str, str]]:
    """Each arm's env less `names`; arms left with none dropped."""
    kept = {arm: {k: v for k, v in env.items() if k not in names} for arm, env in per_arm.items()}
    return {arm: env for arm, env in kept.items() if env}


def arm_of(point: Point) -> str:
    return point.kv_offload_backend.name if point.kv_offload_backend else "none"


class ImportRefused(Exception):
    """A key the importer will not write a recipe for; the message says why, one line each."""


def observe(captured: Sequence[Captured]) -> tuple[list[Observed], dict[str, list[Flags]], dict[str, str]]:
    """Each point's engine flags (computed ones taken out), each arm's connector JSONs, and the draft model.
    Env naming the server's port is slurmx's to set (it picks the port on the node), and aiperf's own settings
    (which the script's shell also hands the engine) are the replay's: neither is observed here."""
    engine = engines.get(captured[0].point.engine)
    observed: list[Observed] = []
    connectors: dict[str, list[Flags]] = {}
    draft: dict[str, str] = {}
    for c in captured:
        found = _engine_started(c)
        if found is None:
            raise ImportRefused(f"{c.point.exp_name}: the script started no engine (exited {c.capture.returncode})")
        _, argv, env = found
        _, flags = parse_flags(argv)
        started = _engine(c)
        flags = engine.inline_files(flags, started.files if started is not None else {})  # its config file's keys
        if (connector := _connector(c, flags)) is not None:
            connectors.setdefault(arm_of(c.point), []).append(connector)
        # --max-num-seqs stays: derive recognises k x conc (max-num-seqs-per-conc) or keeps the fixed value
        flags = {n: _model_named(v, c) for n, v in flags.items() if n not in engine.computed_flags - {MAX_NUM_SEQS}}
        at, key = engine.draft_at or ("", "")
        speculative = flags.get(at)
        if isinstance(speculative, dict) and isinstance(speculative.get(key), str):
            path = str(speculative[key])
            downloads = provision_facts(c.capture.started, {})
            repo = next((item.split(" ", 2)[2] for item, v in ((k[1], v) for k, v in downloads.items())
                         if item.startswith("download model ") and v == path), None)  # fmt: skip
            if repo is None and not path.startswith("/") and "/" in path:
                repo = path  # a hub id the engine downloads itself; slurmx stages it with the model
            if repo is None:
                raise ImportRefused(f"{c.point.exp_name}: {at} {key} {path} is no model the script downloads")
            draft[repo] = path
            flags[at] = {k: v for k, v in speculative.items() if k != key}
        # the backend names its own files (its config's path); what a search of the image finds is provision.find-env's
        own = {*backends.get(arm_of(c.point)).own_env, *image_finds(c.capture.started)}
        observed.append(
            Observed(c.point.exp_name, arm_of(c.point), c.point.tp, c.point.ep, c.point.dp_attn, c.point.conc,
                     flags, {k: _placeholders(v, c) for k, v in env.items()
                             if f":{PORT}" not in v and not k.startswith(REPLAY_ONLY_ENV) and k not in own})
        )  # fmt: skip
    return observed, connectors, draft


def _model_named(value: FlagValue, c: Captured) -> FlagValue:
    """A flag whose value is the staged model's path (a script's `--tokenizer-path "$MODEL"`) or a file in it
    (trtllm-serve's `--chat_template "$MODEL_PATH/chat_template.jinja"`), or a file of the InferenceX tree the script
    runs from (`--chat-template "$SCRIPT_DIR/../chat_templates/X.jinja"`), as the recipe's placeholder for it: the
    path is the capture's own, so it differs between points."""
    if isinstance(value, str) and value.startswith(tree := f"{c.work}/{CAPTURE_TREE}/"):
        return f"{INFERENCEX_FILE}/{value.removeprefix(tree)}"
    staged = c.upstream.model_path.replace("{work}", c.work)
    if not staged.startswith("/") or not isinstance(value, str):
        return value
    if value in (staged, f"{staged}/"):
        return MODEL_PATH
    return f"{MODEL_PATH}/{value.removeprefix(staged + '/')}" if value.startswith(f"{staged}/") else value


def _placeholders(value: str, c: Captured) -> str:
    for real, placeholder in capture_paths(c.work, c.upstream.model_path).items():
        value = value.replace(real, placeholder)
    return value


def arm_capture(c: Captured) -> ArmCapture:
    """What the point's script handed the backend beyond the connector JSON: the files its engine's env names,
    the flags of the backend's own servers, what it pip-installs and import-checks, and what it measured by df."""
    engine = _engine(c)
    roles = engines.get(c.point.engine).upstream_programs
    started = c.capture.started
    servers = {name: parse_flags(s.argv)[1] for s, name in zip(started, process_names(started), strict=True)
               if name is not None and program_of(s, roles) not in roles}  # fmt: skip
    facts = provision_facts(started, {})
    installs = {item.removeprefix("pip install "): v for (_, item), v in facts.items()
                if item.startswith("pip install ")}  # fmt: skip
    checks = tuple(item.removeprefix("import-check ") for _, item in facts if item.startswith("import-check "))
    measured = tuple(a for s in started if s.name == "df" for a in s.argv if not a.startswith("-"))
    groups = tuple(
        frozenset(item.removeprefix("pip install ") for _, item in provision_facts([s], {})) for s in started
    )
    pip_groups = tuple(g for g in groups if g and all(n in installs for n in g))
    env = engine.env_delta(c.capture.base_env) if engine is not None else {}
    return ArmCapture(engine.files if engine is not None else {}, servers, installs, checks, measured, pip_groups, env)


def probed(arm: str, captured: Sequence[Captured]) -> list[Captured]:
    """The captures of the variants the arm's backend asks of its first point (another budget or TP), each
    with a connector JSON; a variant the script refuses is dropped."""
    if not captured:
        return []
    first = captured[0]
    runs = [capture_point(point, first.upstream) for point in backends.get(arm).probes(first.point)]
    return [c for c in runs if c.capture.returncode == 0 and _connector(c, _engine_flags(c)) is not None]


def _engine_flags(c: Captured) -> Flags:
    found, started = _engine_started(c), _engine(c)
    if found is None or started is None:
        return {}
    return engines.get(c.point.engine).inline_files(parse_flags(found[1])[1], started.files)


def arm_knobs(arm: str, configs: list[Flags], points: list[Point], captured: Sequence[Captured] = ()) -> dict[str, Any]:
    """The arm's typed knobs its backend rebuilds the captured connector JSON from (the backend knows how); with
    `captured` (the arm's points' captures), also its files and servers, and those of the probes it asks."""
    probes = probed(arm, captured)
    extra = [_connector(c, _engine_flags(c)) for c in probes]
    configs = [*configs, *(e for e in extra if e is not None)]
    seen = [arm_capture(c) for c in (*captured, *probes)]
    backend = backends.get(arm)
    try:
        knobs = backend.knobs_from_connector(configs, [*points, *(c.point for c in probes)], seen)
    except ValueError as why:
        raise ImportRefused(f"arm {arm}: {why}") from None
    routers = frozenset(p for c in captured for p in _routers(c.point.engine))
    return {**knobs, **install_knobs(arm, backend.distribution, seen, routers)}


def install_knobs(
    arm: str, distribution: str | None, seen: Sequence[ArmCapture], routers: frozenset[str]
) -> dict[str, Any]:
    """The arm's wheel page (pip --find-links of the backend's wheel) and the pinned packages its points install
    beside it, in the same pip (not a router's), alike on every point of the arm."""
    if distribution is None or not seen:
        return {}
    pages, beside = set(), set()
    for handed in seen:
        wheel = [v for n, v in handed.installs.items() if n.startswith(distribution)]
        pages.add(
            next((o.partition("=")[2] for v in wheel for o in v.split()[1:] if o.startswith("--find-links=")), None)
        )
        together = beside_wheel(handed.pip_groups, distribution)
        pinned = (
            v.split()[0]
            for n, v in handed.installs.items()
            if n in together and not n.startswith(distribution) and n not in routers
        )
        beside.add(tuple(sorted(p for p in pinned if "==" in p)))
    if len(pages) > 1 or len(beside) > 1:
        raise ImportRefused(
            f"arm {arm}: its points install the backend's wheel from different pages or beside other pins"
        )
    page, requires = pages.pop(), beside.pop()
    return {**({"find-links": page} if page else {}), **({"requires": list(requires)} if requires else {})}


def _flag_data(flags: Flags) -> dict[str, Any]:
    return dict(flags)


def recipe_data(key: str, captured: Sequence[Captured], derived: Derived, draft: dict[str, str],
                connectors: dict[str, list[Flags]]) -> dict[str, Any]:  # fmt: skip
    point = captured[0].point
    if len(draft) > 1:
        raise ImportRefused(f"{key}: more than one draft model ({', '.join(sorted(draft))})")
    engine: dict[str, Any] = {}
    found = _engine_started(captured[0])
    assert found is not None  # observe() refused the key otherwise
    command, argv, _ = found
    positional, _ = parse_flags(argv)
    engine_of = engines.get(point.engine)
    blocks = sorted({engine_of.block_size(_engine_flags(c)) for c in captured})  # the engine's own, per point
    if len(blocks) > 1:
        raise ImportRefused(f"{key}: the points run with different KV block sizes ({', '.join(map(str, blocks))})")
    model_flag = engine_of.model_flag
    # the model path is the model flag's value, else the last positional
    engine["launcher"] = [*command, *(positional if model_flag else positional[:-1])]
    if model_flag:
        engine["model-flag"] = model_flag
    engine["block-size"] = blocks[0]
    if derived.max_num_seqs_per_conc is not None:
        engine["max-num-seqs-per-conc"] = derived.max_num_seqs_per_conc
    if derived.dp_attn_max_num_seqs_per_conc is not None:
        engine["dp-attn-max-num-seqs-per-conc"] = derived.dp_attn_max_num_seqs_per_conc
    if derived.capture_size_is_max_num_seqs:
        engine["capture-size-is-max-num-seqs"] = True
    if derived.capture_tokens_per_seq is not None:
        engine["capture-tokens-per-seq"] = derived.capture_tokens_per_seq
    engine["flags"] = _flag_data(derived.flags)
    if derived.ep_flags:
        engine["ep-flags"] = _flag_data(derived.ep_flags)
    if draft:
        engine["draft-model"] = next(iter(draft))
    if derived.per_conc:
        engine["per-conc"] = [
            {**({"conc-min": r.conc_min} if r.conc_min else {}), **({"conc-max": r.conc_max} if r.conc_max else {}),
             **({"dp-attn": r.dp_attn} if r.dp_attn is not None else {}),
             **({"tp": r.tp} if r.tp is not None else {}),
             **({"flags": _flag_data(r.flags)} if r.flags else {}), **({"env": r.env} if r.env else {})}
            for r in derived.per_conc
        ]  # fmt: skip
    arms: dict[str, Any] = {}
    for name, delta in derived.arms.items():
        points = [c.point for c in captured if arm_of(c.point) == name]
        arm: dict[str, Any] = {}
        if delta.remove:
            arm["remove"] = delta.remove
        if delta.add:
            arm["add"] = _flag_data(delta.add)
        if delta.env:
            arm["env"] = delta.env
        arm.update(arm_knobs(name, connectors.get(name, []), points, [c for c in captured if arm_of(c.point) == name]))
        arms[name] = arm
    return {
        "recipe": key,
        "match": {
            "model": point.model, "model-prefix": point.model_prefix, "precision": point.precision,
            "framework": point.framework, "runner": point.runner, "image": point.image,
            "spec-decoding": point.spec_decoding, **({"dcp-size": point.dcp_size} if point.dcp_size > 1 else {}),
        },
        "scenario": point.scenario,
        "env-policy": derived.env_policy,
        "engine": engine,
        "arms": arms,
        "replay": {"kind": "production"},
    }  # fmt: skip


def replay_env(captured: Sequence[Captured]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The env the replay gets beyond the launcher's, as the recipe holds it: what every point's replay gets
    alike, and per arm what all of that arm's replays add. aiperf's own (AIPERF_*) and what the script exports
    to its whole shell, which aiperf inherits upstream. Left out: a value naming the server's port (slurmx picks
    it on the node), a per-run path (the capture's result or work dir: slurmx's replay has its own) or the
    backend's own env (the engine's, sized per point)."""
    envs: list[tuple[str, dict[str, str]]] = []
    for c in captured:
        delta = _replay_delta(c)
        # sized per point by the backend (an in-process pool's GB); what the node's search finds goes to the engine only
        own = {*backends.get(arm_of(c.point)).own_env, *image_finds(c.capture.started)}
        kept = {k: v for k, v in delta.items()
                if not LOCAL_URL.search(v) and _placeholders(v, c) == v and k not in own}  # fmt: skip
        envs.append((arm_of(c.point), kept))
    common = _alike([env for _, env in envs])
    per_arm = {}
    for arm in dict.fromkeys(name for name, _ in envs):
        extra = {k: v for k, v in _alike([env for name, env in envs if name == arm]).items() if k not in common}
        if extra:
            per_arm[arm] = extra
    return common, per_arm


def replay_flags(captured: Sequence[Captured]) -> Flags:
    """The aiperf flags a script appends beyond what slurmx's production replay builds (REPLAY_BUILT_FLAGS):
    one value on every point, or the import is refused (the recipe's replay.flags hold one value)."""
    seen: list[Flags] = []
    for c in captured:
        replay = _replay(c)
        _, flags = parse_flags(replay.argv[1:]) if replay else ([], {})
        seen.append({n: v for n, v in flags.items() if n not in REPLAY_BUILT_FLAGS})
    names = dict.fromkeys(n for flags in seen for n in flags)
    differ = [n for n in names if len({json.dumps(f.get(n), sort_keys=True) for f in seen}) > 1]
    if differ:
        raise ImportRefused(f"replay flags differ between points: {', '.join(differ)} (replay.flags hold one value)")
    return {n: seen[0][n] for n in names}


def _routers(framework: str) -> frozenset[str]:
    """The router programs of the framework's engine, as InferenceX's scripts start them (and pip-install them)."""
    return frozenset(p for p, role in engines.get(framework).upstream_programs.items() if role == "router")


def _typed_pins(c: Captured) -> frozenset[str]:
    """The pip installs slurmx types elsewhere: the router's program (the recipe's router pin), the point's
    backend's distribution or a build of it (kv-offload-backend.version; Mooncake's CUDA 13 wheel), and the packages
    one pip installs beside that wheel (the arm's `requires`)."""
    backend = backends.get(arm_of(c.point)).distribution
    beside = beside_wheel(arm_capture(c).pip_groups, backend) if backend is not None else frozenset()
    return _routers(c.point.engine) | beside


def beside_wheel(groups: Sequence[frozenset[str]], distribution: str) -> frozenset[str]:
    """The packages of every pip command that installed the backend's wheel (a build of `distribution`), it too."""
    return frozenset(n for g in groups if any(m.startswith(distribution) for m in g) for n in g)


def replay_fields(captured: Sequence[Captured]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The typed replay fields (REPLAY_FIELDS) the script's replay gives other values than slurmx's defaults: the
    aiperf fork's flags that changed between benchmark_lib.sh revisions (a cache-warmup duration or per-lane
    warmup, the grace period, the stats interval, the idle-gap cap). Each holds one value on every point, or one
    value per contiguous range of concurrencies (the script sets it by CONC): the lowest range's is the replay's,
    each higher range is a per-conc rule with `replay`; anything else is refused. A flag the script leaves out is
    none where the field can be none (not passed)."""
    seen: dict[str, list[tuple[int, str]]] = {}
    for c in captured:
        replay = _replay(c)
        _, flags = parse_flags(replay.argv[1:]) if replay else ([], {})
        for flag in REPLAY_FIELDS:
            seen.setdefault(flag, []).append((c.point.conc, _text(flags[flag]) if flag in flags else ""))
    fields: dict[str, Any] = {}
    rules: list[dict[str, Any]] = []
    for flag, name in REPLAY_FIELDS.items():
        ranges = conc_ranges(seen[flag])
        if ranges is None:
            raise ImportRefused(
                f"replay {flag} differs between points of one concurrency (the replay's {name} holds one value a conc)"
            )
        for index, (low, high, text) in enumerate(ranges):
            value = _replay_value(flag, name, str(text))
            if index == 0 and value is not _UNSET and value != Replay.model_fields[name].default:
                fields[kebab(name)] = value
            elif index > 0:
                if value is _UNSET:
                    raise ImportRefused(f"replay {flag}: left out from conc {low} only (the replay passes it always)")
                bounds = {**({"conc-min": low} if low else {}), **({"conc-max": high} if high else {})}
                rules.append({**bounds, "replay": {kebab(name): value}})
    return fields, rules


_UNSET = object()  # a flag the script leaves out where the field is always passed: slurmx passes its default


def _replay_value(flag: str, name: str, text: str) -> Any:
    """The replay field's value for the flag's text ("" where the script leaves the flag out)."""
    try:
        return getattr(Replay.model_validate({"kind": "production", name: text or None}, strict=False), name)
    except ValidationError:
        if not text:  # a field that is always passed: slurmx passes its default (check names it)
            return _UNSET
        raise ImportRefused(f"replay {flag} {text}: not a value of the replay's {name}") from None


def _text(value: object) -> str:
    """A parsed flag value as the script wrote it (parse_value reads `inf` as a float)."""
    return "inf" if isinstance(value, float) and math.isinf(value) else str(value)


def provision_data(captured: Sequence[Captured]) -> dict[str, Any]:
    """The recipe's `provision`: what the script provisions beyond the typed pins (the router's, the backend's),
    alike on every point: its other pip installs, pinned or not (grouped by pip's options), and the files of
    InferenceX's tree it runs (a container patch script), each with the digest of the file imported."""
    seen: list[dict[str, Any]] = []
    for c in captured:
        pip: dict[tuple[str, ...], list[str]] = {}
        typed = _typed_pins(c)
        for (_, item), value in provision_facts(c.capture.started, {}).items():
            spec, *options = value.split()
            if item.startswith("pip install ") and item.removeprefix("pip install ") not in typed:
                pip.setdefault(tuple(options), []).append(spec)
        if any(_placeholders(a, c) != a for r in c.capture.runs for a in r.args):
            raise ImportRefused(f"{c.point.exp_name}: a script it runs is passed a path of this run")
        scripts = [{"path": r.path, "program": r.program, **({"args": list(r.args)} if r.args else {}),
                    "sha256": r.sha256} for r in c.capture.runs]  # fmt: skip
        groups = [{"packages": specs, **({"flags": list(flags)} if flags else {})} for flags, specs in pip.items()]
        edits = [_edit(c, path, sed, guard) for path, (sed, guard) in image_edits(c.capture.started).items()]
        searches = image_finds(c.capture.started).items()
        finds = [{"name": name, "roots": f.roots, "tests": f.tests} for name, f in searches]
        parts = (("pip", groups), ("scripts", scripts), ("edits", edits), ("find-env", finds))
        seen.append({k: v for k, v in parts if v})
    if any(s != seen[0] for s in seen):
        raise ImportRefused(
            "the script's pip installs, the scripts it runs, its edits of the image or its searches of it differ"
            " between points (provision holds one)"
        )
    return seen[0]


def _edit(c: Captured, path: str, sed: list[str], guard: Guard | None) -> dict[str, Any]:
    """An image file's in-place edit as the recipe holds it (provision.edits): sed's arguments, and the guard's read
    and grep where the script tests the file first (any other program there is refused: the node runs grep)."""
    if guard is not None and guard[1][:1] != ["grep"]:
        raise ImportRefused(f"{c.point.exp_name}: the script tests {path} with {guard[1][0]}, not grep")
    unless = {"unless": {"sed": guard[0], "grep": guard[1][1:]}} if guard is not None else {}
    return {"path": path, "sed": sed, **unless}


def _alike(envs: list[dict[str, str]]) -> dict[str, str]:
    return dict(sorted((k, v) for k, v in envs[0].items() if all(e.get(k) == v for e in envs)))


def import_key(key: str, captured: Sequence[Captured]) -> dict[str, Any]:
    """The recipe data for one key's captures, or ImportRefused naming every point and flag no rule fits."""
    failed = [f"{c.point.exp_name}: {c.capture.failure()}" for c in captured
              if c.capture.returncode]  # fmt: skip
    if failed:
        raise ImportRefused("; ".join(failed[:3]) + (f" (+{len(failed) - 3} more)" if len(failed) > 3 else ""))
    observed, connectors, draft = observe(captured)
    observed, problem = one_hash_seed(observed, DEFAULT_HASH_SEED)
    if problem:
        raise ImportRefused(problem)
    derived = derive(observed)
    if derived.misfits:
        raise ImportRefused("; ".join(m.line() for m in derived.misfits))
    data = recipe_data(key, captured, derived, draft, connectors)
    fields, rules = replay_fields(captured)
    data["replay"].update(fields)
    if rules:
        data["engine"]["per-conc"] = [*data["engine"].get("per-conc", []), *rules]
    flags = replay_flags(captured)
    if flags:
        data["replay"]["flags"] = flags
    router = router_data(captured)
    env, per_arm = replay_env(captured)
    if any("PYTHONHASHSEED" in e for e in (env, *per_arm.values())):
        # the replay inherits the seed the script exports for its engine: one for every arm, as the engine's
        per_arm = _without(per_arm, {"PYTHONHASHSEED"})
        env = dict(sorted({**env, "PYTHONHASHSEED": derived.env_policy["PYTHONHASHSEED"]}.items()))
    if router is not None:
        data["router"] = router
        own = set(router.get("replay-env", {}))  # the router's replay env is its own, never the arms'
        env = {k: v for k, v in env.items() if k not in own}
        per_arm = _without(per_arm, own)
    if env:
        data["replay"]["env"] = env
    for arm, extra in per_arm.items():
        data["arms"][arm]["replay-env"] = extra
    if provision := provision_data(captured):
        data["provision"] = provision
    return data


def add_reviewed_flags(key: str, data: dict[str, Any], reviewed: Sequence[Declared]) -> None:
    """A script's bug a person fixed by a reviewed row (kind review-bug-fixed) that adds an engine flag the script
    lacks (upstream null): every point needs it, so the recipe's base flags carry the row's value ("" a bare
    flag), and the row declares the difference check then sees. A leaf of a flag's JSON (`--flag/key/...`) is not a
    flag: it belongs to a value slurmx builds (the connector's)."""
    flags = data["engine"]["flags"]
    for row in reviewed:
        fixes = row.kind == "review-bug-fixed" and row.processes == ("engine",) and key in row.keys
        whole_flag = row.item[:2] == "--" and "/" not in row.item
        if fixes and not row.generated and row.upstream is None and row.slurmx is not None and whole_flag:
            flags.setdefault(row.item, True if row.slurmx == "" else parse_value(row.slurmx))


def recipe_stem(point: Point, gpu: str) -> str:
    mtp = "_mtp" if point.spec_decoding == "mtp" else ""
    return f"{point.model_prefix}_{point.precision}_{gpu}_{point.framework}{mtp}"


def key_stem(key: str) -> str:
    """A recipe's file name from its key, where the usual one is another key's recipe (two keys of one script
    on two images: qwen3.5-fp8-h200-sglang-agentic-mtp and -hicache-mtp)."""
    return key.replace("-agentic", "").replace("-", "_")


IMPORTED_LINE = "# Imported by `slurmx recipes import`"  # an imported recipe's first line
GENERATED_HEADER = (IMPORTED_LINE, "# upstream.inferencex.", DATE_LINE)  # the header lines import writes


def header(tree: Path, upstream: Upstream, key: str, today: str, notes: Sequence[str] = ()) -> str:
    script = upstream.script.relative_to(tree)
    commit = git_commit(tree)
    lines = [
        f"{IMPORTED_LINE} for {key}: review before use (docs/recipes.md).",
        f"# upstream.inferencex.script: {script}",
        f"# upstream.inferencex.digest: sha256:{content_digest(upstream.script, upstream.lib)} (script + benchmark_lib.sh)",
        *([f"# upstream.inferencex.git_commit: {commit}"] if commit else []),
        f"{DATE_LINE}{today}",
        *notes,
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def header_notes(path: Path) -> list[str]:
    """The comment lines a person added to an imported recipe's header (the leading comments less those import
    writes, e.g. the commit of a tree that is no git checkout): the next import keeps them, as it keeps reviewed
    rows. A hand-written recipe's header is its own, not notes on an import."""
    lines = path.read_text().splitlines() if path.is_file() else []
    if not lines or not lines[0].startswith(IMPORTED_LINE):
        return []
    head = lines[: next((n for n, line in enumerate(lines) if not line.startswith("#")), len(lines))]
    return [line for line in head if not line.startswith(GENERATED_HEADER)]


def render_recipe(head: str, data: dict[str, Any]) -> str:
    return head + "\n" + yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True)


def without_date(text: str) -> str:
    """The text less its date line: what two imports of one unchanged tree agree on."""
    return "\n".join(line for line in text.splitlines() if not line.startswith(DATE_LINE))


def write_if_changed(path: Path, text: str) -> bool:
    """Write atomically unless only the date line would change (an unchanged tree rewrites nothing)."""
    if path.is_file() and without_date(path.read_text()) == without_date(text):
        return False
    write_text(path, text)
    return True


def today() -> str:
    return datetime.date.today().isoformat()
