"""InferenceX's own result judging as an oracle, and slurmx's verdict and aggregate compared with it.

The oracle process is tests/helpers/inferencex_results_oracle.py (InferenceX's modules imported from its
tree, never copied); the differential test (tests/results) and the end-to-end stack test both compare here.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

from slurmx import engines
from slurmx.results import gate
from slurmx.results.aggregate import RunMeta, build_result
from slurmx.results.schema import Result
from tests.conftest import FIXTURES
from tests.helpers.points import point_from_row

REPO = FIXTURES / "repo-main"
THRESHOLD = 0.10
POINT: dict[str, Any] = {
    "image": "test/image:0.1", "model": "test-model", "model-prefix": "test/prefix", "precision": "fp4",
    "framework": "vllm", "runner": "b200-x4", "tp": 4, "pp": 1, "dcp-size": 1, "pcp-size": 1, "ep": 1,
    "dp-attn": False, "spec-decoding": "none", "conc": 8, "kv-offloading": "none", "total-cpu-dram-gb": 0,
    "duration": 3600, "exp-name": "test_tp4_conc8_kvnone", "scenario-type": "agentic-coding", "point-id": "0123456789ab",
}  # fmt: skip
# InferenceX's fields slurmx words differently, each with why (docs: results/README.md)
NOT_COMPARED = {"warnings"}  # slurmx's names the scrape it lacked too; InferenceX's names only the export


class Oracle:
    def __init__(self) -> None:
        helper = Path(__file__).with_name("inferencex_results_oracle.py")
        self.proc = subprocess.Popen(
            [sys.executable, str(helper), str(REPO)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=30)

    def ask(self, result_dir: Path, env: dict[str, str], prefix: str = "vllm:") -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        case = {"result_dir": str(result_dir), "threshold": THRESHOLD, "prefix": prefix, "env": env}
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()
        answer: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return answer


def env_of(result: Result) -> dict[str, str]:
    """The environment InferenceX's processor reads the point's identity from, for slurmx's point."""
    backend = result.kv_offload_backend
    return {
        "RUNNER_TYPE": result.hw, "CONC": str(result.conc), "IMAGE": result.image,
        "RECIPE_FINGERPRINT": result.recipe_fingerprint, "MODEL": result.model,
        "MODEL_PREFIX": result.infmax_model_prefix, "FRAMEWORK": result.framework, "PRECISION": result.precision,
        "TP": str(result.tp), "PP_SIZE": str(result.pp or 1), "DCP_SIZE": str(result.dcp_size or 1),
        "PCP_SIZE": str(result.pcp_size or 1), "EP_SIZE": str(result.ep), "DP_ATTENTION": result.dp_attention,
        "KV_OFFLOADING": result.kv_offloading, "KV_OFFLOAD_BACKEND": backend.name if backend else "",
        **({"KV_OFFLOAD_BACKEND_METADATA": json.dumps(backend.model_dump())} if backend else {}),
        "TOTAL_CPU_DRAM_GB": str(result.allocated_cpu_dram_gb or 0), "SPEC_DECODING": result.spec_decoding,
        "DISAGG": "false", "IS_MULTINODE": "false",
    }  # fmt: skip


def multinode_env(point: dict[str, Any]) -> dict[str, str]:
    """What InferenceX's multinode launchers export for a disaggregated point: each side's workers, shape and
    hardware (from the point's config row, never from slurmx's result)."""
    env = {"IS_MULTINODE": "true", "DISAGG": str(point.get("disagg", True)).lower()}
    for side in ("prefill", "decode"):
        worker, up = point[side], side.upper()
        env |= {
            f"{up}_NUM_WORKERS": str(worker["num-worker"]), f"{up}_TP": str(worker["tp"]),
            f"{up}_PP_SIZE": str(worker.get("pp", 1)), f"{up}_DCP_SIZE": str(worker.get("dcp-size", 1)),
            f"{up}_PCP_SIZE": str(worker.get("pcp-size", 1)), f"{up}_EP": str(worker.get("ep", 1)),
            f"{up}_DP_ATTN": str(worker.get("dp-attn", False)).lower(),
            **({f"{up}_HARDWARE": worker["hardware"]} if worker.get("hardware") else {}),
        }  # fmt: skip
    return env


def same(theirs: Any, mine: Any, where: str = "") -> list[str]:
    """Where `mine` differs from `theirs` on every key InferenceX wrote (None stands for an absent key)."""
    if isinstance(theirs, dict):
        mine = mine if isinstance(mine, dict) else {}
        return [d for k, v in theirs.items() for d in same(v, mine.get(k), f"{where}.{k}")]
    if isinstance(theirs, list):
        if not isinstance(mine, list) or len(mine) != len(theirs):
            return [f"{where}: {mine!r} != {theirs!r}"]
        return [d for i, (a, b) in enumerate(zip(theirs, mine)) for d in same(a, b, f"{where}[{i}]")]
    if isinstance(theirs, (int, float)) and not isinstance(theirs, bool) and isinstance(mine, (int, float)):
        return [] if math.isclose(theirs, mine, rel_tol=1e-4, abs_tol=1e-5) else [f"{where}: {mine!r} != {theirs!r}"]
    return [] if theirs == mine else [f"{where}: {mine!r} != {theirs!r}"]


def compare(oracle: Oracle, result_dir: Path, point: dict[str, Any] | None = None) -> tuple[Result, dict[str, Any]]:
    """slurmx's result and verdict against InferenceX's, on one result_dir/aiperf_artifacts."""
    result = build_result(point_from_row(point or POINT), result_dir / "aiperf_artifacts", run=RunMeta(sweep_id="s"))
    row = point or POINT
    # the engine's required metric prefix, as its InferenceX scripts export it (AIPERF_REQUIRED_SERVER_METRIC_PREFIX)
    prefix = (engines.REGISTRY.get(str(row["framework"])) or engines.default()).metrics.required_prefix or "vllm:"
    env = env_of(result) | (multinode_env(row) if "prefill" in row else {})
    theirs = oracle.ask(result_dir, env, prefix)
    meta = result.slurmx
    assert meta is not None
    # the verdict build_result wrote into the result (what the node and rebuild keep), and the gate agrees
    written = (
        gate.Refusal(meta.invalid_rule, meta.invalid_reason) if meta.invalid_rule and meta.invalid_reason else None
    )
    assert written == gate.judge(result, max_error_rate=THRESHOLD)
    mine = written if written is not None and written.rule.startswith("inferencex-") else None
    expected = theirs["validation"]
    if expected:
        assert mine is not None and mine.reason == expected[0], (mine, expected)
    elif theirs["server_metrics"]["rc"] != 0:
        assert mine is not None and mine.rule == gate.INFERENCEX_SERVER_METRICS, (mine, theirs["server_metrics"])
        assert mine.reason in theirs["server_metrics"]["stderr"], (mine, theirs["server_metrics"])
    else:
        assert mine is None, (mine, theirs)
    if "agg" in theirs:
        ours = result.inferencex()
        diffs = [d for k, v in theirs["agg"].items() if k not in NOT_COMPARED for d in same(v, ours.get(k), k)]
        assert diffs == [], diffs
    return result, theirs
