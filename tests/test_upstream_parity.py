"""`slurmx render` of every point of both seed keys against what InferenceX's own scripts start.

The reference is captured, not transcribed: the upstream per-model script runs with its
benchmark_lib.sh under recording stand-ins (slurmx/upstream/capture.py). Every difference
must be a row of docs/upstream-differences.yaml or of the key's recipe's own table
(jobs/differences/<recipe stem>.yaml, as `slurmx recipes check` reads them: upstream value, slurmx value,
why); a new one fails, and so does a row that no point needs any more (so removing a row that is needed
fails too).

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
from slurmx.recipes.resolve import match_values
from slurmx.submit.render import point_processes
from slurmx.submit.resolved import Resolved, resolve_points
from slurmx.upstream.capture import Upstream
from slurmx.upstream.compare import PointCompare, compare_point
from slurmx.upstream.declared import Declared, load_declared
from slurmx.upstream.inferencex import AGENTIC, upstream_for
from slurmx.upstream.launcher import inherited, run_launcher
from tests.conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "upstream-differences.yaml"
SCRIPTS = FIXTURES / "scripts"

# The reviewed scripts of the two seed keys (fixtures SOURCE.txt): PR #2597's final Kimi-K3 MTP script with its
# own benchmark_lib.sh, and for DeepSeek-V4 B200 the script of the tree its key comes from (repo-lmcache-agentix,
# PR #2153's branch lmcache/agentix @ 381f4c2b4: the key's config, image and flags from one ref), picked and run
# as `slurmx recipes check` does (upstream_for: the script its launcher starts, the env it hands over). The model
# is a stand-in checkpoint staged where the launcher's MODEL_PATH points, compared as $MODEL_PATH on both sides.
SEED_UPSTREAM = {
    "kimik3-fp4-b300-vllm-agentic-dspark-lmcache": Upstream(
        SCRIPTS / "kimik3_fp4_b300_vllm_mtp.pr2597-db0544043.sh",
        SCRIPTS / "benchmark_lib.pr2597-db0544043.sh",
        "{work}/models/Kimi-K3",
    ),
}
DSV4 = "dsv4-fp4-b200-vllm-agentic-lmcache"
DSV4_SCRIPT = FIXTURES / "repo-lmcache-agentix" / AGENTIC / "dsv4_fp4_b200_vllm.sh"
SEED_KEYS = (*SEED_UPSTREAM, DSV4)

# the seed branches' trees (fixtures SOURCE.txt), whose launchers give the launcher level
SEED_TREES = {
    "kimik3-fp4-b300-vllm-agentic-dspark-lmcache": FIXTURES / "repo-kimik3-b300-lmcache",
    "dsv4-fp4-b200-vllm-agentic-lmcache": FIXTURES / "repo-lmcache-agentix",
}


def _compare(key: str, item: Resolved) -> PointCompare:
    if key == DSV4:
        upstream = upstream_for(SEED_TREES[key], item.point)
        assert upstream.script == DSV4_SCRIPT, upstream.script  # the tree's own script, as its launcher picks it
    else:
        launch = run_launcher(SEED_TREES[key], item.point)
        upstream = replace(SEED_UPSTREAM[key], launcher_env=tuple(inherited(launch).items()), launch=launch)
    assert upstream.launch is not None and upstream.launch.why_not is None, upstream.launch
    return compare_point(key, item, upstream, point_processes)


@pytest.fixture(scope="module")
def compared() -> list[PointCompare]:
    if not SCRIPTS.exists():
        pytest.skip(f"upstream InferenceX scripts not found at {SCRIPTS}")
    inputs = load_inputs(None, None, list(SEED_KEYS))
    jobs = [(key, item) for key in SEED_KEYS for item in resolve_points(inputs.key_points(key), inputs)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda job: _compare(*job), jobs))


@pytest.fixture(scope="module")
def table() -> list[Declared]:
    """docs/upstream-differences.yaml and the seed recipes' own tables beside them (jobs/differences/)."""
    inputs = load_inputs(None, None, list(SEED_KEYS))
    stems = {inputs.recipes().find(match_values(inputs.key_points(key)[0])).path.stem for key in SEED_KEYS}  # type: ignore[union-attr]  # every seed key has a recipe
    own = [ROOT / "jobs" / "differences" / f"{stem}.yaml" for stem in sorted(stems)]
    return [row for path in (TABLE, *own) if path.is_file() for row in load_declared(path)]


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


def test_every_difference_from_upstream_is_declared(compared: list[PointCompare], table: list[Declared]) -> None:
    undeclared = _undeclared(compared, table)
    assert not undeclared, "undeclared differences from InferenceX's scripts:\n" + "\n".join(undeclared)


def test_the_dsv4_seed_key_has_its_own_reviewed_rows(table: list[Declared]) -> None:
    own = [row for row in table if DSV4 in row.keys]
    assert own and all(row.where.startswith(str(ROOT / "jobs" / "differences")) for row in own)
    assert any(row.kind == "review-bug-fixed" and not row.generated for row in own)


def test_every_declared_difference_is_still_needed(compared: list[PointCompare], table: list[Declared]) -> None:
    for n, row in enumerate(table):
        without = table[:n] + table[n + 1 :]
        assert _undeclared(compared, without), f"row {n} ({row.processes} {row.item}) covers no difference: remove it"
