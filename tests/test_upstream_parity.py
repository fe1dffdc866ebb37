"""`slurmx render` of every point of both seed keys against what InferenceX's own scripts start.

The reference is captured, not transcribed: the upstream per-model script runs with its
benchmark_lib.sh under recording stand-ins (slurmx/upstream/capture.py). Every difference
must be a row of docs/upstream-differences.yaml (upstream value, slurmx value, why); a new one fails,
and so does a row that no point needs any more (so removing a row that is needed fails too).

The launcher level too: each seed branch's own runners/launch_<cluster>.sh runs under stand-ins
(slurmx/upstream/launcher.py) for every point; its Slurm request, container and exports are compared with
the point's sbatch request, pyxis flags and job env, and the cache locations it hands the container are
the script's (HF_HUB_CACHE). The seed scripts otherwise keep the env their reviews compared.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from slurmx.inputs import load_inputs
from slurmx.submit.render import point_processes
from slurmx.submit.resolved import Resolved, resolve_points
from slurmx.upstream.capture import Upstream
from slurmx.upstream.compare import PointCompare, compare_point
from slurmx.upstream.declared import Declared, load_declared
from slurmx.upstream.launcher import inherited, run_launcher
from tests.conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "upstream-differences.yaml"
SCRIPTS = FIXTURES / "scripts"

# The reviewed scripts of the two seed keys (fixtures SOURCE.txt): PR #2597's final Kimi-K3 MTP script,
# and the DeepSeek-V4 B200 script PR #2231 merged, each with its own benchmark_lib.sh. The model is a stand-in
# checkpoint staged where the launcher's MODEL_PATH points (slurmx recipes check does the same), compared as
# $MODEL_PATH on both sides.
SEED_UPSTREAM = {
    "kimik3-fp4-b300-vllm-agentic-dspark-lmcache": Upstream(
        SCRIPTS / "kimik3_fp4_b300_vllm_mtp.pr2597-db0544043.sh",
        SCRIPTS / "benchmark_lib.pr2597-db0544043.sh",
        "{work}/models/Kimi-K3",
    ),
    "dsv4-fp4-b200-vllm-agentic-lmcache": Upstream(
        SCRIPTS / "dsv4_fp4_b200_vllm.main-01e9e73a2.sh",
        SCRIPTS / "benchmark_lib.pr2231.sh",
        "{work}/models/deepseek-v4-pro",
    ),
}

# the seed branches' trees (fixtures SOURCE.txt), whose launchers give the launcher level
SEED_TREES = {
    "kimik3-fp4-b300-vllm-agentic-dspark-lmcache": FIXTURES / "repo-kimik3-b300-lmcache",
    "dsv4-fp4-b200-vllm-agentic-lmcache": FIXTURES / "repo-lmcache-agentix",
}


def _compare(key: str, item: Resolved) -> PointCompare:
    launch = run_launcher(SEED_TREES[key], item.point)
    assert launch.why_not is None, launch.why_not
    upstream = replace(SEED_UPSTREAM[key], launcher_env=tuple(inherited(launch).items()), launch=launch)
    return compare_point(key, item, upstream, point_processes)


@pytest.fixture(scope="module")
def compared() -> list[PointCompare]:
    if not SCRIPTS.exists():
        pytest.skip(f"upstream InferenceX scripts not found at {SCRIPTS}")
    inputs = load_inputs(None, None, list(SEED_UPSTREAM))
    jobs = [(key, item) for key in SEED_UPSTREAM for item in resolve_points(inputs.key_points(key), inputs)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda job: _compare(*job), jobs))


def _undeclared(compared: list[PointCompare], table: list[Declared]) -> list[str]:
    return [
        f"{c.key} {c.resolved.point.exp_name} ({c.resolved.point.parallelism}): {d.line()}"
        for c in compared
        for d in c.diffs
        if not any(row.covers(c.key, d) for row in table)
    ]


def test_upstream_scripts_ran_to_the_end(compared: list[PointCompare]) -> None:
    for c in compared:
        assert c.capture.returncode == 0, f"{c.key} {c.resolved.point.exp_name}: {c.capture.log[-2000:]}"
        assert c.capture.named("aiperf"), f"{c.key}: the upstream script never started the replay"


def test_the_launcher_level_is_compared_on_every_point(compared: list[PointCompare]) -> None:
    for c in compared:
        assert c.upstream[("launcher", "slurm --partition")] == c.ours[("launcher", "slurm --partition")], c.where()
        assert ("launcher", "container --container-image") in c.upstream, c.where()


def test_both_seed_keys_cover_tp_and_dep_points(compared: list[PointCompare]) -> None:
    shapes = {(c.key, c.resolved.point.parallelism) for c in compared}
    assert ("dsv4-fp4-b200-vllm-agentic-lmcache", "TP8") in shapes
    assert ("dsv4-fp4-b200-vllm-agentic-lmcache", "DEP8") in shapes
    assert len(compared) == 14


def test_every_difference_from_upstream_is_declared(compared: list[PointCompare]) -> None:
    undeclared = _undeclared(compared, load_declared(TABLE))
    assert not undeclared, "undeclared differences from InferenceX's scripts:\n" + "\n".join(undeclared)


def test_every_declared_difference_is_still_needed(compared: list[PointCompare]) -> None:
    table = load_declared(TABLE)
    for n, row in enumerate(table):
        without = table[:n] + table[n + 1 :]
        assert _undeclared(compared, without), f"row {n} ({row.processes} {row.item}) covers no difference: remove it"
