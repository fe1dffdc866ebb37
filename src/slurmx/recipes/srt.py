"""An aggregated point whose engine runs behind a frontend of its own (Dynamo's), served from the srt-slurm recipe
its row names (`additional-settings: CONFIG_FILE=...`) instead of a recipe of jobs/.

The file is read as srtctl gets it (config/srt.py; the launcher's SYNTHETIC_ACCEPTANCE rewrite first):
`backend.<type>_config.aggregated` are the worker's flags in srtctl's rendering, its own parallelism included (the
row's tp/ep/dp-attn are InferenceX's labels for it); `resources` the nodes and GPUs per node; `backend.
aggregated_environment` the worker's env; `frontend.args` and `frontend.env` the frontend's; `benchmark.env` the
replay's settings; `identity.model.revision` the model's pin; `slurm.time_limit` the job's limit; its KV offload the
row's backend, sized as the file fixes it. A setting slurmx cannot carry out as the file asks refuses the point in one
line naming the file, line and field (`SrtRefused`), never a dropped flag; a malformed value is a ConfigError.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from slurmx.backends import ArmProblem, BackendSpec
from slurmx.backends.base import GB, KV_STORE
from slurmx.config.srt import (
    CONFIG_FILE,
    DYNAMO_FRONTEND,
    SrtRecipe,
    load_recipe,
    minutes,
    read_recipe,
    recipe_path,
    srt_argv,
)
from slurmx.digest import file_digest
from slurmx.engines import Engine, NodePart
from slurmx.errors import UserError
from slurmx.flags import Flags, FlagValue
from slurmx.plan import NodeLayout, Point
from slurmx.process import ServerPorts
from slurmx.recipes.model import Replay
from slurmx.recipes.spec import Implementation, RouterSpec, ServingSpec

MIB = 1 << 20
SERVED_NAME = "--served-model-name"  # the worker's argv names it (Engine.argv), from the file's value
INJECTOR = Path("runners/inject_synthetic_acceptance.py")  # the launchers' recipe rewrite for SYNTHETIC_ACCEPTANCE


# benchmark.env settings benchmark_lib.sh turns into a replay flag (its REPLAY_CMD), as the replay's typed fields
REPLAY_FIELDS: dict[str, tuple[str, type[int] | type[float]]] = {
    "AIPERF_LIVE_FAILED_REQUEST_THRESHOLD": ("failed_request_threshold", float),  # --failed-request-threshold
    "AGENTIC_WARMUP_GRACE_PERIOD": ("warmup_grace_period_s", int),  # --warmup-grace-period
    "AIPERF_TRACE_IDLE_GAP_CAP_SECONDS": ("trace_idle_gap_cap_s", int),
}
REPLAY_FLAGS = {"AIPERF_EXTRA_INPUTS": "--extra-inputs"}  # passed as given when set


class SrtRefused(UserError):
    """A point its srt-slurm recipe cannot serve in slurmx: `file:line: field: why`, one line."""


def srt_recipe(tree: Path | None, point: Point) -> SrtRecipe:
    """The recipe the point's row names in the InferenceX checkout `tree`; a one-line refusal when there is none."""
    if tree is None:
        raise SrtRefused(
            f"{point.config_key}: its srt-slurm recipe is read from an InferenceX checkout: pass --inferencex DIR"
        )
    settings = point.prefill.additional_settings if point.prefill is not None else None
    path = recipe_path(tree, settings)
    if path is None:
        raise SrtRefused(f"{point.config_key}: the row names no CONFIG_FILE (its srt-slurm recipe)")
    if not path.is_file():
        named = next(s for s in settings or [] if s.startswith(CONFIG_FILE))
        raise SrtRefused(f"{point.config_key}: {named}: the row's srt-slurm recipe is not in the checkout ({path})")
    return read_recipe(path)


def row_env(point: Point) -> dict[str, str]:
    """The row's additional-settings as the workflow exports them to the launcher (KEY=VALUE), CONFIG_FILE aside."""
    settings = point.prefill.additional_settings if point.prefill is not None else None
    pairs = (s.split("=", 1) for s in settings or [] if "=" in s and not s.startswith(CONFIG_FILE))
    return {k: v for k, v in pairs}


def launched_recipe(tree: Path, point: Point, work: Path) -> SrtRecipe:
    """The point's srt-slurm recipe as its launcher hands it to srtctl: where the row turns SYNTHETIC_ACCEPTANCE on,
    after InferenceX's own runners/inject_synthetic_acceptance.py (run unchanged on a copy in `work`, with the row's
    settings, MODEL_PREFIX and FRAMEWORK as the launchers give them) has rewritten it."""
    settings = point.prefill.additional_settings if point.prefill is not None else None
    path = recipe_path(tree, settings)
    if path is None:
        raise UserError(f"{point.config_key} {point.exp_name}: the row names no CONFIG_FILE (its srt-slurm recipe)")
    recipe = read_recipe(path)
    env = row_env(point)
    if env.get("SYNTHETIC_ACCEPTANCE", "false").strip().lower() != "true":
        return recipe
    given = {**env, "MODEL_PREFIX": point.model_prefix, "FRAMEWORK": point.framework}
    return _injected(tree, path, tuple(sorted(given.items())), point.framework, work)


def _injected(tree: Path, path: Path, given: tuple[tuple[str, str], ...], framework: str, work: Path) -> SrtRecipe:
    """`path` as InferenceX's injector rewrites it with the env `given`, run on a copy in `work`."""
    copy = work / path.name
    shutil.copyfile(path, copy)
    injector = tree / INJECTOR
    done = subprocess.run(
        [sys.executable, str(injector), str(copy), framework],
        env={**os.environ, **dict(given)}, capture_output=True, text=True, cwd=work, check=False,
    )  # fmt: skip
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UserError(f"{injector}: exit {done.returncode} on {path.name}: {tail[0]}")
    rewritten = load_recipe(copy)
    return SrtRecipe(path, rewritten.data, rewritten.index)


@functools.cache
def _injected_once(tree: Path, path: Path, given: tuple[tuple[str, str], ...], framework: str) -> SrtRecipe:
    """`_injected` in a directory of its own, once per file and settings (a row's points share them): plan and
    submit resolve every point of a row from one rewrite, not one injector run per point."""
    with tempfile.TemporaryDirectory(prefix="slurmx-srt-") as work:
        return _injected(tree, path, given, framework, Path(work))


def served_recipe(tree: Path, point: Point) -> SrtRecipe:
    """`launched_recipe` for serving the point, the injector's rewrite shared by the points of one row."""
    settings = point.prefill.additional_settings if point.prefill is not None else None
    path = recipe_path(tree, settings)
    env = row_env(point)
    if path is None or env.get("SYNTHETIC_ACCEPTANCE", "false").strip().lower() != "true":
        with tempfile.TemporaryDirectory(prefix="slurmx-srt-") as work:  # nothing to run: the file as read
            return launched_recipe(tree, point, Path(work))
    given = {**env, "MODEL_PREFIX": point.model_prefix, "FRAMEWORK": point.framework}
    return _injected_once(tree, path, tuple(sorted(given.items())), point.framework)


def checkout_recipe(tree: Path, point: Point) -> SrtRecipe | None:
    """The recipe the row names, None where it names none; SrtRefused when the checkout lacks the file it names."""
    settings = point.prefill.additional_settings if point.prefill is not None else None
    return srt_recipe(tree, point) if recipe_path(tree, settings) is not None else None


def _typed(value: Any) -> FlagValue:
    """A flag's value as slurmx's flags hold it: a JSON object or list given as a string (srt-slurm's way of
    writing --kv-transfer-config) read as one, so an engine can read its connector from it."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            return value
        return parsed if isinstance(parsed, (dict, list)) else value
    return value if isinstance(value, (bool, int, float, str, dict, list)) else str(value)


def flag_of(key: str) -> str:
    return "--" + key.replace("_", "-")


def refusals(recipe: SrtRecipe, point: Point, engine: Engine) -> list[str]:
    """Why this file cannot serve this point in slurmx, each `file:line: field: why` (empty: it can, its KV offload
    aside: `offload_spec`)."""
    found = []
    if recipe.frontend_type != DYNAMO_FRONTEND:
        found.append(f"{recipe.where('frontend', 'type')}: {recipe.frontend_type}: served by the engine itself, not "
                     f"by Dynamo's frontend ({engine.name} runs its worker behind Dynamo's)")  # fmt: skip
    if point.spec_decoding not in engine.spec_methods:
        found.append(f"{point.config_key}: spec-decoding {point.spec_decoding}: not served by {engine.name}")
    if not recipe.engine_config:
        found.append(f"{recipe.where('backend', recipe.config_key)}: no aggregated worker flags")
    return found


def _offload_where(recipe: SrtRecipe, engine: Engine, typed: Flags) -> str:
    """`file:line: field` of the worker flag that carries the file's KV offload (its section where none does)."""
    for key in recipe.engine_config:
        flag = flag_of(str(key))
        if engine.offload_in({flag: typed[flag]}) is not None:
            return recipe.where("backend", recipe.config_key, "aggregated", str(key))
    return recipe.where("backend", recipe.config_key, "aggregated")


def kv_store(recipe: SrtRecipe) -> str | None:
    """The file's store section beside the connector (`backend.<name>_kv_store`: Mooncake's), by its key."""
    return next((str(k) for k in recipe.section("backend") if str(k).endswith("_kv_store")), None)


def offload_spec(
    recipe: SrtRecipe, point: Point, implemented: Implementation, typed: Flags, layout: NodeLayout
) -> BackendSpec:
    """The point's KV-offload backend sized as the file configures it: the backend's own knobs rebuilt from the file's
    offload settings (`knobs_from_connector`, what `recipes import` does with a script's), then sized for the point
    and for one node of the file's `layout`. The row and the file must name the same tier; one the backend cannot
    rebuild is refused, naming the field."""
    engine, backend = implemented.engine, implemented.backend
    offload = engine.offload_in(typed)
    where = _offload_where(recipe, engine, typed)
    if offload is None:
        arm = backend.arm_model()
        if point.backend_name != "none":
            raise SrtRefused(
                f"{where}: the row asks for kv-offload backend {point.backend_name}; the file configures none"
            )
    else:
        connector = offload.get("kv_connector")
        if point.backend_name == "none":
            raise SrtRefused(f"{where}: KV offload {connector} on a point whose row asks for none")
        if backend.connector is not None and connector != backend.connector:
            raise SrtRefused(
                f"{where}: KV offload {connector}; the row's backend {point.backend_name} is {backend.connector}"
            )
        store = kv_store(recipe)
        given = {**offload, KV_STORE: recipe.section("backend", store)} if store is not None else offload
        try:  # the sizes the file fixes, as given (its store section named where that is what fails)
            knobs = backend.fixed_knobs(given)
        except ValueError as why:
            at = recipe.where("backend", store) if store is not None else where
            raise SrtRefused(f"{at}: kv-offload backend {point.backend_name}: {str(why).splitlines()[0]}") from None
        try:  # else what the backend derives from the point's budget
            knobs = knobs if knobs is not None else backend.knobs_from_connector([offload], [point])
            arm = backend.arm_model.model_validate(knobs)
        except (ValueError, ValidationError) as why:
            reason = str(why).splitlines()[0]
            raise SrtRefused(
                f"{where}: KV offload {connector} as kv-offload backend {point.backend_name}: {reason}"
            ) from None
    try:
        spec: BackendSpec = backend.spec(arm, point)
    except ArmProblem as problem:
        raise SrtRefused(f"{where}: kv-offload backend {point.backend_name}: {problem.message}") from None
    on_node: BackendSpec = backend.on_node(spec, layout.gpus_per_node)
    return on_node


def check_rank_span(recipe: SrtRecipe, layout: NodeLayout, implemented: Implementation, typed: Flags) -> None:
    """A rank over several nodes with a KV offload whose backend derives its pool over the whole rank
    (`Backend.rank_span_refusal`) needs the pool size the file fixes (its store section): SrtRefused when not."""
    backend = implemented.backend
    if layout.ranks_per_node or backend.rank_span_refusal is None or kv_store(recipe) is not None:
        return
    if implemented.engine.offload_in(typed) is not None:
        raise SrtRefused(f"{recipe.where('backend')}: kv-offload backend {backend.name} over {layout.nodes} nodes: "
                         f"{backend.rank_span_refusal}")  # fmt: skip


def check_pool(recipe: SrtRecipe, layout: NodeLayout, spec: BackendSpec, node_dram_mib: int | None) -> None:
    """The pools of a node's ranks must fit the node's DRAM (`node_dram_mib`, the profile's available-cpu-dram-mib):
    SrtRefused, one line naming the file's field, when not."""
    store = kv_store(recipe)
    where = recipe.where("backend")
    need_gb = spec.pool_gb_per_gpu() * layout.gpus_per_node
    if node_dram_mib is not None and need_gb * GB > node_dram_mib * MIB:
        if store is not None:
            where = recipe.where("backend", store, "store_config", "global_segment_size")
        raise SrtRefused(
            f"{where}: {spec.pool_gb_per_gpu():g} GB for each of a node's {layout.gpus_per_node} ranks is "
            f"{need_gb:g} GB, more than the node's {node_dram_mib * MIB // GB} GB of DRAM"
        )


def offload_flags(implemented: Implementation, spec: BackendSpec) -> frozenset[str]:
    """The worker flags the backend's connector becomes (the engine shapes them): the file's own are left out."""
    offload = implemented.backend.offload(spec, ServerPorts(engine=0), implemented.engine.name)
    if offload is None:
        return frozenset()
    flags, _ = implemented.engine.offload_args(offload)
    return frozenset(f for f in flags if f.startswith("--"))


def _worker_flags(recipe: SrtRecipe, given: frozenset[str]) -> tuple[list[str], str | None]:
    """The file's worker flags as srtctl renders them, its own parallelism included (srtctl runs exactly it; the
    row's numbers are InferenceX's labels for it), without the served name (the worker's argv names it) and the
    flags slurmx gives itself (`given`: the backend's offload, the nodes' orchestration); and that name."""
    config = recipe.engine_config
    kept = {k: v for k, v in config.items() if flag_of(str(k)) not in given | {SERVED_NAME}}
    served = config.get(SERVED_NAME.removeprefix("--"))
    return srt_argv(kept), str(served) if served is not None else None


def _layout(recipe: SrtRecipe, layout: NodeLayout, engine: Engine, typed: Flags) -> NodeLayout:
    """The nodes and GPUs per node the file asks srtctl for (`resources.agg_nodes`, `resources.gpus_per_node`; the
    row's layout where it names none), with the file's own ranks on them: its data-parallel ranks of its rank size
    per node, or one rank over whole nodes. A file whose ranks do not fill exactly those GPUs is refused."""
    resources = recipe.section("resources")
    nodes = resources.get("agg_nodes", layout.nodes)
    per_node = resources.get("gpus_per_node", layout.gpus_per_node)
    for name, value in (("agg_nodes", nodes), ("gpus_per_node", per_node)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise recipe.error(("resources", name), f"{value!r} is not a whole number of nodes or GPUs")
    rank, ranks = engine.rank_gpus(typed)
    if rank * ranks != nodes * per_node:
        raise SrtRefused(
            f"{recipe.where('backend', recipe.config_key, 'aggregated')}: runs {ranks} data-parallel rank(s) of "
            f"{rank} GPU(s), not the {nodes} node(s) x {per_node} GPU(s) of its resources"
        )
    if rank > per_node and rank % per_node:
        raise SrtRefused(f"{recipe.where('resources', 'gpus_per_node')}: a rank of {rank} GPUs does not fill whole "
                         f"{per_node}-GPU nodes")  # fmt: skip
    return NodeLayout(nodes, per_node, per_node // rank if rank <= per_node else 0, ranks)


def _frontend(recipe: SrtRecipe, point: Point, engine: Engine) -> RouterSpec:
    frontend = engine.frontend
    assert frontend is not None, "served from an srt-slurm recipe only behind a frontend"
    return RouterSpec(
        name=point.router.name if point.router is not None else "dynamo-frontend",
        version=None,  # the image's Dynamo (srt-slurm installs its own where dynamo.install says: a declared row)
        launcher=list(frontend.launcher),
        flags=srt_argv(recipe.frontend_args),
        health_path=frontend.health_path,
        startup_timeout_s=frontend.startup_timeout_s,
        host_flag=frontend.host_flag,
        port_flag=frontend.port_flag,
        worker_urls_flag=None,
        env=recipe.frontend_env,
    )


def replay_of(recipe: SrtRecipe) -> Replay:
    """The production replay with what the file's benchmark.env sets of it (benchmark_lib.sh's defaults else)."""
    env = recipe.replay_env
    fields: dict[str, object] = {}
    for name, (field, kind) in REPLAY_FIELDS.items():
        if name in env:
            try:
                fields[field] = kind(env[name])
            except ValueError:
                raise recipe.error(("benchmark", "env", name), f"{env[name]!r} is not a number") from None
    flags = {flag: env[name] for name, flag in REPLAY_FLAGS.items() if env.get(name)}
    return Replay.model_validate({"kind": "production", **fields, **({"flags": flags} if flags else {})})


def node_flag_names(engine: Engine, layout: NodeLayout) -> frozenset[str]:
    """The flags each node's part of a multinode engine gets from slurmx (addresses and ports of the allocation,
    chosen at run time, as srtctl chooses its own): a file's value of one is slurmx's, not the file's."""
    if layout.nodes < 2:
        return frozenset()
    parts = (NodePart(i, "head", 1, 2, "node") for i in range(2))
    return frozenset(
        f for p in parts for f in engine.node_flags(p, layout.nodes, layout.ranks_per_node) if f[:2] == "--"
    )


def worker_launcher(engine: Engine) -> list[str]:
    """The worker's program, as its engine names the one it starts in the engine's place."""
    return next(program for program, role in engine.upstream_programs.items() if role == "engine").split()


def srt_serving(
    tree: Path | None,
    point: Point,
    layout: NodeLayout,
    implemented: Implementation,
    node_dram_mib: int | None = None,
) -> ServingSpec:
    """The point's ServingSpec from its srt-slurm recipe; SrtRefused (one line) when the file cannot serve it
    (`node_dram_mib`: a node's DRAM, which the pools the file fixes must fit)."""
    engine = implemented.engine
    srt_recipe(tree, point)  # no checkout, or no file there: refused in one line
    assert tree is not None
    recipe = served_recipe(tree, point)  # as the launcher hands it to srtctl
    problems = refusals(recipe, point, engine)
    if problems:
        raise SrtRefused(problems[0])
    typed = {flag_of(k): _typed(v) for k, v in recipe.engine_config.items()}
    layout = _layout(recipe, layout, engine, typed)
    check_rank_span(recipe, layout, implemented, typed)
    backend_spec = offload_spec(recipe, point, implemented, typed, layout)
    check_pool(recipe, layout, backend_spec, node_dram_mib)
    flags, served = _worker_flags(recipe, offload_flags(implemented, backend_spec) | node_flag_names(engine, layout))
    revision = recipe.section("identity", "model").get("revision")
    limit = recipe.section("slurm").get("time_limit")
    env = recipe.engine_env
    relative = recipe.path.relative_to(tree) if recipe.path.is_relative_to(tree) else recipe.path
    return ServingSpec(
        router=_frontend(recipe, point, engine),
        recipe=str(recipe.data.get("name", recipe.path.stem)),
        recipe_file=str(relative),
        recipe_sha256=file_digest(recipe.path),
        engine=engine.name,
        launcher=worker_launcher(engine),
        model_flag=engine.model_flag,
        model=point.model,
        model_revision=str(revision) if revision is not None else None,
        served_model_name=served or point.model,
        engine_flags=flags,
        env=env,
        block_size=engine.block_size(typed),
        health_path=engine.health_path,
        # the file's health window (health_check polls x interval), never below the engine's own readiness limit
        startup_timeout_s=max(recipe.health_window_s, engine.ready_timeout_s(env)),
        gpus=layout.gpus_per_node,
        nodes=layout.nodes,
        ranks_per_node=layout.ranks_per_node,
        backend=backend_spec,
        replay=replay_of(recipe),
        conc=point.conc,
        duration_s=point.duration_s or 3600,
        time_limit_min=int(minutes(str(limit))) if limit is not None and minutes(str(limit)).isdigit() else None,
    )
