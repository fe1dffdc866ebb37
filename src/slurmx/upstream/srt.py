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

import shlex
from pathlib import Path

from slurmx.config.srt import LAUNCHER_HEALTH_WINDOW_S, SrtRecipe, minutes, recipe_path, srt_argv
from slurmx.plan import Point
from slurmx.upstream.facts import MODEL_PATH, Facts, argv_facts, env_facts
from slurmx.upstream.launcher import LAUNCHER

WORKSPACE = "/infmax-workspace"  # where srt-slurm mounts the InferenceX checkout (benchmark.command's paths)
ENGINE = "engine"  # the slurmx process the aggregated workers are (the head's, compared; every node runs the same)


def config_file(tree: Path, point: Point) -> Path | None:
    """The srt-slurm recipe a multinode point's row names, in DIR; None for a row without one."""
    return recipe_path(tree, point.prefill.additional_settings if point.prefill is not None else None)


def replay_script(recipe: SrtRecipe) -> str | None:
    """The InferenceX script benchmark.command runs, relative to the checkout (None: not one of its own)."""
    words = shlex.split(str(recipe.section("benchmark").get("command", "")))
    script = next((w for w in words if w.startswith(WORKSPACE + "/")), None)
    return script.removeprefix(WORKSPACE + "/") if script else None


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
