"""InferenceX's launchers run unchanged under stand-ins (slurmx/upstream/launcher.py): each single-node branch
reaches its container srun, and the facts read from its records are its own salloc and srun values."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmx.inputs import load_inputs
from slurmx.plan import Point
from slurmx.upstream.launcher import STANDIN_JOB_ID, inherited, launch_facts, run_launcher

# one agentic vLLM key per launcher: the launchers of the keys with recipes, then the AMD and H100/H200 ones
KEYS = {
    "launch_b200-dgxc.sh": "minimaxm3-fp4-b200-vllm-agentic-mtp",
    "launch_b300-nv.sh": "minimaxm3-fp4-b300-vllm-agentic-mtp",
    "launch_mi300x-amds.sh": "minimaxm3-fp8-mi300x-vllm-agentic-mtp",
    "launch_mi325x-amds.sh": "minimaxm3-fp8-mi325x-vllm-agentic-mtp",
    "launch_mi355x-amds.sh": "minimaxm3-fp4-mi355x-vllm-agentic-mtp",
    "launch_h100-dgxc-slurm.sh": "minimaxm3-fp8-h100-vllm-agentic-mtp",
    "launch_h200-dgxc-slurm.sh": "minimaxm3-fp8-h200-vllm-agentic-mtp",
}


def _point(tree: Path, key: str) -> Point:
    return load_inputs(None, None, [key], inferencex=tree).key_points(key)[0]


@pytest.mark.parametrize("launcher", sorted(KEYS))
def test_each_launcher_reaches_its_container_srun(launcher: str, fixtures: Path) -> None:
    tree = fixtures / "repo-main"
    point = _point(tree, KEYS[launcher])
    launch = run_launcher(tree, point)
    assert launch.launcher == tree / "runners" / launcher
    assert launch.why_not is None, launch.log[-2000:]
    script = launch.script()
    assert script is not None and script.startswith("benchmarks/single_node/agentic/"), script
    facts = launch_facts(launch)
    assert facts[("launcher", "slurm --gres")] == f"gpu:{point.tp}"  # the workflow's GPU_COUNT
    assert ("launcher", "container --container-image") in facts


def test_the_mi325x_launchers_facts_are_its_salloc_and_srun(fixtures: Path) -> None:
    tree = fixtures / "repo-main"
    launch = run_launcher(tree, _point(tree, KEYS["launch_mi325x-amds.sh"]))
    facts = launch_facts(launch)
    # launch_mi325x-amds.sh: salloc --partition=$PARTITION --gres=gpu:$GPU_COUNT --cpus-per-task=256 --time=480
    assert facts[("launcher", "slurm --partition")] == "compute"
    assert facts[("launcher", "slurm --cpus-per-task")] == "256"
    assert facts[("launcher", "slurm --time")] == "480"
    assert ("launcher", "slurm --exclusive") not in facts
    # its container srun: the GPU device nodes and the hub cache mounted, the home mounted, writable
    assert facts[("launcher", "container --container-mounts /dev/kfd")] == "/dev/kfd"
    assert facts[("launcher", "container --container-mounts /dev/dri")] == "/dev/dri"
    assert facts[("launcher", "container --container-mounts /mnt/hf_hub_cache")] == "/raid/hf-hub-cache"
    assert facts[("launcher", "container --container-mount-home")] == "yes"
    assert facts[("launcher", "container --container-writable")] == "yes"
    # what it exports beyond the workflow's env, made from the allocation salloc granted
    assert facts[("launcher", "env PORT")] == str(40000 + int(STANDIN_JOB_ID) % 10000)
    assert facts[("launcher", "env XDG_CACHE_HOME")] == f"/tmp/xdg-cache-{STANDIN_JOB_ID}"
    assert facts[("launcher", "env TRITON_CACHE_DIR")] == f"/tmp/triton-cache-{STANDIN_JOB_ID}"
    # the workflow's HF_HUB_CACHE (benchmark-tmpl.yml) passes through to the script
    assert inherited(launch) == {"HF_HUB_CACHE": "{work}/root/mnt/hf_hub_cache/"}  # sandboxed


def test_each_launcher_hands_the_script_its_own_cache_locations(fixtures: Path) -> None:
    tree = fixtures / "repo-main"
    b300 = run_launcher(tree, _point(tree, KEYS["launch_b300-nv.sh"]))
    assert inherited(b300) == {"HF_HUB_CACHE": "{work}/home/.cache/huggingface"}  # its export HF_HUB_CACHE=$HOME/...
    b200 = run_launcher(tree, _point(tree, KEYS["launch_b200-dgxc.sh"]))
    assert inherited(b200) == {  # a cluster path, sandboxed in the capture's work dir (compared as itself)
        "HF_HUB_CACHE": "{work}/root/mnt/hf_hub_cache/",
        "AIPERF_DATASET_MMAP_CACHE_DIR": "{work}/root/aiperf_mmap_cache",
    }
    assert b200.handed()["MODEL"] == b200.handed()["MODEL_PATH"]  # export MODEL="$MODEL_PATH"
    mi355x = run_launcher(tree, _point(tree, KEYS["launch_mi355x-amds.sh"]))
    assert inherited(mi355x)["VLLM_CACHE_ROOT"] == "{work}/root/it-share/gharunners/.cache/vllm"
