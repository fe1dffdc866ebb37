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

import re
import shlex
from pathlib import Path

from slurmx.config.srt import (
    SRT_HEALTH_INTERVAL_S,
    SrtRecipe,
    minutes,
    recipe_path,
    srt_argv,
)
from slurmx.engines import Engine
from slurmx.plan import Point
from slurmx.recipes.srt import worker_launcher
from slurmx.upstream.facts import MODEL_PATH, Facts, argv_facts, env_facts
from slurmx.upstream.launcher import LAUNCHER

WORKSPACE = "/infmax-workspace"  # where srt-slurm mounts the InferenceX checkout (benchmark.command's paths)
FRONTEND = "router"  # the slurmx process Dynamo's frontend is (it stands where a router stands)
ENGINE = "engine"  # the slurmx process the aggregated workers are (the head's, compared; every node runs the same)


def config_file(tree: Path, point: Point) -> Path | None:
    """The srt-slurm recipe a multinode point's row names, in DIR (config/srt.py's recipe_path)."""
    return recipe_path(tree, point.prefill.additional_settings if point.prefill is not None else None)


def replay_script(recipe: SrtRecipe) -> str | None:
    """The InferenceX script benchmark.command runs, relative to the checkout (None: not one of its own)."""
    words = shlex.split(str(recipe.section("benchmark").get("command", "")))
    script = next((w for w in words if w.startswith(WORKSPACE + "/")), None)
    return script.removeprefix(WORKSPACE + "/") if script else None


# a launcher's rewrite of every recipe's health_check before `srtctl apply`: the polls by sed (launch_b200-dgxc.sh,
# launch_b200-nscale-slurm.sh: `sed -i 's/^  max_attempts: [0-9]*/  max_attempts: 720/'`), or the whole section
# replaced by printf (launch_h200-dgxc-slurm.sh: `printf '\nhealth_check:\n  max_attempts: 720\n  interval_seconds: 10\n'`)
_ATTEMPTS_SED = re.compile(r"s/\^  max_attempts: \[0-9\]\*/  max_attempts: (\d+)/")
_SECTION_PRINTF = re.compile(r"printf '\\nhealth_check:\\n  max_attempts: (\d+)\\n  interval_seconds: (\d+)\\n'")


def health_window_s(recipe: SrtRecipe, launcher: Path) -> int:
    """How long srtctl waits for the deployment: the recipe's health_check polls x interval, as the point's launcher
    rewrites them where it does (its own sed or printf, read from the script)."""
    check = recipe.section("health_check")
    attempts, interval = int(check.get("max_attempts", 0)), int(check.get("interval_seconds", SRT_HEALTH_INTERVAL_S))
    text = launcher.read_text() if launcher.is_file() else ""
    if (section := _SECTION_PRINTF.search(text)) is not None:
        attempts, interval = int(section[1]), int(section[2])
    elif (polls := _ATTEMPTS_SED.search(text)) is not None:
        attempts = int(polls[1])
    return attempts * interval


def engine_facts(recipe: SrtRecipe, engine: Engine, window_s: int) -> Facts:
    """The aggregated engine as srtctl starts it, with the recipe's flags and env: behind srt-slurm's direct frontend
    `engine.srt_direct_launch` (the model path first where the engine takes it positionally); behind Dynamo's frontend
    (`engine.frontend`), Dynamo's worker module for the engine with the model by the engine's model flag."""
    if engine.frontend is not None:
        program, *head = worker_launcher(engine)
        model = [engine.model_flag or "--model", MODEL_PATH]
    else:
        program, *head = engine.srt_direct_launch
        model = [MODEL_PATH] if engine.model_flag is None else []
    facts: Facts = {(ENGINE, "program"): program}
    facts.update(argv_facts(ENGINE, [*head, *model, *srt_argv(recipe.engine_config)], {}))
    facts.update(env_facts(ENGINE, recipe.engine_env, {}))
    facts[(ENGINE, "startup timeout s")] = str(window_s)
    return facts


def frontend_facts(recipe: SrtRecipe, engine: Engine) -> Facts:
    """Dynamo's frontend as srtctl starts it in front of the workers: its module with `frontend.args` (srtctl's
    rendering) and `frontend.env`; what the file asks beyond them (a Dynamo build of its own, a setup script before
    the workers) as facts of what is installed and run first."""
    frontend = engine.frontend
    assert frontend is not None
    program, *head = frontend.launcher
    facts: Facts = {(FRONTEND, "program"): program}
    facts.update(argv_facts(FRONTEND, [*head, *srt_argv(recipe.frontend_args)], {}))
    facts.update(env_facts(FRONTEND, recipe.frontend_env, {}))
    install = recipe.section("dynamo")
    if install.get("install"):
        facts[("provision", "dynamo install")] = str(install.get("hash") or install.get("version") or "yes")
    script = recipe.data.get("setup_script")
    if script:
        facts[("provision", "setup script")] = str(script)
    return facts


SBATCH_COMPARED = ("mem", "cpus-per-task")


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
    directives = recipe.section("sbatch_directives")
    for name in SBATCH_COMPARED:  # the recipe's own #SBATCH lines that a Slurm request of slurmx's has too
        if name in directives:
            facts[(LAUNCHER, f"slurm --{name}")] = str(directives[name])
    image = recipe.section("model").get("container")
    if image is not None:
        facts[(LAUNCHER, "container image")] = str(image)
    revision = recipe.section("identity", "model").get("revision")
    if revision is not None:
        facts[("provision", "model revision")] = str(revision)
    return facts
