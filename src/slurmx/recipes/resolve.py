"""Point + recipe -> ServingSpec, by the recipe's arm for the point's backend and the point's engine."""

from __future__ import annotations

from typing import Any

from slurmx import backends, engines
from slurmx.backends import Arm, ArmProblem, Backend, BackendSpec
from slurmx.engines import Engine
from slurmx.errors import ConfigError, UserError
from slurmx.flags import render_flags
from slurmx.plan import NodeLayout, Point
from slurmx.recipes.load import RecipeFile, Recipes, arm_flags
from slurmx.recipes.model import ConcRule, Match, Recipe, Replay
from slurmx.recipes.spec import DRAFT_PATH, Implementation, RouterSpec, ServingSpec


def _backend(file: RecipeFile, point: Point, backend: Backend[Any], gpus: int) -> BackendSpec:
    """The point's backend spec from its recipe's arm, as one node of `gpus` GPUs (its engine ranks) holds it."""
    name = point.backend_name
    if name not in file.arms:
        raise file.error(("arms",), f"no {name!r} arm for {point.config_key} point {point.exp_name}")
    try:
        spec: BackendSpec = backend.spec(file.arms[name], point)
    except ArmProblem as problem:
        raise file.error(("arms", name, *problem.field), problem.message) from None
    arm = file.arms[name]  # what every backend's arm may say about its install, whatever its own knobs
    on_node: BackendSpec = backend.on_node(spec, gpus)
    return on_node.model_copy(update={"find_links": arm.find_links, "requires": list(arm.requires)})


def implementation(point: Point) -> Implementation:
    """The point's engine and backend; a UserError when slurmx has none for its engine (Point.engine), KV-offload backend
    or spec-decoding method, or the backend cannot serve that engine."""
    try:
        engine = engines.get(point.engine)
        backend = backends.get(point.backend_name)
    except UserError as missing:
        raise UserError(f"{point.config_key}: {missing}") from None
    if point.spec_decoding not in engine.spec_methods:
        have = ", ".join(sorted(engine.spec_methods))
        raise UserError(
            f"{point.config_key}: no spec-decoding method {point.spec_decoding!r} for engine {engine.name} "
            f"in slurmx (have: {have})"
        )
    if (why := backend.refusal(engine)) is not None:
        raise UserError(f"{point.config_key}: {why}")
    return Implementation(engine, backend)


def missing_implementation(point: Point) -> UserError | None:
    """Why slurmx cannot serve this point (`implementation`), or None. Planning accepts such points, as
    InferenceX does; running them cannot."""
    try:
        implementation(point)
    except UserError as missing:
        return missing
    return None


def match_values(point: Point) -> tuple[object, ...]:
    """The point's values of every field a recipe matches on (Match.FIELDS, in order)."""
    return tuple(getattr(point, name) for name in Match.FIELDS)


def near_recipe(point: Point, recipes: Recipes) -> tuple[RecipeFile, list[str]] | None:
    """A recipe written for this point's model family (prefix, precision, framework, runner) that differs in
    another field that decides what runs (model, image, spec-decoding, DCP): it must not serve the point,
    but it is the one to name (plan shows it; render and submit refuse the point naming it)."""
    if recipes.find(match_values(point)) is not None:
        return None
    nearest = recipes.nearest(match_values(point))
    if nearest is None:
        return None
    m = nearest[0].recipe.match
    family = (m.model_prefix, m.precision, m.framework, m.runner)
    return nearest if family == (point.model_prefix, point.precision, point.framework, point.runner) else None


def nearest_hint(nearest: tuple[RecipeFile, list[str]]) -> str:
    """How a recipe that does not serve a point differs from it, as `plan`, `render` and `submit` say it."""
    return f"nearest is {nearest[0].path} ({nearest[0].recipe.recipe}), which differs in {', '.join(nearest[1])}"


def find_recipe(point: Point, recipes: Recipes) -> RecipeFile:
    file = recipes.find(match_values(point))
    if file is not None:
        return file
    nearest = recipes.nearest(match_values(point))
    hint = f"; {nearest_hint(nearest)}" if nearest else ""
    raise ConfigError(
        "jobs/", None, point.config_key,
        f"no serving recipe matches {point.exp_name} exactly (model {point.model}, image {point.image}, "
        f"spec-decoding {point.spec_decoding}, dcp-size {point.dcp_size}){hint}",
    )  # fmt: skip


def _engine_flags(recipe: Recipe, arm: Arm, point: Point, engine: Engine, rules: list[ConcRule]) -> list[str]:
    """Base flags with the arm's changes, the EP flags, per-conc rules, what the engine sizes and parallelism."""
    flags = arm_flags(recipe, arm)
    worker = point.prefill if point.multinode and point.prefill is not None else point
    if worker.ep > 1:
        flags.update(recipe.engine.ep_flags)
    for rule in rules:
        flags.update(rule.flags)
    flags, after = engine.sized_flags(flags, recipe.engine.sizing(point.dp_attn), point.conc, DRAFT_PATH)
    return render_flags(flags) + engine.parallel_flags(point) + after


def per_point_rules(recipe: Recipe, point: Point) -> list[ConcRule]:
    """The recipe's per-conc rules that select this point (its concurrency, DP attention, worker TP, arm)."""
    tp = point.prefill.tp if point.multinode and point.prefill is not None else point.tp
    return [r for r in recipe.engine.per_conc if r.applies(point.conc, point.dp_attn, tp, point.backend_name)]


def _replay(recipe: Recipe, arm_env: dict[str, str], rules: list[ConcRule]) -> Replay:
    """The point's replay: the recipe's, with its arm's env and the typed fields its per-conc rules set."""
    update: dict[str, object] = {k: v for rule in rules for k, v in rule.replay_update().items()}
    if arm_env:
        update["env"] = {**recipe.replay.env, **arm_env}
    return recipe.replay.model_copy(update=update) if update else recipe.replay


def _router(file: RecipeFile, point: Point) -> RouterSpec | None:
    """The router in front of the engine: its own process with its own flags; it never touches the engine's."""
    recipe = file.recipe.router
    wanted = point.router is not None or (recipe is not None and recipe.dp_attn and point.dp_attn)
    if not wanted:
        return None
    if recipe is None or (point.router is not None and recipe.name != point.router.name):
        name = point.router.name if point.router else "a router"
        raise file.error(("router",), f"{point.config_key} asks for router {name!r}; the recipe has none by that name")
    flags = render_flags(recipe.flags)
    if point.dp_attn and (dp_flag := engines.get(point.engine).router_dp_size_flag) is not None:
        flags += [dp_flag, str(point.tp)]
    version = point.router.version if point.router is not None and point.router.version else recipe.version
    if recipe.from_image:  # the image's router, as upstream runs it: nothing to install
        version = None
    return RouterSpec(
        name=recipe.name,
        version=version,
        launcher=list(recipe.launcher),
        flags=flags,
        metrics_port=recipe.metrics_port,
        replay_env=dict(recipe.replay_env),
        health_path=recipe.health_path,
        startup_timeout_s=recipe.startup_timeout_s,
    )


def resolve(
    point: Point, recipes: Recipes, layout: NodeLayout | None = None, implemented: Implementation | None = None
) -> ServingSpec:
    """`layout`: how a multinode point spreads over its cluster's nodes (one node when None); `implemented`:
    the point's engine and backend when the caller looked them up already."""
    implemented = implemented or implementation(point)
    engine = implemented.engine
    file = find_recipe(point, recipes)
    recipe = file.recipe
    assert not point.concs, "a multi-concurrency point does not resolve to one server"
    gpus = layout.gpus_per_node if layout is not None else point.gpus
    backend = _backend(file, point, implemented.backend, gpus)
    arm = file.arms[point.backend_name]
    rules = per_point_rules(recipe, point)  # once: flags, env and replay all read them
    flags = _engine_flags(recipe, arm, point, engine, rules)
    router = _router(file, point)
    env = {**recipe.env_policy, **arm.env, **{k: v for rule in rules for k, v in rule.env.items()}}
    return ServingSpec(
        router=router,
        recipe=recipe.recipe,
        recipe_file=str(file.path),
        recipe_sha256=file.sha256,
        engine=engine.name,
        launcher=list(recipe.engine.launcher),
        model_flag=recipe.engine.model_flag,
        model=recipe.model_path or point.model,
        model_revision=recipe.model_revision,
        served_model_name=recipe.served_model_name or point.model,
        engine_flags=flags,
        env=env,
        block_size=recipe.engine.block_size,
        health_path=recipe.engine.health_path or engine.health_path,
        # never shorter than the engine's own readiness limit in its env: the scripts wait for the engine unbounded
        startup_timeout_s=max(recipe.engine.startup_timeout_s, engine.ready_timeout_s(env)),
        gpus=gpus,
        nodes=layout.nodes if layout is not None else 1,
        ranks_per_node=layout.ranks_per_node if layout is not None else 1,
        backend=backend,
        replay=_replay(recipe, arm.replay_env, rules),
        conc=point.conc,
        duration_s=point.duration_s or 3600,
        draft_model=recipe.engine.draft_model,
        provision=recipe.provision,
        time_limit_min=recipe.time_limit_min,
    )
