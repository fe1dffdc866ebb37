"""Point + recipe -> ServingSpec, by the recipe's arm for the point's backend and the point's engine."""

from __future__ import annotations

from slurmx import backends, engines
from slurmx.backends import ArmProblem, BackendSpec
from slurmx.digest import file_digest
from slurmx.errors import ConfigError, UserError
from slurmx.flags import render_flags
from slurmx.plan import Point
from slurmx.recipes.load import RecipeFile, Recipes, arm_flags
from slurmx.recipes.spec import RouterSpec, ServingSpec


def _backend(file: RecipeFile, point: Point) -> BackendSpec:
    name = point.backend_name
    if name not in file.arms:
        raise file.error(("arms",), f"no {name!r} arm for {point.config_key} point {point.exp_name}")
    try:
        spec: BackendSpec = backends.get(name).spec(file.arms[name], point)
    except ArmProblem as problem:
        raise file.error(("arms", name, *problem.field), problem.message) from None
    return spec


def missing_implementation(point: Point) -> UserError | None:
    """Why slurmx cannot serve this point (its framework, KV-offload backend or spec-decoding method has no
    implementation here), or None. Planning accepts such points, as InferenceX does; running them cannot."""
    try:
        engine = engines.get(point.framework)
        backends.get(point.backend_name)
    except UserError as missing:
        return UserError(f"{point.config_key}: {missing}")
    if point.spec_decoding not in engine.spec_methods:
        have = ", ".join(sorted(engine.spec_methods))
        return UserError(
            f"{point.config_key}: no spec-decoding method {point.spec_decoding!r} for engine {engine.name} "
            f"in slurmx (have: {have})"
        )
    return None


def find_recipe(point: Point, recipes: Recipes) -> RecipeFile:
    file = recipes.find(point.model_prefix, point.precision, point.framework, point.runner)
    if file is None:
        raise ConfigError(
            "jobs/", None, point.config_key,
            f"no serving recipe matches model-prefix {point.model_prefix}, precision {point.precision}, "
            f"framework {point.framework}, runner {point.runner}",
        )  # fmt: skip
    return file


def resolve(point: Point, recipes: Recipes) -> ServingSpec:
    missing = missing_implementation(point)
    if missing is not None:
        raise missing
    file = find_recipe(point, recipes)
    recipe = file.recipe
    engine = engines.get(point.framework)
    assert isinstance(point.conc, int), "only single-node points resolve to one server"
    backend = _backend(file, point)
    arm = file.arms[point.backend_name]
    flags = render_flags(arm_flags(recipe, arm)) + engine.parallel_flags(point)
    if recipe.engine.max_num_seqs_per_conc:
        flags += ["--max-num-seqs", str(recipe.engine.max_num_seqs_per_conc * point.conc)]
    for rule in recipe.engine.per_conc:
        if rule.applies(point.conc):
            flags += render_flags(rule.flags)
    router = None
    if point.router is not None:
        if recipe.router is None or recipe.router.name != point.router.name:
            raise file.error(
                ("router",),
                f"{point.config_key} asks for router {point.router.name!r}; the recipe has none by that name",
            )
        flags = render_flags(recipe.router.flags)
        if point.dp_attn:
            flags += ["--intra-node-data-parallel-size", str(point.tp)]
        router = RouterSpec(
            name=recipe.router.name,
            launcher=list(recipe.router.launcher),
            flags=flags,
            health_path=recipe.router.health_path,
            startup_timeout_s=recipe.router.startup_timeout_s,
        )
    return ServingSpec(
        router=router,
        recipe=recipe.recipe,
        recipe_file=str(file.path),
        recipe_sha256=file_digest(file.path),
        engine=engine.name,
        launcher=list(recipe.engine.launcher),
        model_flag=recipe.engine.model_flag,
        model=recipe.model_path or point.model,
        served_model_name=recipe.served_model_name or point.model,
        engine_flags=flags,
        env={**recipe.env_policy, **arm.env},
        block_size=recipe.engine.block_size,
        health_path=recipe.engine.health_path,
        startup_timeout_s=recipe.engine.startup_timeout_s,
        gpus=point.gpus,
        backend=backend,
        replay=recipe.replay,
        conc=point.conc,
        duration_s=point.duration_s or 3600,
    )
