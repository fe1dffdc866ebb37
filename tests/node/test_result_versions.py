"""The versions result.json names are the ones the node's lock read for what the point ran: the engine's own
build, and the build the backend's arm pins, found by its distribution (Mooncake's is not called
"mooncake"), never by the backend's name."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from pathlib import Path

import pytest

from slurmx.config.master import KvOffloadBackend
from slurmx.engines.vllm import ENGINE as VLLM
from slurmx.inputs import load_inputs
from slurmx.node import lock as run_lock
from slurmx.node.recorder import PointFailed, StageRecorder
from slurmx.node.serving_body import Member, Servers, aggregate
from slurmx.process import ServerPorts
from slurmx.results.aggregate import ReplayWindow
from slurmx.results.schema import Result
from slurmx.store.ledger import queue_point
from slurmx.store.lockfile import NodeLock, Versions
from slurmx.store.tree import ResultsTree
from slurmx.submit.resolved import resolve_points

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "data" / "aiperf" / "lmcache-replay"
KEY = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"  # its recipe has none, vllm-simple, lmcache and mooncake arms
INSTALLED = {
    "vllm": "0.32.0",
    "torch": "2.13.0",
    "lmcache": "0.5.6",
    "mooncake-transfer-engine": "0.3.11.post1",
}


def _result(tmp_path: Path, arm: str | None) -> Result:
    """The point of KEY run by `arm` (None: no offload), aggregated from real aiperf artifacts under a lock
    whose engine environment holds INSTALLED."""
    inputs = load_inputs(None, None, [KEY])
    point = inputs.points[0]
    backend = KvOffloadBackend(name=arm, version=INSTALLED.get(arm, "1.0")) if arm else None
    point = dataclasses.replace(point, kv_offloading="dram" if arm else "none", kv_offload_backend=backend)
    (item,) = resolve_points([point], inputs)
    record = item.record("s1")
    assert record.serving is not None
    run = ResultsTree(tmp_path).sweep(KEY, "s1").point(point.point_id)
    queue_point(run, record)
    shutil.copytree(SAMPLE, run.aiperf)
    lock = NodeLock(
        image=point.image, runtime="pyxis", node="node01", slurmx_version="test", versions=Versions(engine=INSTALLED)
    )
    servers = Servers(plan=None, ports=ServerPorts(engine=1), processes=[], spec=record.serving, lock=lock)  # type: ignore[arg-type]  # aggregate reads only processes
    # the sample is another point's replay: the gate may refuse it; result.json is written either way
    with contextlib.suppress(PointFailed):
        aggregate(Member(run, record, StageRecorder(run)), ReplayWindow(1.0, 2.0), servers)
    return Result.model_validate_json(run.result_json.read_text())


@pytest.mark.parametrize(
    ("arm", "backend_version"),
    [("mooncake", "0.3.11.post1"), ("lmcache", "0.5.6"), ("vllm-simple", None), (None, None)],
)
def test_the_result_names_the_installed_build_of_what_the_arm_pins(
    tmp_path: Path, arm: str | None, backend_version: str | None
) -> None:
    result = _result(tmp_path, arm)
    assert result.slurmx is not None
    assert result.slurmx.engine_version == "0.32.0"
    # vllm-simple is vLLM's own connector: it pins no distribution of its own
    assert result.slurmx.backend_version == backend_version


def test_the_engine_environment_is_probed_for_the_arms_own_build_too() -> None:
    probed = run_lock.engine_distributions(VLLM, "mooncake-transfer-engine-cuda13")
    assert probed[-1] == "mooncake-transfer-engine-cuda13"  # the CUDA 13 wheel a Mooncake arm may name
    assert {"vllm", "lmcache", "mooncake-transfer-engine"} <= set(probed)
    assert run_lock.engine_distributions(VLLM, "lmcache") == run_lock.engine_distributions(VLLM)  # once each
