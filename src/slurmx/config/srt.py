"""InferenceX's srt-slurm recipes (benchmarks/multi_node/srt-slurm-recipes/), read where a master row names one.

A multinode row names its recipe in `additional-settings` (`CONFIG_FILE=recipes/vllm/...yaml`); the launchers copy
`benchmarks/multi_node/srt-slurm-recipes/` over srt-slurm's `recipes/` and run `srtctl apply` on it. srtctl renders
`backend.<type>_config.aggregated` into the workers' flags by the one convention every backend of NVIDIA/srt-slurm
uses (`srt_argv`). Read here, below every layer that needs it: `recipes/srt.py` serves an aggregated Dynamo point
from its file, `upstream/srt.py` turns a file into the facts `recipes check` compares.
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
# srt-slurm's launchers rewrite every recipe's health_check to 720 polls x 10 s before `srtctl apply`
# (launch_h200-dgxc-slurm.sh's sed + printf), so the window the engine gets is this, whatever the file says
LAUNCHER_HEALTH_WINDOW_S = 720 * 10
DYNAMO_FRONTEND = "dynamo"  # frontend.type of Dynamo's own frontend (srt-slurm's default)


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


def recipe_path(tree: Path, settings: list[str] | None) -> Path | None:
    """The srt-slurm recipe a row's `additional-settings` name, in the InferenceX checkout `tree` (the launcher's
    `${CONFIG_FILE%%:*}`, `recipes/` read as the checkout's srt-slurm-recipes/); None for a row without one."""
    for setting in settings or []:
        if setting.startswith(CONFIG_FILE):
            path = setting.removeprefix(CONFIG_FILE).split(":", 1)[0]
            return tree / RECIPES / path.removeprefix("recipes/")
    return None


def srt_argv(config: dict[str, Any]) -> list[str]:
    """srt-slurm's rendering of a `<type>_config` mapping into flags: keys sorted, `_` read as `-`, `true` a bare
    flag, `false` and null left out, a list the flag then its items, anything else `--key str(value)`."""
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

    def line(self, *keys: str) -> int | None:
        return self.index.line_of(self.data, keys) if self.index is not None else None

    def where(self, *keys: str) -> str:
        """`file:line: a.b.c` of a field, as a one-line error names it."""
        return f"{self.path}:{self.line(*keys) or 1}: {'.'.join(keys)}"

    @property
    def backend_type(self) -> str:
        return str(self.section("backend").get("type", ""))

    @property
    def frontend_type(self) -> str:
        """What serves the OpenAI port: `dynamo` (Dynamo's frontend, srt-slurm's default) or the backend itself."""
        return str(self.section("frontend").get("type", DYNAMO_FRONTEND))

    @property
    def config_key(self) -> str:
        return f"{self.backend_type}_config"

    @property
    def engine_config(self) -> dict[str, Any]:
        """`backend.<type>_config.aggregated`: the aggregated workers' flags."""
        return self.section("backend", self.config_key, "aggregated")

    @property
    def engine_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.section("backend", "aggregated_environment").items()}

    @property
    def frontend_args(self) -> dict[str, Any]:
        return self.section("frontend", "args")

    @property
    def frontend_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.section("frontend", "env").items()}

    @property
    def replay_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.section("benchmark", "env").items()}


@functools.cache  # one read per file, not one per point of its row
def read_recipe(path: Path) -> SrtRecipe:
    if not path.is_file():
        raise ConfigError(path, None, "CONFIG_FILE", "the row's srt-slurm recipe is not in the checkout")
    # a key given twice: the last one wins, as srtctl's PyYAML reads it (agg-gb200-tp16-latency-agentic.yaml's
    # compilation-config), never an error here
    data, index = load_yaml(path, duplicates="warn")
    if not isinstance(data, dict):
        raise ConfigError(path, 1, "", "an srt-slurm recipe is a mapping")
    return SrtRecipe(path, data, index)
