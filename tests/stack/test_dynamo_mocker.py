"""SIMULATOR (issue #24): slurmx's job body for an SGLang point, submitted to the real local Slurm, with Dynamo's mocker
as the engine's launcher (scripts/dynamo-mocker-sglang: SGLang's argv and endpoints in front of dynamo.frontend and
dynamo.mocker --engine-type sglang), replayed by the stack's aiperf to a result.json that InferenceX's aggregation
agrees with. Labelled as a simulator in the record and the result (image SIMULATOR-dynamo-mocker, runner
cluster:local-mocker) and in the engine's log.

Not in CI's default run: it needs a venv with ai-dynamo (docs/local-stack.md, "Dynamo mocker"), named by
SLURMX_DYNAMO_PYTHON; without it the test skips. 41-70 s on the 2-core machine (one point: 6 s to the engine's
health, 29 s of replay).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from slurmx.results import gate
from slurmx.results.schema import Result
from slurmx.store import ledger
from slurmx.store.tree import PointDir
from tests.helpers.inferencex_results import Oracle, compare
from tests.stack.conftest import ROOT, StackEnv, job_processes

pytestmark = pytest.mark.stack

KEY = "tiny-fp32-local-sglang-agentic-simulator"
RECIPE = ROOT / "tests/data/dynamo-mocker/tiny_fp32_local_sglang_simulator.yaml"
IMAGE, RUNNER = "SIMULATOR-dynamo-mocker", "cluster:local-mocker"


@pytest.fixture
def dynamo_python() -> Path:
    named = os.environ.get("SLURMX_DYNAMO_PYTHON")
    if not named:
        pytest.skip("SLURMX_DYNAMO_PYTHON names no venv with ai-dynamo (docs/local-stack.md, 'Dynamo mocker')")
    if not Path(named).exists():
        pytest.fail(f"SLURMX_DYNAMO_PYTHON={named} does not exist")
    return Path(named)


def _mocker_cluster(stack_env: StackEnv, python: Path) -> None:
    """The local profile with the Dynamo venv as the engine's interpreter and the SGLang shim on its path."""
    path = stack_env.configs / "clusters.yaml"
    clusters = yaml.safe_load(path.read_text())
    profile = copy.deepcopy(clusters["hardware"]["cluster:local"])
    runtime = profile["runtime"]
    runtime["engine-python"] = str(python)
    runtime["engine-pythonpath"] = str(ROOT / "scripts/dynamo-mocker-sglang")
    runtime.pop("mooncake-master-bin", None)
    profile["node"]["numa-policy"] = "none"  # no backend server to place
    clusters["hardware"][RUNNER] = profile
    path.write_text(yaml.safe_dump(clusters, sort_keys=False))
    shutil.copy(RECIPE, stack_env.jobs / RECIPE.name)
    search = [{"tp": 1, "kv-offloading": "none", "conc-list": [2]}]
    doc = {
        KEY: {
            "image": IMAGE,
            "model": "local/tiny-llama",
            "model-prefix": "tiny",
            "runner": RUNNER,
            "precision": "fp32",
            "framework": "sglang",
            "multinode": False,
            "scenarios": {"agentic-coding": [{"dram-utilization": 1.0, "search-space": search}]},
        }
    }
    (stack_env.configs / f"{KEY}-master.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def test_an_sglang_point_runs_the_job_body_with_the_mocker_to_a_result(
    dynamo_python: Path, stack_env: StackEnv
) -> None:
    _mocker_cluster(stack_env, dynamo_python)
    report = stack_env.submit(KEY)
    status = stack_env.wait_for(
        KEY, lambda s: all(p["state"] in ("completed", "failed", "cancelled", "timeout") for p in s), timeout_s=300
    )
    assert [p["state"] for p in status] == ["completed"], json.dumps(status, indent=1)
    (point,) = status
    pdir = Path(report["sweep-path"]) / "points" / point["point_id"]
    result = Result.model_validate_json((pdir / "result.json").read_text())
    assert gate.check(result) is None
    # labelled a simulator in the record, the result and the engine's log; no SGLang ran, so none is recorded
    record = ledger.read_point(PointDir(pdir))
    assert (record.point.image, record.point.runner) == (IMAGE, RUNNER) == (result.image, result.hw)
    assert result.framework == "sglang" and result.slurmx is not None and result.slurmx.engine_version is None
    engine_log = (pdir / "logs" / "engine.log").read_text(errors="replace")
    assert engine_log.startswith("[SIMULATOR dynamo.mocker] serving tiny on 127.0.0.1:")
    assert "backend: Sglang, num_gpu_blocks: 16384, block_size: 16" in engine_log
    lock = json.loads((pdir / "lock.json").read_text())
    assert "sglang" not in lock["versions"]["engine"]
    # the SGLang engine module's argv reached the shim as it renders for SGLang
    engine_cmd = (pdir / "commands" / "engine.txt").read_text()
    assert f"{dynamo_python} -m sglang_mocker --model-path " in engine_cmd and "--page-size 16" in engine_cmd
    # aiperf scraped the shim's /metrics: the mocker's sglang: families alone. They appear only with the first
    # finished request, so the window's counter may lack the requests done before aiperf's first scrape of them
    export = json.loads((pdir / "aiperf" / "server_metrics_export.json").read_text())
    assert export["metrics"] and all(name.startswith("sglang:") for name in export["metrics"])
    turns = sum(1 for line in (pdir / "trace.jsonl").read_text().splitlines() if line.strip())
    (served,) = export["metrics"]["sglang:num_requests"]["series"]
    assert 0 < served["stats"]["total"] <= turns == result.server_metrics.tokens.requests_completed
    assert result.server_metrics.adapter == "sglang" and result.server_metrics.cache.cached_tokens_by_source == {}
    # InferenceX's own judging and aggregation on the point's aiperf artifacts
    judged = stack_env.root / "oracle"
    shutil.copytree(pdir / "aiperf", judged / "aiperf_artifacts")
    oracle = Oracle()
    try:
        compare(oracle, judged, {**record.point.row(), "point-id": record.point.point_id, "config-key": KEY})
    finally:
        oracle.close()
    assert stack_env.wait_gone(point["job_id"]) == [], job_processes(point["job_id"])
