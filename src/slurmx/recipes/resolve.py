"""Point + recipe -> ServingSpec: everything the node needs to start servers, fixed at submit time."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from slurmx.backends import BackendSpec
from slurmx.backends import lmcache, mooncake, vllm_simple
from slurmx.errors import ConfigError
from slurmx.plan import Point
from slurmx.recipes.load import RecipeFile, Recipes, arm_flags
from slurmx.recipes.model import Replay, render_flags
from slurmx.slurm.ledger import file_digest


class RouterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    launcher: list[str]
    flags: list[str]  # without the ports and worker URLs (chosen on the node)
    health_path: str
    startup_timeout_s: int


class ServingSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    recipe: str
    recipe_file: str
    recipe_sha256: str
    launcher: list[str]
    model_flag: str | None
    model: str  # path under the runtime's model-root, or the config's model name
    served_model_name: str
    engine_flags: list[str]  # without host, port, model and kv-transfer-config (chosen on the node)
    env: dict[str, str]
    block_size: int
    health_path: str
    startup_timeout_s: int
    backend: BackendSpec
    replay: Replay
    conc: int
    duration_s: int
    router: RouterSpec | None = None


def parallel_flags(point: Point) -> list[str]:
    """vLLM's parallelism flags: DEP runs data-parallel attention with expert parallelism."""
    if point.dp_attn:
        flags = ["--tensor-parallel-size", "1", "--data-parallel-size", str(point.tp), "--enable-expert-parallel"]
    else:
        flags = ["--tensor-parallel-size", str(point.tp)]
        if point.ep > 1:
            flags.append("--enable-expert-parallel")
    if point.pp > 1:
        flags += ["--pipeline-parallel-size", str(point.pp)]
    if point.dcp_size > 1:
        flags += ["--decode-context-parallel-size", str(point.dcp_size)]
    return flags


def _backend(file: RecipeFile, point: Point) -> BackendSpec:
    name = point.backend_name
    if name not in file.recipe.arms:
        raise file.error(("arms",), f"no {name!r} arm for {point.config_key} point {point.exp_name}")
    arm = file.recipe.arms[name]
    version = point.kv_offload_backend.version if point.kv_offload_backend else None
    budget, gpus = point.total_cpu_dram_gb, point.gpus
    if name == "lmcache":
        spec = lmcache.spec(arm, budget, gpus, point.tp, version)
        if not spec.l1_size_gb:
            raise file.error(("arms", "lmcache", "l1-fraction"), f"L1 of {point.exp_name} rounds to 0 GB of {budget} GB")
        return spec
    if name == "vllm-simple":
        return vllm_simple.spec(budget, gpus, point.tp, version)
    if name == "mooncake":
        return mooncake.spec(arm, budget, gpus, point.tp, version)
    return BackendSpec(name="none", gpus=gpus, tp=point.tp)


def resolve(point: Point, recipes: Recipes) -> ServingSpec:
    file = recipes.find(point.model_prefix, point.precision, point.framework, point.runner)
    if file is None:
        raise ConfigError(
            "jobs/", None, point.config_key,
            f"no serving recipe matches model-prefix {point.model_prefix}, precision {point.precision}, "
            f"framework {point.framework}, runner {point.runner}",
        )  # fmt: skip
    recipe = file.recipe
    assert isinstance(point.conc, int)
    arm = recipe.arms.get(point.backend_name)  # type: ignore[call-overload]
    backend = _backend(file, point)
    flags = render_flags(arm_flags(recipe, arm)) + parallel_flags(point)
    if recipe.engine.max_num_seqs_per_conc:
        flags += ["--max-num-seqs", str(recipe.engine.max_num_seqs_per_conc * point.conc)]
    for rule in recipe.engine.per_conc:
        if rule.applies(point.conc):
            flags += render_flags(rule.flags)
    router = None
    if point.router is not None:
        if recipe.router is None or recipe.router.name != point.router.name:
            raise file.error(("router",), f"{point.config_key} asks for router {point.router.name!r}; the recipe has none by that name")
        flags = render_flags(recipe.router.flags)
        if point.dp_attn:
            flags += ["--intra-node-data-parallel-size", str(point.tp)]
        router = RouterSpec(name=recipe.router.name, launcher=list(recipe.router.launcher), flags=flags,
                            health_path=recipe.router.health_path, startup_timeout_s=recipe.router.startup_timeout_s)
    return ServingSpec(
        router=router,
        recipe=recipe.recipe,
        recipe_file=str(file.path),
        recipe_sha256=file_digest(file.path),
        launcher=list(recipe.engine.launcher),
        model_flag=recipe.engine.model_flag,
        model=recipe.model_path or point.model,
        served_model_name=recipe.served_model_name or point.model,
        engine_flags=flags,
        env={**recipe.env_policy, **arm.env},
        block_size=recipe.engine.block_size,
        health_path=recipe.engine.health_path,
        startup_timeout_s=recipe.engine.startup_timeout_s,
        backend=backend,
        replay=recipe.replay,
        conc=point.conc,
        duration_s=point.duration_s or 3600,
    )


def resolve_all(points: list[Point], recipes: Recipes) -> dict[str, dict[str, Any]]:
    return {p.point_id: resolve(p, recipes).model_dump() for p in points}
