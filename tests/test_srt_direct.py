"""Dynamo rows whose srt-slurm recipe serves directly (frontend.type vllm or sglang, no Dynamo frontend, worker or
router): which engine serves them, and that what slurmx starts is what the recipe files say.

Every expected figure here is read from InferenceX's own files with PyYAML (the recipe YAML, the launcher's text),
or made by InferenceX's own code (runners/inject_synthetic_acceptance.py, run unchanged), never by slurmx's rules.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmx.inputs import Inputs, load_inputs
from slurmx.plan import Point
from slurmx.process import Process
from slurmx.submit.render import point_processes
from slurmx.submit.resolved import Resolved, resolve_runnable
from tests.conftest import FIXTURES, ROOT

TREE = FIXTURES / "repo-main"
SRT = TREE / "benchmarks" / "multi_node" / "srt-slurm-recipes"
# the five agentic keys of main whose every row names a recipe with frontend.type = backend.type (the master's own
# comment: "serves DIRECTLY with vllm serve ... no dynamo frontend/worker/router involved"), and the engine
SERVED = {
    "kimik3-fp4-b200-dynamo-vllm-agentic": "vllm",
    "qwen3.5-fp4-gb200-dynamo-sglang-agentic-mtp": "sglang",
    "qwen3.5-fp4-gb300-dynamo-sglang-agentic-agg": "sglang",
}
REFUSED = {  # Mooncake across the nodes of one rank: refused, naming the recipe
    "kimik3-fp4-b200-dynamo-vllm-agentic-dspark": "vllm",
    "kimik3-fp4-gb200-dynamo-vllm-agentic-dspark-mooncake-tp8pp2": "vllm",
}
DIRECT = {**SERVED, **REFUSED}
# the recipe's flags slurmx names otherwise: the model (its path), and the parallel sizes (from the row)
PARALLEL = {"tensor-parallel-size", "pipeline-parallel-size", "expert-parallel-size", "data-parallel-size"}
CACHE_ENV = {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}  # srtslurm.yaml's mount, a declared cluster-layout row


def _env() -> dict[str, str]:
    """This checkout's slurmx first, as a user's installed one would be."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
    }


def config_file(point: Point) -> Path:
    assert point.prefill is not None
    (setting,) = [s for s in point.prefill.additional_settings or [] if s.startswith("CONFIG_FILE=")]
    return SRT / setting.removeprefix("CONFIG_FILE=recipes/")


def settings(point: Point) -> dict[str, str]:
    assert point.prefill is not None
    pairs = [s.split("=", 1) for s in point.prefill.additional_settings or [] if not s.startswith("CONFIG_FILE=")]
    return dict(pairs)


@cache
def launched(path: Path, framework: str, synthetic: tuple[tuple[str, str], ...], prefix: str) -> dict[str, Any]:
    """The recipe as the launcher hands it to srtctl: InferenceX's injector run on a copy where the row asks."""
    if dict(synthetic).get("SYNTHETIC_ACCEPTANCE") != "true":
        data: dict[str, Any] = yaml.safe_load(path.read_text())
        return data
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"slurmx-test-srt-{os.getpid()}"
    work.mkdir(exist_ok=True)
    copy = work / path.name
    shutil.copyfile(path, copy)
    env = {**os.environ, **dict(synthetic), "MODEL_PREFIX": prefix, "FRAMEWORK": framework}
    subprocess.run(
        [sys.executable, str(TREE / "runners" / "inject_synthetic_acceptance.py"), str(copy), framework],
        env=env, check=True, capture_output=True, cwd=work,
    )  # fmt: skip
    data = yaml.safe_load(copy.read_text())
    return data


def recipe_of(point: Point) -> dict[str, Any]:
    return launched(config_file(point), point.framework, tuple(sorted(settings(point).items())), point.model_prefix)


@pytest.fixture(scope="module")
def inputs() -> Inputs:
    if not TREE.is_dir():
        pytest.skip(f"no InferenceX fixture tree at {TREE}")
    return load_inputs(None, None, list(DIRECT), inferencex=TREE)


@pytest.fixture(scope="module")
def resolved(inputs: Inputs) -> dict[str, list[Resolved]]:
    out: dict[str, list[Resolved]] = {}
    for key in SERVED:
        items, refused = resolve_runnable(inputs.key_points(key), inputs)
        assert not refused, refused
        out[key] = items
    return out


def test_every_direct_row_of_main_is_served_by_its_recipes_engine_and_no_other_dynamo_row_is() -> None:
    """The master's aggregated Dynamo rows: a row whose recipe says frontend.type X over backend.type X (X the
    framework's engine) is served by X; every other keeps its framework (Dynamo's own frontend)."""
    everything = load_inputs(None, None, [], all_keys=True, keep_going=True, inferencex=TREE)
    direct: dict[str, set[str]] = {}
    for point in everything.points:
        if not point.framework.startswith("dynamo-") or point.disagg or not point.multinode:
            continue
        recipe = yaml.safe_load(config_file(point).read_text()) if config_file(point).is_file() else {}
        frontend = (recipe.get("frontend") or {}).get("type", "dynamo")
        backend = (recipe.get("backend") or {}).get("type")
        expected = frontend if f"dynamo-{frontend}" == point.framework and backend == frontend else point.framework
        assert point.engine == expected, (point.config_key, point.exp_name, frontend, backend)
        if point.engine != point.framework and point.scenario == "agentic-coding":
            direct.setdefault(point.config_key, set()).add(point.engine)
    assert direct == {key: {engine} for key, engine in DIRECT.items()}


def test_the_engine_is_no_part_of_the_point_id(inputs: Inputs) -> None:
    """A point's id hashes InferenceX's row; which slurmx engine serves it is slurmx's own (said, not hashed)."""
    from dataclasses import replace

    for key in DIRECT:
        point = inputs.key_points(key)[0]
        assert point.engine != point.framework
        again = replace(point, engine="", point_id="", exp_name="")
        assert again.engine == point.framework and again.point_id == point.point_id


def _argv(process: Process) -> list[str]:
    """The engine's own argv, after the runtime's srun wrapper (the program onwards)."""
    argv = process.argv
    start = next(i for i, a in enumerate(argv) if a in ("vllm", "python3"))
    return argv[start:]


def _flags(argv: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, token in enumerate(argv):
        if token.startswith("--"):
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else ""
            out[token] = value
    return out


def test_the_engine_runs_each_rows_recipe_flags_parallelism_and_env(resolved: dict[str, list[Resolved]]) -> None:
    checked = 0
    for key, items in resolved.items():
        for item in items:
            recipe = recipe_of(item.point)
            backend = recipe["backend"]
            config = backend[f"{backend['type']}_config"]["aggregated"]
            head = next(p for p in point_processes(item) if p.name == "engine")
            argv = _argv(head)
            flags = _flags(argv)
            if SERVED[key] == "vllm":
                assert argv[:2] == ["vllm", "serve"]
            else:
                assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
            for name, value in config.items():
                flag = f"--{name}"
                if name in PARALLEL or name == "model-path":
                    continue
                if value is False or value is None:
                    assert flag not in flags, (item.point.exp_name, flag)
                elif value is True:
                    assert flags.get(flag) == "", (item.point.exp_name, flag)
                else:
                    assert flags.get(flag) == str(value), (item.point.exp_name, flag, flags.get(flag), value)
            # the parallel sizes, spelled by each engine (SGLang's --tp/--ep-size are its --tensor/expert-parallel-size)
            tp = flags.get("--tensor-parallel-size") or flags.get("--tp")
            assert tp == str(config["tensor-parallel-size"])
            pp = flags.get("--pipeline-parallel-size") or flags.get("--pp-size") or "1"
            assert pp == str(config.get("pipeline-parallel-size", 1))
            if "expert-parallel-size" in config:
                assert flags["--ep-size"] == str(config["expert-parallel-size"])
            want = {k: str(v) for k, v in backend["aggregated_environment"].items() if k not in CACHE_ENV}
            assert {k: head.env.get(k) for k in want} == want, item.point.exp_name
            checked += 1
    assert checked == 6 + 16 + 7


def test_the_synthetic_acceptance_rows_run_what_inferencex_injects(resolved: dict[str, list[Resolved]]) -> None:
    """qwen3.5-fp4-gb200's rows ask SYNTHETIC_ACCEPTANCE=true at 3.39: the injector adds SGLANG_SIMULATE_ACC_*."""
    items = resolved["qwen3.5-fp4-gb200-dynamo-sglang-agentic-mtp"]
    for item in items:
        injected = recipe_of(item.point)["backend"]["aggregated_environment"]
        head = next(p for p in point_processes(item) if p.name == "engine")
        assert injected["SGLANG_SIMULATE_ACC_LEN"] == "3.39"
        assert {k: head.env[k] for k in injected if k.startswith("SGLANG_SIMULATE_ACC")} == {
            k: v for k, v in injected.items() if k.startswith("SGLANG_SIMULATE_ACC")
        }


def _minutes(limit: str) -> int:
    hours, minutes, _ = (int(x) for x in limit.split(":"))
    return hours * 60 + minutes


def test_the_request_and_readiness_window_are_the_recipes_allocation(resolved: dict[str, list[Resolved]]) -> None:
    for items in resolved.values():
        for item in items:
            recipe = recipe_of(item.point)
            resources = recipe["resources"]
            assert item.request.nodes == resources["agg_nodes"]
            assert item.request.gpus == resources["gpus_per_agg"] // resources["agg_nodes"]
            assert item.request.time_limit_min == _minutes(recipe["slurm"]["time_limit"])
            directives = recipe.get("sbatch_directives") or {}
            if "mem" in directives:  # the whole node's memory, as srtctl's sbatch asks it
                assert item.request.mem == directives["mem"]
            # srtctl's readiness: health_check polls x interval, the polls as the launcher rewrites them (its sed)
            launcher = (TREE / "runners" / _launcher(item.point)).read_text()
            rewritten = re.search(r"s/\^  max_attempts: \[0-9\]\*/  max_attempts: (\d+)/", launcher)
            attempts = int(rewritten[1]) if rewritten else recipe["health_check"]["max_attempts"]
            head = next(p for p in point_processes(item) if p.name == "engine")
            assert head.ready_timeout_s == attempts * recipe["health_check"]["interval_seconds"]


def _launcher(point: Point) -> str:
    """The launcher InferenceX's workflow runs for the point's cluster (runners/launch_<runner>.sh)."""
    return {
        "cluster:b200-dgxc": "launch_b200-dgxc.sh", "cluster:gb200-nv": "launch_gb200-nv.sh",
        "cluster:gb300-nv": "launch_gb300-nv.sh",
    }[point.runner]  # fmt: skip


def test_b200_tp8_pp2_is_one_rank_over_both_nodes_the_head_serving(resolved: dict[str, list[Resolved]]) -> None:
    """agg-b200-tp8pp2-agentic.yaml: TP8 x PP2 over 2 nodes of 8 GPUs, the leader serving, rank 1 headless."""
    for item in resolved["kimik3-fp4-b200-dynamo-vllm-agentic"]:
        engines = [p for p in point_processes(item) if p.name.endswith("engine")]
        assert len(engines) == 2
        head, other = (_flags(_argv(p)) for p in engines)
        assert head["--nnodes"] == other["--nnodes"] == "2"
        assert (head["--node-rank"], other["--node-rank"]) == ("0", "1")
        assert "--headless" not in head and "--headless" in other
        assert head["--tensor-parallel-size"] == "8" and head["--pipeline-parallel-size"] == "2"


def test_mooncake_over_the_nodes_of_one_rank_is_refused_naming_the_recipe(inputs: Inputs) -> None:
    for key in REFUSED:
        points = inputs.key_points(key)
        served, refused = resolve_runnable(points, inputs)
        assert not served and len(refused) == len(points)
        for point, why in refused:
            named = config_file(point).relative_to(SRT)
            nodes = yaml.safe_load(config_file(point).read_text())["resources"]["agg_nodes"]
            assert why.startswith(f"recipes/{named}: kv-offload-backend mooncake over {nodes} nodes: "), why
            assert "\n" not in why


def test_recipes_check_declares_every_difference_of_the_served_keys() -> None:
    """`slurmx recipes check` on the served keys: each point compared with its recipe, every difference declared."""
    proc = subprocess.run(
        [sys.executable, "-m", "slurmx", "recipes", "check", "--inferencex", str(TREE), *SERVED],
        capture_output=True, text=True, timeout=600, check=False, env=_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(SERVED)} keys, {6 + 16 + 7} points" in proc.stdout
    assert "every difference declared" in proc.stdout


def test_a_broken_srt_recipe_is_one_line_naming_its_file_and_line(tmp_path: Path) -> None:
    """A Dynamo row's recipe that does not parse: `plan` names the file and line, exit 2, no traceback."""
    key = "qwen3.5-fp4-gb300-dynamo-sglang-agentic-agg"
    masters = yaml.safe_load((TREE / "configs" / "nvidia-master.yaml").read_text())
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "nvidia-master.yaml").write_text(yaml.safe_dump({key: masters[key]}))
    shutil.copyfile(TREE / "configs" / "runners.yaml", tmp_path / "configs" / "runners.yaml")
    point_file = masters[key]["scenarios"]["agentic-coding"][0]["search-space"][0]["prefill"]["additional-settings"][0]
    broken = tmp_path / "benchmarks" / "multi_node" / "srt-slurm-recipes" / point_file.split("recipes/", 1)[1]
    broken.parent.mkdir(parents=True)
    broken.write_text("name: x\nfrontend:\n  type: sglang\n  args: [unclosed\n")
    proc = subprocess.run(
        [sys.executable, "-m", "slurmx", "plan", "--inferencex", str(tmp_path), key],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path, env=_env(),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert re.match(rf"slurmx: error: {re.escape(str(broken))}:\d+: ", lines[0]), lines[0]


@pytest.mark.parametrize(
    ("framework", "frontend", "backend", "engine"),
    [
        ("dynamo-vllm", "vllm", "vllm", "vllm"),  # srt-slurm PR #278: `vllm serve` owns the port
        ("dynamo-sglang", "sglang", "sglang", "sglang"),  # sglang.launch_server owns the port
        ("dynamo-vllm", None, "vllm", "dynamo-vllm"),  # no frontend section: srt-slurm's default, Dynamo's
        ("dynamo-vllm", "dynamo", "vllm", "dynamo-vllm"),
        ("dynamo-sglang", "sglang-router", "sglang", "dynamo-sglang"),  # a router in front: not the engine alone
        ("dynamo-vllm", "sglang", "sglang", "dynamo-vllm"),  # another framework's frontend: not this row's engine
        ("dynamo-vllm", "vllm", "sglang", "dynamo-vllm"),  # srt-slurm refuses a frontend over another backend
        ("vllm", "vllm", "vllm", "vllm"),  # a row of an engine's own framework keeps it (the h200 key)
    ],
)
def test_which_engine_a_row_is_served_by(framework: str, frontend: str | None, backend: str, engine: str) -> None:
    from slurmx.config.srt import SrtRecipe, served_framework

    data: dict[str, Any] = {"backend": {"type": backend}}
    if frontend is not None:
        data["frontend"] = {"type": frontend}
    assert served_framework(framework, SrtRecipe(Path("recipe.yaml"), data)) == engine
    assert served_framework(framework, None) == framework


def test_recipes_check_of_a_refused_key_says_it_compared_nothing() -> None:
    """The Mooncake keys' points are all refused: check names each and exits 2 (incomplete), claiming nothing."""
    key = "kimik3-fp4-gb200-dynamo-vllm-agentic-dspark-mooncake-tp8pp2"
    proc = subprocess.run(
        [sys.executable, "-m", "slurmx", "recipes", "check", "--inferencex", str(TREE), key],
        capture_output=True, text=True, timeout=300, check=False, env=_env(),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "recipes check: nothing compared: every point was skipped (said above)"
    skipped = proc.stderr.strip().splitlines()
    assert len(skipped) == 5 and all("kv-offload-backend mooncake over 4 nodes" in line for line in skipped)
