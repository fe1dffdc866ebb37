"""Load every recipe in jobs/ and enforce the rules that make the seeds' bugs impossible."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmx import backends, engines
from slurmx.backends import Arm
from slurmx.config.load import validate
from slurmx.config.yamlfile import LineIndex, load_yaml
from slurmx.digest import file_digest
from slurmx.errors import ConfigError, UserError
from slurmx.flags import Flags
from slurmx.recipes.model import HASH_ENV, ConcRule, Match, Recipe


@dataclass(frozen=True)
class RecipeFile:
    recipe: Recipe
    path: Path
    data: Any
    index: LineIndex
    arms: dict[str, Arm]  # each arm typed by its backend's own model
    sha256: str  # the file's digest, read once at load (every point it serves records it)

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
    engine = engines.get(recipe.match.engine)
    base = recipe.engine.flags
    sizing = recipe.engine.sizing()
    _check_computed(file, engine.computed_for(sizing))
    # the flags some point runs with: the base's and its per-conc rules' (which may not repeat a base flag)
    ran = {name: value for rule in recipe.engine.per_conc for name, value in rule.flags.items()} | base
    for broken in engine.recipe_problems(ran, sizing):
        raise file.error(broken.field, broken.message)
    if recipe.scenario == "agentic-coding":
        for flag in engine.tool_call_flags:
            if flag not in base:
                raise file.error(
                    ("engine", "flags"), f"agentic recipe lacks {flag}: tool-call requests would get HTTP 400"
                )
    _check_flag_places(file, engine.tool_call_flags if recipe.scenario == "agentic-coding" else ())
    if recipe.engine.dp_attn_max_num_seqs_per_conc and not recipe.engine.max_num_seqs_per_conc:
        raise file.error(
            ("engine", "dp-attn-max-num-seqs-per-conc"), "sizes DP-attention points only: set max-num-seqs-per-conc"
        )
    _check_hash_policy(file)
    for rule_index, rule in enumerate(recipe.engine.per_conc):
        if rule.arm is not None and rule.arm not in file.arms:
            raise file.error(
                ("engine", "per-conc", rule_index, "arm"), f"no arm {rule.arm!r} (have: {', '.join(file.arms)})"
            )
        for name in rule.env:
            if name in HASH_ENV or name in engine.hash_env or name in recipe.env_policy:
                raise file.error(
                    ("engine", "per-conc", rule_index, "env", name),
                    f"{name} is hashing env or set by env-policy: the same for every concurrency",
                )
        for name in rule.flags:
            if name in base:
                raise file.error(("engine", "per-conc", rule_index, "flags", name), f"{name} is already a base flag")
            for arm_name, arm in file.arms.items():
                if name in arm.add and rule.arm in (None, arm_name):
                    raise file.error(
                        ("engine", "per-conc", rule_index, "flags", name), f"{name} is also added by arm {arm_name}"
                    )
            for other_index, other in enumerate(recipe.engine.per_conc[:rule_index]):
                if name in other.flags and _overlap(rule, other):
                    raise file.error(
                        ("engine", "per-conc", rule_index, "flags", name),
                        f"{name} is also set by per-conc rule {other_index} for an overlapping conc range",
                    )
    for arm_name, arm in file.arms.items():
        where: tuple[str | int, ...] = ("arms", arm_name)
        for name in arm.remove:
            if name not in base:
                raise file.error((*where, "remove"), f"removes {name}, which the base flags do not set")
            if recipe.scenario == "agentic-coding" and name in engine.tool_call_flags:
                raise file.error((*where, "remove"), f"an agentic arm may not remove {name}")
        for name in arm.add:
            if name in base and name not in arm.remove:
                raise file.error((*where, "add", name), f"{name} is a base flag: list it under remove to change it")
        for name in arm.env:
            if name in HASH_ENV or name in engine.hash_env:
                raise file.error(
                    (*where, "env", name), f"{name} is hashing env: set it once in env-policy for all arms"
                )
            if name in recipe.env_policy:
                raise file.error((*where, "env", name), f"{name} is set by env-policy: arms may not change it")
        for name in arm.replay_env:
            if name in HASH_ENV or name in recipe.replay.env:
                raise file.error(
                    (*where, "replay-env", name), f"{name} is set for every arm (env-policy or replay.env), not per arm"
                )
        env = {**recipe.env_policy, **arm.env}
        for problem in backends.get(arm_name).check_arm(arm, arm_flags(recipe, arm), env, recipe.engine.block_size):
            raise file.error((*where, *problem.field), problem.message)


def _overlap(a: ConcRule, b: ConcRule) -> bool:
    """Some point both rules apply to: their conc ranges meet, on one side of DP attention at least, at one TP
    size and on one arm where both name one."""
    lo = max(a.conc_min or 1, b.conc_min or 1)
    hi = min(a.conc_max or 1 << 30, b.conc_max or 1 << 30)
    apart = any(
        x is not None and y is not None and x != y for x, y in ((a.dp_attn, b.dp_attn), (a.tp, b.tp), (a.arm, b.arm))
    )
    return lo <= hi and not apart


def _flag_places(file: RecipeFile) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every mapping of engine flags a recipe can set, with where it is: base, EP, per-conc rules, arms."""
    recipe = file.recipe
    places: list[tuple[tuple[Any, ...], dict[str, Any]]] = [(("engine", "flags"), dict(recipe.engine.flags))]
    places.append((("engine", "ep-flags"), dict(recipe.engine.ep_flags)))
    places += [(("engine", "per-conc", i, "flags"), dict(r.flags)) for i, r in enumerate(recipe.engine.per_conc)]
    places += [(("arms", name, "add"), dict(arm.add)) for name, arm in file.arms.items()]
    return places


def canonical_flag(name: str) -> str:
    """The option a flag sets as the engine's parser reads it: `--kv_transfer_config` is
    `--kv-transfer-config`; a dotted `--kv-transfer-config.kv_connector_module_path` sets a leaf of it."""
    root, dot, leaf = name.partition(".")
    return "--" + root.removeprefix("--").replace("_", "-") + dot + leaf


def _check_computed(file: RecipeFile, computed: frozenset[str]) -> None:
    for where, flags in _flag_places(file):
        for name in flags:
            if "/" in name:  # FLAG/leaf names a JSON leaf among `recipes check`'s facts: no engine reads it
                raise file.error((*where, name), f"{name} is no option: a leaf of a JSON flag is set in its JSON")
            option = canonical_flag(name)
            root = option.partition(".")[0]
            if option in computed:
                spelled = f" ({option})" if option != name else ""
                raise file.error(
                    (*where, name), f"{name}{spelled} is set by slurmx from the point or the node, not by a recipe"
                )
            if root in computed:  # seed 001: a missing or overridden connector module path loads no connector
                raise file.error(
                    (*where, name),
                    f"{name} would override part of {root}, which slurmx builds whole from the point and its backend",
                )


def _check_flag_places(file: RecipeFile, tool_call_flags: tuple[str, ...]) -> None:
    """Seed 000: tool calling dropped on some points only (an EP or per-conc rule, an arm) by a false value, an
    empty parser or the `--no-` form; every place a flag can come from is checked, not only the base."""
    for where, flags in _flag_places(file):
        for name, value in flags.items():
            option = canonical_flag(name)
            for flag in tool_call_flags:
                disabled = option == "--no-" + flag.removeprefix("--") or (
                    option == flag and (value is False or value is None or value == "")
                )
                if disabled:
                    raise file.error(
                        (*where, name),
                        f"{name}: {value!r} disables tool calling ({flag}): agentic requests get HTTP 400",
                    )


def _check_hash_policy(file: RecipeFile) -> None:
    """One fixed hash seed for every process of every arm, or prefix-cache keys differ between them
    (seed 000's arms ran with 0, 42 and unset)."""
    recipe = file.recipe
    seed = recipe.env_policy.get("PYTHONHASHSEED")
    if seed is not None and (not seed.isdigit() or int(seed) > 4294967295):
        raise file.error(
            ("env-policy", "PYTHONHASHSEED"),
            f"{seed!r} is not a fixed seed (an integer 0..4294967295): prefix-cache keys would differ between processes",
        )
    launchers: list[tuple[tuple[Any, ...], list[str]]] = [(("engine", "launcher"), list(recipe.engine.launcher))]
    if recipe.router is not None:
        launchers.append((("router", "launcher"), list(recipe.router.launcher)))
    for where, argv in launchers:
        for i, token in enumerate(argv):
            unset = token in ("-u", "--unset") and i + 1 < len(argv)
            name = token.partition("=")[0] if "=" in token else argv[i + 1] if unset else ""
            if name in HASH_ENV:
                raise file.error(
                    (*where, i), f"{token!r} changes {name} for one process: hashing env belongs to env-policy only"
                )


def _typed_arms(recipe: Recipe, path: Path, data: Any, index: LineIndex) -> dict[str, Arm]:
    """Each arm validated by its backend's own model, errors located in the file."""
    arms: dict[str, Arm] = {}
    for name in recipe.arms:
        try:
            backend = backends.get(name)
        except UserError as exc:
            raise ConfigError(path, index.line_of(data, ("arms", name)), f"arms.{name}", str(exc)) from None
        arms[name] = validate(backend.arm_model, data, path, index, ("arms", name))
    return arms


def load_recipe(path: Path) -> RecipeFile:
    data, index = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(path, 1, "", "a recipe must be a mapping")
    recipe = validate(Recipe, data, path, index)
    file = RecipeFile(recipe, path, data, index, _typed_arms(recipe, path, data, index), file_digest(path))
    _check(file)
    return file


@dataclass
class Recipes:
    files: list[RecipeFile]
    # the first file of each match: every point of `plan --all` looks its recipe up
    by_match: dict[tuple[object, ...], RecipeFile] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_match = {}
        for file in self.files:
            self.by_match.setdefault(file.recipe.match.values(), file)

    def find(self, wanted: tuple[object, ...]) -> RecipeFile | None:
        """The recipe whose match equals `wanted` (Match.FIELDS, in order) in every field, or None."""
        return self.by_match.get(wanted)

    def nearest(self, wanted: tuple[object, ...]) -> tuple[RecipeFile, list[str]] | None:
        """The recipe that differs from `wanted` in the fewest fields, with those fields."""
        best: tuple[RecipeFile, list[str]] | None = None
        for file in self.files:
            values = file.recipe.match.values()
            differ = [
                f"{name.replace('_', '-')} {have!r} (point: {want!r})"
                for name, have, want in zip(Match.FIELDS, values, wanted, strict=True)
                if have != want
            ]
            if best is None or len(differ) < len(best[1]):
                best = (file, differ)
        return best


def load_recipes(directory: Path) -> Recipes:
    files = [load_recipe(p) for p in sorted(directory.glob("*.yaml"))]
    seen: dict[tuple[str, ...], Path] = {}
    for file in files:
        key = tuple(str(v) for v in file.recipe.match.values())
        if key in seen:
            raise file.error(("match",), f"same match as {seen[key]}")
        seen[key] = file.path
    return Recipes(files)
