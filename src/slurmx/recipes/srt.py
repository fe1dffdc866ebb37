"""An aggregated point whose engine runs behind a frontend of its own (Dynamo's), served from the srt-slurm recipe
its row names (`additional-settings: CONFIG_FILE=...`) instead of a recipe of jobs/.

The file is read as srtctl reads it (config/srt.py): `backend.<type>_config.aggregated` are the worker's flags, in
srtctl's rendering; `backend.aggregated_environment` its env; `frontend.args` and `frontend.env` the frontend's;
`identity.model.revision` the model's pin; `slurm.time_limit` the job's limit. The row decides the parallelism (the
engine's parallel flags, as for every other point: `recipes check` names any disagreement with the file), the node
layout and the KV-offload backend. A setting slurmx cannot carry out as the file asks is a refusal naming the file,
line and field (`SrtRefused`), never a dropped flag.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slurmx.backends import ArmProblem
from slurmx.config.srt import (
    DYNAMO_FRONTEND,
    LAUNCHER_HEALTH_WINDOW_S,
    SrtRecipe,
    minutes,
    read_recipe,
    recipe_path,
    srt_argv,
)
from slurmx.digest import file_digest
from slurmx.engines import Engine, RecipeSizing
from slurmx.errors import UserError
from slurmx.flags import Flags, FlagValue
from slurmx.plan import NodeLayout, Point
from slurmx.recipes.model import Replay
from slurmx.recipes.spec import Implementation, RouterSpec, ServingSpec

SERVED_NAME = "--served-model-name"  # the worker's argv names it (Engine.argv), from the file's value


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
        named = next(s for s in settings or [] if s.startswith("CONFIG_FILE="))
        raise SrtRefused(f"{point.config_key}: {named}: the row's srt-slurm recipe is not in the checkout ({path})")
    return read_recipe(path)


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
    """Why this file cannot serve this point in slurmx, each `file:line: field: why` (empty: it can)."""
    found = []
    if recipe.frontend_type != DYNAMO_FRONTEND:
        found.append(f"{recipe.where('frontend', 'type')}: {recipe.frontend_type}: served by the engine itself, not "
                     f"by Dynamo's frontend ({engine.name} runs its worker behind Dynamo's)")  # fmt: skip
    if point.spec_decoding not in engine.spec_methods:
        found.append(f"{point.config_key}: spec-decoding {point.spec_decoding}: not served by {engine.name}")
    config = recipe.engine_config
    if not config:
        found.append(f"{recipe.where('backend', recipe.config_key)}: no aggregated worker flags")
    typed = {flag_of(k): _typed(v) for k, v in config.items()}
    offload = engine.offload_in(typed)
    if offload is not None and point.backend_name == "none":
        key = next(k for k in config if flag_of(k) in typed and engine.offload_in({flag_of(k): typed[flag_of(k)]}))
        found.append(
            f"{recipe.where('backend', recipe.config_key, 'aggregated', key)}: KV offload "
            f"{offload.get('kv_connector')} on a point whose row asks for none"
        )
    elif offload is not None or point.backend_name != "none":
        found.append(_offload_refusal(recipe, point, offload, config, typed, engine))
    return found


def _offload_refusal(
    recipe: SrtRecipe, point: Point, offload: dict[str, Any] | None, config: dict[str, Any], typed: Flags,
    engine: Engine,
) -> str:  # fmt: skip
    """The file's KV offload, which slurmx does not map onto its backend yet: named, never dropped."""
    if offload is None:
        where = recipe.where("backend", recipe.config_key, "aggregated")
        return f"{where}: the row asks for kv-offload backend {point.backend_name}; the file configures none"
    key = next((k for k in config if engine.offload_in({flag_of(k): typed[flag_of(k)]}) is not None), None)
    where = recipe.where("backend", recipe.config_key, "aggregated", *([key] if key else []))
    return (
        f"{where}: KV offload {offload.get('kv_connector')} (the row's backend {point.backend_name}): not mapped "
        "onto slurmx's backend for srt-slurm recipes yet"
    )


def _worker_flags(recipe: SrtRecipe, point: Point, engine: Engine) -> tuple[list[str], str | None]:
    """The file's worker flags without the ones slurmx computes (parallelism from the row, the served name in the
    argv), then the engine's parallel flags for the point; and the served name the file gives."""
    config = recipe.engine_config
    computed = engine.computed_for(RecipeSizing(block_size=0)) | {SERVED_NAME}
    kept = {k: v for k, v in config.items() if flag_of(str(k)) not in computed}
    served = config.get(SERVED_NAME.removeprefix("--"))
    return srt_argv(kept) + engine.parallel_flags(point), str(served) if served is not None else None


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


def worker_launcher(engine: Engine) -> list[str]:
    """The worker's program, as its engine names the one it starts in the engine's place."""
    return next(program for program, role in engine.upstream_programs.items() if role == "engine").split()


def srt_serving(tree: Path | None, point: Point, layout: NodeLayout, implemented: Implementation) -> ServingSpec:
    """The point's ServingSpec from its srt-slurm recipe; SrtRefused (one line) when the file cannot serve it."""
    engine = implemented.engine
    recipe = srt_recipe(tree, point)
    problems = refusals(recipe, point, engine)
    if problems:
        raise SrtRefused(problems[0])
    backend = implemented.backend
    try:
        backend_spec = backend.spec(backend.arm_model(), point)
    except ArmProblem as problem:
        raise SrtRefused(f"{recipe.path}: {point.backend_name}: {problem.message}") from None
    flags, served = _worker_flags(recipe, point, engine)
    typed = {flag_of(k): _typed(v) for k, v in recipe.engine_config.items()}
    revision = recipe.section("identity", "model").get("revision")
    limit = recipe.section("slurm").get("time_limit")
    env = recipe.engine_env
    relative = recipe.path.relative_to(tree) if tree is not None and recipe.path.is_relative_to(tree) else recipe.path
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
        # the launcher's health window (every srt-slurm launcher rewrites the file's), never below the engine's own
        startup_timeout_s=max(LAUNCHER_HEALTH_WINDOW_S, engine.ready_timeout_s(env)),
        gpus=layout.gpus_per_node,
        nodes=layout.nodes,
        ranks_per_node=layout.ranks_per_node,
        backend=backend_spec,
        replay=Replay(kind="production"),
        conc=point.conc,
        duration_s=point.duration_s or 3600,
        time_limit_min=int(minutes(str(limit))) if limit is not None and minutes(str(limit)).isdigit() else None,
    )
