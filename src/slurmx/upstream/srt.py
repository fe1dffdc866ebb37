"""InferenceX's aggregated multinode points as its srt-slurm recipes declare them, as facts.

A multinode row names its recipe in `additional-settings` (`CONFIG_FILE=recipes/vllm/...yaml`); the launcher
(runners/launch_h200-dgxc-slurm.sh) copies `benchmarks/multi_node/srt-slurm-recipes/` over srt-slurm's
`recipes/` and runs `srtctl apply` on it. srtctl renders `backend.vllm_config.aggregated` into `vllm serve`
flags by the one convention every backend of NVIDIA/srt-slurm uses: keys sorted, `_` read as `-`, `true` a
bare flag, `false` and null left out, a list the flag then its items, anything else `--key str(value)`; it
derives host, port, headless, master address, node count and node rank from the allocation itself. The
replay is `benchmark.command` (benchmarks/multi_node/agentic_srt.sh), run under the capture's stand-ins with
`benchmark.env`, as a single-node script is.
"""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmx.config.yamlfile import load_yaml
from slurmx.errors import ConfigError
from slurmx.plan import Point
from slurmx.upstream.facts import MODEL_PATH, Facts, argv_facts, env_facts
from slurmx.upstream.launcher import LAUNCHER, minutes

RECIPES = Path("benchmarks/multi_node/srt-slurm-recipes")
CONFIG_FILE = "CONFIG_FILE="
WORKSPACE = "/infmax-workspace"  # where srt-slurm mounts the InferenceX checkout (benchmark.command's paths)
ENGINE = "engine"  # the slurmx process the aggregated workers are (the head's, compared; every node runs the same)


def config_file(tree: Path, point: Point) -> Path | None:
    """The srt-slurm recipe a multinode point's row names, in DIR (the launcher's `${CONFIG_FILE%%:*}` with
    `recipes/` read as DIR's srt-slurm-recipes/); None for a row without one."""
    settings = point.prefill.additional_settings if point.prefill is not None else None
    for setting in settings or []:
        if setting.startswith(CONFIG_FILE):
            path = setting.removeprefix(CONFIG_FILE).split(":", 1)[0]
            return tree / RECIPES / path.removeprefix("recipes/")
    return None


def srt_argv(config: dict[str, Any]) -> list[str]:
    """srt-slurm's rendering of a vllm_config mapping into flags (the module docstring's convention)."""
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

    def section(self, *keys: str) -> dict[str, Any]:
        node: Any = self.data
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        return node if isinstance(node, dict) else {}

    @property
    def backend_type(self) -> str:
        return str(self.section("backend").get("type", ""))

    @property
    def engine_config(self) -> dict[str, Any]:
        """`backend.<type>_config.aggregated`: the aggregated workers' flags."""
        return self.section("backend", f"{self.backend_type}_config", "aggregated")

    @property
    def engine_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.section("backend", "aggregated_environment").items()}

    @property
    def replay_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.section("benchmark", "env").items()}

    @property
    def replay_script(self) -> str | None:
        """The InferenceX script benchmark.command runs, relative to the checkout (None: not one of its own)."""
        words = shlex.split(str(self.section("benchmark").get("command", "")))
        script = next((w for w in words if w.startswith(WORKSPACE + "/")), None)
        return script.removeprefix(WORKSPACE + "/") if script else None


@functools.cache  # one read per file, not one per point of its row
def read_recipe(path: Path) -> SrtRecipe:
    if not path.is_file():
        raise ConfigError(path, None, "CONFIG_FILE", "the row's srt-slurm recipe is not in the checkout")
    data, _ = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(path, 1, "", "an srt-slurm recipe is a mapping")
    return SrtRecipe(path, data)


# srt-slurm's launcher rewrites every recipe's health_check to 720 polls x 10 s before `srtctl apply`
# (launch_h200-dgxc-slurm.sh's sed + printf), so the window the engine gets is this, whatever the file says
LAUNCHER_HEALTH_WINDOW_S = 720 * 10


def engine_facts(recipe: SrtRecipe) -> Facts:
    """The aggregated engine as srtctl's direct frontend starts it, `<backend type> serve MODEL` (its executable
    is named after the backend), with the recipe's flags and env."""
    facts: Facts = {(ENGINE, "program"): recipe.backend_type}
    facts.update(argv_facts(ENGINE, ["serve", MODEL_PATH, *srt_argv(recipe.engine_config)], {}))
    facts.update(env_facts(ENGINE, recipe.engine_env, {}))
    facts[(ENGINE, "startup timeout s")] = str(LAUNCHER_HEALTH_WINDOW_S)
    return facts


def request_facts(recipe: SrtRecipe) -> Facts:
    """The allocation the recipe asks srtctl for: its time limit, nodes and GPUs per node."""
    facts: Facts = {}
    limit = recipe.section("slurm").get("time_limit")
    if limit is not None:
        facts[(LAUNCHER, "slurm --time")] = minutes(str(limit))
    resources = recipe.section("resources")
    if "agg_nodes" in resources:
        facts[(LAUNCHER, "slurm --nodes")] = str(resources["agg_nodes"])
    if "gpus_per_node" in resources:  # the launcher's srtslurm.yaml: use_gpus_per_node_directive: true
        facts[(LAUNCHER, "slurm --gpus-per-node")] = str(resources["gpus_per_node"])
    image = recipe.section("model").get("container")
    if image is not None:
        facts[(LAUNCHER, "container image")] = str(image)
    revision = recipe.section("identity", "model").get("revision")
    if revision is not None:
        facts[("provision", "model revision")] = str(revision)
    return facts
