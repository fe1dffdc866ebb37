"""`slurmx render` of every point of both seed keys against what InferenceX's own scripts start.

The reference is captured, not transcribed: the upstream per-model script runs with its
benchmark_lib.sh under recording stand-ins (tests/helpers/upstream_capture.py). Every difference
must be a row of docs/upstream-differences.yaml (upstream value, slurmx value, why); a new one fails,
and so does a row that no point needs any more (so removing a row that is needed fails too).
"""

from __future__ import annotations

import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurmx.inputs import load_inputs
from slurmx.node import provision
from slurmx.runtimes import runtime_for
from slurmx.submit.render import point_processes
from slurmx.submit.resolved import Resolved, resolve_points
from tests.conftest import FIXTURES
from tests.helpers.upstream_capture import SEED_UPSTREAM, Capture, capture
from tests.helpers.upstream_diff import (
    Declared,
    Difference,
    Facts,
    differences,
    load_declared,
    slurmx_facts,
    upstream_facts,
)

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "upstream-differences.yaml"
STANDIN_TORCH_LIB = "/standin/torch/lib"
_EXPORT = re.compile(r"export (\w+)=(\S*)$")


@dataclass
class PointCompare:
    key: str
    resolved: Resolved
    capture: Capture
    diffs: list[Difference]


def _job_env(item: Resolved) -> dict[str, str]:
    """What the sbatch preamble exports for every process of the job."""
    lines = runtime_for(item.profile, item.point.image).setup_lines()
    return {m.group(1): m.group(2) for line in lines if (m := _EXPORT.match(line))}


def _provision_facts(item: Resolved) -> Facts:
    """The job body's provisioning step (slurmx.node.provision), as facts: what it installs, checks and
    downloads, named as the upstream capture names the script's own actions."""
    assert item.serving is not None
    steps = provision.plan(item.serving, runtime_for(item.profile, item.point.image))
    return {("provision", s.item): s.value for s in steps}


def _compare(key: str, item: Resolved, scripts: Path) -> PointCompare:
    with tempfile.TemporaryDirectory(prefix="slurmx-upstream-") as work:
        cap = capture(item.point, SEED_UPSTREAM[key], scripts, Path(work))
        # the torch the stand-in python3 reports: the directory provisioning finds on the node
        paths = {f"{work}/result": "$RESULT_DIR", work: "<work>", STANDIN_TORCH_LIB: provision.REVIEW_TORCH_LIB}
        upstream = upstream_facts(cap, paths)
    assert item.serving is not None
    ours = slurmx_facts(point_processes(item), _job_env(item), _provision_facts(item))
    return PointCompare(key, item, cap, differences(upstream, ours))


@pytest.fixture(scope="module")
def compared() -> list[PointCompare]:
    scripts = FIXTURES / "scripts"
    if not scripts.exists():
        pytest.skip(f"upstream InferenceX scripts not found at {scripts}")
    inputs = load_inputs(None, None, list(SEED_UPSTREAM))
    jobs = [(key, item) for key in SEED_UPSTREAM for item in resolve_points(inputs.key_points(key), inputs)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda job: _compare(job[0], job[1], scripts), jobs))


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
