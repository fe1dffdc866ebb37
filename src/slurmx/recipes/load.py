"""Load every recipe in jobs/ and enforce the rules that make the seeds' bugs impossible."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmx.config.load import validate
from slurmx.config.yamlfile import LineIndex, load_yaml
from slurmx.errors import ConfigError
from slurmx.recipes.model import HASH_ENV, TOOL_CALL_FLAGS, Arm, ConcRule, Recipe, Flags

# Allocator settings that break LMCache's CUDA-IPC export of the KV cache.
_IPC_BREAKING_FLAGS = ("--enable-cumem-allocator",)
_ALLOC_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
# Engine flags slurmx computes from the point or the node (resolve.parallel_flags, --max-num-seqs,
# the connector, host/port/model): a recipe that also set one would put it twice on the command line.
_COMPUTED_FLAGS = frozenset({
    "--tensor-parallel-size", "--data-parallel-size", "--enable-expert-parallel", "--pipeline-parallel-size",
    "--decode-context-parallel-size", "--max-num-seqs", "--kv-transfer-config", "--host", "--port",
    "--served-model-name", "--model",
})  # fmt: skip
# LMCache server flags built from the arm's typed knobs (backends.lmcache.server_argv): server-flags
# may not repeat them, or a second --chunk-size would bypass the chunk/block rule.
_LMCACHE_TYPED_FLAGS = frozenset({
    "--host", "--port", "--http-host", "--http-port", "--l1-size-gb", "--chunk-size", "--supported-transfer-mode",
})  # fmt: skip


@dataclass(frozen=True)
class RecipeFile:
    recipe: Recipe
    path: Path
    data: Any
    index: LineIndex

    def error(self, field: tuple[Any, ...], message: str) -> ConfigError:
        line = self.index.line_of(self.data, field)
        return ConfigError(self.path, line, ".".join(str(f) for f in field), message)


def arm_flags(recipe: Recipe, arm: Arm) -> Flags:
    """The engine flags an arm runs with: base minus named removals, plus its additions."""
    flags: Flags = {k: v for k, v in recipe.engine.flags.items() if k not in arm.remove}
    flags.update(arm.add)
    return flags


def _check(file: RecipeFile) -> None:
    recipe = file.recipe
    base = recipe.engine.flags
    _check_computed(file)
    if "--block-size" in base and base["--block-size"] != recipe.engine.block_size:
        raise file.error(("engine", "flags", "--block-size"), f"differs from engine block-size {recipe.engine.block_size}")
    if recipe.scenario == "agentic-coding":
        for flag in TOOL_CALL_FLAGS:
            if flag not in base:
                raise file.error(("engine", "flags"), f"agentic recipe lacks {flag}: tool-call requests would get HTTP 400")
    for rule_index, rule in enumerate(recipe.engine.per_conc):
        for name in rule.flags:
            if name in base:
                raise file.error(("engine", "per-conc", rule_index, "flags", name), f"{name} is already a base flag")
            for arm_name, arm in recipe.arms.items():
                if name in arm.add:
                    raise file.error(
                        ("engine", "per-conc", rule_index, "flags", name), f"{name} is also added by arm {arm_name}"
                    )
            for other_index, other in enumerate(recipe.engine.per_conc[:rule_index]):
                if name in other.flags and _overlap(rule, other):
                    raise file.error(
                        ("engine", "per-conc", rule_index, "flags", name),
                        f"{name} is also set by per-conc rule {other_index} for an overlapping conc range",
                    )
    for arm_name, arm in recipe.arms.items():
        where = ("arms", arm_name)
        for name in arm.remove:
            if name not in base:
                raise file.error((*where, "remove"), f"removes {name}, which the base flags do not set")
            if recipe.scenario == "agentic-coding" and name in TOOL_CALL_FLAGS:
                raise file.error((*where, "remove"), f"an agentic arm may not remove {name}")
        for name in arm.add:
            if name in base and name not in arm.remove:
                raise file.error((*where, "add", name), f"{name} is a base flag: list it under remove to change it")
        for name in arm.env:
            if name in HASH_ENV:
                raise file.error((*where, "env", name), f"{name} is hashing env: set it once in env-policy for all arms")
            if name in recipe.env_policy:
                raise file.error((*where, "env", name), f"{name} is set by env-policy: arms may not change it")
        if arm_name == "lmcache":
            _check_lmcache(file, arm)


def _overlap(a: ConcRule, b: ConcRule) -> bool:
    lo = max(a.conc_min or 1, b.conc_min or 1)
    hi = min(a.conc_max or 1 << 30, b.conc_max or 1 << 30)
    return lo <= hi


def _check_computed(file: RecipeFile) -> None:
    recipe = file.recipe
    places: list[tuple[tuple[Any, ...], dict[str, Any]]] = [(("engine", "flags"), dict(recipe.engine.flags))]
    places += [(("engine", "per-conc", i, "flags"), dict(r.flags)) for i, r in enumerate(recipe.engine.per_conc)]
    places += [(("arms", name, "add"), dict(arm.add)) for name, arm in recipe.arms.items()]
    computed = _COMPUTED_FLAGS if recipe.engine.max_num_seqs_per_conc else _COMPUTED_FLAGS - {"--max-num-seqs"}
    for where, flags in places:
        for name in flags:
            if name in computed:
                raise file.error((*where, name), f"{name} is set by slurmx from the point or the node, not by a recipe")


def _check_lmcache(file: RecipeFile, arm: Arm) -> None:
    recipe, where = file.recipe, ("arms", "lmcache")
    for name in arm.server_flags:
        if name in _LMCACHE_TYPED_FLAGS:
            raise file.error((*where, "server-flags", name), f"{name} is built from the arm's typed fields, not server-flags")
    for knob in ("chunk_size", "l1_fraction", "transfer_mode"):
        if getattr(arm, knob) is None:
            raise file.error(where, f"the lmcache arm needs {knob.replace('_', '-')}")
    assert arm.chunk_size is not None
    if arm.chunk_size % recipe.engine.block_size:
        raise file.error(
            (*where, "chunk-size"),
            f"chunk-size {arm.chunk_size} is not a multiple of the engine block size {recipe.engine.block_size}",
        )
    flags = arm_flags(recipe, arm)
    for flag in _IPC_BREAKING_FLAGS:
        if flags.get(flag) not in (None, False):
            raise file.error(where, f"{flag} breaks LMCache's CUDA-IPC export: list it under remove")
    env = {**recipe.env_policy, **arm.env}
    for name in _ALLOC_ENV:
        if "expandable_segments:true" in env.get(name, "").replace(" ", "").lower():
            raise file.error(where, f"{name}=expandable_segments breaks LMCache's CUDA-IPC export")


def load_recipe(path: Path) -> RecipeFile:
    data, index = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(path, 1, "", "a recipe must be a mapping")
    recipe = validate(Recipe, data, path, index)
    file = RecipeFile(recipe, path, data, index)
    _check(file)
    return file


@dataclass
class Recipes:
    files: list[RecipeFile]

    def find(self, model_prefix: str, precision: str, framework: str, runner: str) -> RecipeFile | None:
        for file in self.files:
            m = file.recipe.match
            if (m.model_prefix, m.precision, m.framework, m.runner) == (model_prefix, precision, framework, runner):
                return file
        return None


def load_recipes(directory: Path) -> Recipes:
    files = [load_recipe(p) for p in sorted(directory.glob("*.yaml"))]
    seen: dict[tuple[str, ...], Path] = {}
    for file in files:
        m = file.recipe.match
        key = (m.model_prefix, m.precision, m.framework, m.runner)
        if key in seen:
            raise file.error(("match",), f"same match as {seen[key]}")
        seen[key] = file.path
    return Recipes(files)
