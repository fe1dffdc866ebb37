"""InferenceX's srt-slurm recipes (benchmarks/multi_node/srt-slurm-recipes/), read where a master row names one.

A multinode row names its recipe in `additional-settings` (`CONFIG_FILE=recipes/vllm/...yaml`); InferenceX's
launchers copy `benchmarks/multi_node/srt-slurm-recipes/` over srt-slurm's `recipes/` and run `srtctl apply` on it.
This module reads such a file and says which engine serves the row (`served_framework`, the one place that
routes a Dynamo row to the engine its recipe serves with directly, or to Dynamo's worker behind Dynamo's frontend);
recipes/srt.py serves an aggregated Dynamo point from the file, upstream/srt.py turns the file into facts.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmx.config.yamlfile import LineIndex, load_yaml
from slurmx.errors import ConfigError

RECIPES = Path("benchmarks/multi_node/srt-slurm-recipes")
CONFIG_FILE = "CONFIG_FILE="
DYNAMO = "dynamo-"  # a Dynamo row's framework: dynamo-vllm, dynamo-sglang, dynamo-trt
DYNAMO_FRONTEND = "dynamo"  # frontend.type of Dynamo's own frontend (srt-slurm's default)
SRT_HEALTH_INTERVAL_S = 10  # srt-slurm's health_check.interval_seconds when a recipe gives none


def minutes(value: str) -> str:
    """Slurm's time forms (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) as minutes; anything else as written."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", value)
    if not match:
        return value
    days, first, second, third = match.groups()
    if days is None and third is None:  # M or M:S
        total = int(first) + (int(second) if second else 0) / 60
    else:  # H:M:S, D-H, D-H:M, D-H:M:S
        total = int(days or 0) * 1440 + int(first) * 60 + int(second or 0) + int(third or 0) / 60
    return str(int(total)) if total == int(total) else f"{total:g}"


def srt_argv(config: dict[str, Any]) -> list[str]:
    """srt-slurm's rendering of a `<type>_config` mapping into flags (every backend of NVIDIA/srt-slurm): keys
    sorted, `_` read as `-`, `true` a bare flag, `false` and null left out, a list the flag then its items, anything
    else `--key str(value)`."""
    argv: list[str] = []
    for key in sorted(config):
        flag, value = "--" + str(key).replace("_", "-"), config[key]
        if isinstance(value, bool):
            argv += [flag] if value else []
        elif isinstance(value, list):
            argv += [flag, *(str(v) for v in value)]
        elif value is not None:
            argv += [flag, str(value)]
    return argv


def named_recipe(settings: list[str] | None) -> str | None:
    """The srt-slurm recipe a row's `additional-settings` name, as the row spells it (the launcher's
    `${CONFIG_FILE%%:*}`: `recipes/...yaml`); None for a row without one."""
    for setting in settings or []:
        if setting.startswith(CONFIG_FILE):
            return setting.removeprefix(CONFIG_FILE).split(":", 1)[0]
    return None


def recipe_path(tree: Path, settings: list[str] | None) -> Path | None:
    """`named_recipe` in the InferenceX checkout `tree` (`recipes/` read as its srt-slurm-recipes/)."""
    named = named_recipe(settings)
    return tree / RECIPES / named.removeprefix("recipes/") if named is not None else None


@dataclass(frozen=True)
class SrtRecipe:
    """One srt-slurm recipe file, read: the parts slurmx has a counterpart of."""

    path: Path
    data: dict[str, Any]
    index: LineIndex | None = None  # the line of each key (file:line errors)

    def section(self, *keys: str) -> dict[str, Any]:
        node: Any = self.data
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        return node if isinstance(node, dict) else {}

    def error(self, keys: tuple[str, ...], message: str) -> ConfigError:
        """A bad value of the file: `file:line: a.b.c: message`."""
        line = self.index.line_of(self.data, keys) if self.index is not None else None
        return ConfigError(self.path, line, ".".join(keys), message)

    def where(self, *keys: str) -> str:
        """`file:line: a.b.c` of a field, as a one-line error names it."""
        line = self.index.line_of(self.data, keys) if self.index is not None else None
        return f"{self.path}:{line or 1}: {'.'.join(keys)}"

    @property
    def config_key(self) -> str:
        return f"{self.backend_type}_config"

    @property
    def frontend_args(self) -> dict[str, Any]:
        return self.section("frontend", "args")

    @property
    def frontend_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.section("frontend", "env").items()}

    @property
    def health_window_s(self) -> int:
        """How long srtctl waits for the deployment by the file alone: health_check polls x interval."""
        check = self.section("health_check")
        return int(check.get("max_attempts", 0)) * int(check.get("interval_seconds", SRT_HEALTH_INTERVAL_S))

    @property
    def backend_type(self) -> str:
        return str(self.section("backend").get("type", ""))

    @property
    def frontend_type(self) -> str:
        """What serves the OpenAI port: `dynamo` (Dynamo's frontend, srt-slurm's default) or the backend itself
        (srt-slurm PR #278's direct frontend: `vllm serve`, `python3 -m sglang.launch_server`)."""
        return str(self.section("frontend").get("type", DYNAMO_FRONTEND))

    @property
    def engine_config(self) -> dict[str, Any]:
        """`backend.<type>_config.aggregated`: the aggregated workers' flags."""
        return self.section("backend", self.config_key, "aggregated")

    @property
    def engine_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.section("backend", "aggregated_environment").items()}

    @property
    def replay_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.section("benchmark", "env").items()}


def load_recipe(path: Path) -> SrtRecipe:
    if not path.is_file():
        raise ConfigError(path, None, "CONFIG_FILE", "the row's srt-slurm recipe is not in the checkout")
    data, index = load_yaml(path, duplicates="warn")  # srtctl reads it with PyYAML: a repeated key's last value wins
    if not isinstance(data, dict):
        raise ConfigError(path, 1, "", "an srt-slurm recipe is a mapping")
    return SrtRecipe(path, data, index)


read_recipe = functools.cache(load_recipe)  # one read per file, not one per point of its row


def served_framework(framework: str, recipe: SrtRecipe | None) -> str:
    """The framework whose engine serves a row: its own, except a Dynamo row (`dynamo-X`, which InferenceX's
    launchers route to srt-slurm) whose recipe serves directly with X: `frontend.type` X over `backend.type` X
    (srt-slurm PR #278: X's own OpenAI server, no Dynamo frontend, worker or router) is served by engine X. Any other
    Dynamo row keeps its framework: `dynamo-vllm`/`dynamo-sglang` are X's engine as Dynamo's worker behind Dynamo's
    frontend (engines/vllm.py, engines/sglang.py; recipes/srt.py serves them from the file)."""
    if recipe is None or not framework.startswith(DYNAMO):
        return framework
    direct = framework.removeprefix(DYNAMO)
    return direct if recipe.frontend_type == direct == recipe.backend_type else framework


def row_framework(tree: Path, framework: str, settings: list[str] | None) -> str:
    """`served_framework` of a row of the checkout `tree` by the recipe its settings name (its own framework where
    it names none, or the checkout does not hold it: slurmx's shipped masters have no srt-slurm tree beside them)."""
    if not framework.startswith(DYNAMO):
        return framework
    path = recipe_path(tree, settings)
    return served_framework(framework, read_recipe(path) if path is not None and path.is_file() else None)
