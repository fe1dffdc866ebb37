"""An InferenceX checkout: which agentic script its launcher picks for a point, and what it exports."""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

from slurmx import engines
from slurmx.errors import UserError
from slurmx.plan import Point
from slurmx.upstream.capture import AIPERF_SUBMODULE, Upstream
from slurmx.upstream.launcher import inherited, run_launcher

AGENTIC = Path("benchmarks/single_node/agentic")
LIB = Path("benchmarks/benchmark_lib.sh")
# where InferenceX's container runs its benchmark scripts (INFMAX_CONTAINER_WORKSPACE's default)
WORKSPACE = "/workspace"


def script_candidates(point: Point) -> list[str]:
    """The launchers' pick (launch_b200-dgxc.sh, launch_b300-nv.sh): the framework-tagged name, else the
    historical name without the engine (the engine's script_suffix); the GPU is the cluster label's first part."""
    gpu = point.runner.removeprefix("cluster:").split("-")[0]
    base = f"{point.exp_name.split('_')[0]}_{point.precision}_{gpu}"
    mtp = "_mtp" if point.spec_decoding == "mtp" else ""
    engine = engines.REGISTRY.get(point.engine)
    fallback = engine.script_suffix if engine is not None else ""  # a framework slurmx has no engine for: bare
    return [f"{base}_{point.framework}{mtp}.sh", f"{base}{fallback}{mtp}.sh"]


def script_for(tree: Path, point: Point) -> Path:
    for name in script_candidates(point):
        if (tree / AGENTIC / name).is_file():
            return tree / AGENTIC / name
    raise UserError(
        f"{point.config_key}: no agentic script in {tree / AGENTIC} (looked for {', '.join(script_candidates(point))})"
    )


def upstream_for(tree: Path, point: Point, shm_gib: int | None = None) -> Upstream:
    """What a point runs upstream, read from a run of its launcher (upstream.launcher): the script its
    container srun starts, whether it hands the script MODEL=$MODEL_PATH (b200-dgxc does), and the cache
    locations it hands over. The model is staged as a stand-in checkpoint in the capture's work dir
    (compared as $MODEL_PATH). A launcher that did not run leaves the script to script_for and hands nothing.
    `shm_gib`: the point's cluster node's /dev/shm (its profile's node.shm-gib), which the capture's df reports."""
    model_path = "{work}/models/" + point.model.rsplit("/", 1)[-1]
    launch = run_launcher(tree, point)
    picked = launch.script()
    script = tree / picked if picked and (tree / picked).is_file() else script_for(tree, point)
    handed = launch.handed()
    if launch.why_not is None and "MODEL_PATH" not in handed:
        model_path = ""  # the launcher stages no weights (mi325x-amds): the script fetches $MODEL into the hub cache
    rewrites_model = "MODEL_PATH" in handed and handed.get("MODEL") == handed["MODEL_PATH"]
    exports = ((("MODEL", model_path),) if rewrites_model else ()) + tuple(inherited(launch).items())
    at_workspace = launch.why_not is None and launch.checkout_at(WORKSPACE)
    return Upstream(script, tree / LIB, model_path, exports, launch, shm_gib, at_workspace)


def content_digest(*files: Path) -> str:
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.read_bytes())
    return digest.hexdigest()


def git_commit(tree: Path) -> str | None:
    """The checkout's commit, when DIR is a git checkout (None otherwise)."""
    if not (tree / ".git").exists():
        return None
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


AIPERF = AIPERF_SUBMODULE  # InferenceX's aiperf fork, a submodule of its tree


@functools.cache  # one git call per checkout, not one per point
def aiperf_revision(tree: Path) -> str | None:
    """The commit of the aiperf fork DIR replays with: its submodule's gitlink (a git checkout), else None."""
    if not (tree / ".git").exists():
        return None
    done = subprocess.run(["git", "-C", str(tree), "ls-tree", "HEAD", AIPERF], capture_output=True, text=True,
                          check=False)  # fmt: skip
    fields = done.stdout.split()
    return fields[2] if len(fields) >= 3 and fields[1] == "commit" else None
