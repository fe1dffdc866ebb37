"""A SIMULATOR's capture: Dynamo's mocker (`python -m dynamo.mocker --engine-type sglang`, ai-dynamo 1.6.1, no model
runs) behind Dynamo's frontend, replayed by the stack's real aiperf (benchmarks/dynamo_mocker;
tests/data/dynamo-mocker/README.md). Its /metrics are real text from a running process with SGLang's `sglang:` names,
unlike tests/data/sglang's, which are written by hand; but only a subset (no prompt/cached token counters, no HiCache
tier: the mocker refuses a host tier for SGLang), and beside Dynamo's own `dynamo_*` families, which make
InferenceX's aggregation choose its Dynamo-vLLM adapter first. So the SGLang differential runs on the export's
`sglang:` families alone, and the other test pins why.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from slurmx.results.aggregate import RunMeta, build_result
from tests.helpers.inferencex_results import POINT, Oracle, compare, env_of
from tests.helpers.points import point_from_row

MOCKER = Path(__file__).resolve().parents[1] / "data" / "dynamo-mocker"
TRACE = Path(__file__).resolve().parents[2] / "docs" / "samples" / "mooncake_trace.jsonl"
# the capture's point: the tiny model on the local cluster, its engine SGLang as the mocker simulates it
MOCKER_POINT: dict[str, Any] = {
    **POINT, "image": "SIMULATOR:ai-dynamo-1.6.1-mocker", "model": "local/tiny-llama", "model-prefix": "tiny",
    "precision": "fp32", "framework": "sglang", "runner": "cluster:local", "tp": 1, "ep": 1, "conc": 2,
    "exp-name": "tiny_tp1_conc2_kvnone",
}  # fmt: skip


def _artifacts(root: Path, keep: str | None) -> Path:
    """The capture's aiperf artifacts under root/aiperf_artifacts; with `keep`, only the metric families so named."""
    shutil.copytree(MOCKER / "aiperf_artifacts", root / "aiperf_artifacts")
    if keep is not None:
        path = root / "aiperf_artifacts" / "server_metrics_export.json"
        export = json.loads(path.read_text())
        export["metrics"] = {name: v for name, v in export["metrics"].items() if name.startswith(keep)}
        path.write_text(json.dumps(export))
    return root


def test_inferencex_reads_the_mockers_whole_export_as_dynamo_vllm(oracle: Oracle, tmp_path: Path) -> None:
    """The frontend's and the mocker's own /metrics both carry `dynamo_*` families, and InferenceX's detection tries
    its Dynamo-vLLM adapter before its SGLang one, whatever the framework; slurmx reads by the point's engine."""
    root = _artifacts(tmp_path, keep=None)
    export = json.loads((root / "aiperf_artifacts" / "server_metrics_export.json").read_text())
    ports = json.loads((MOCKER / "figures.json").read_text())
    assert set(export["summary"]["endpoints_successful"]) == {
        f"http://127.0.0.1:{ports[name]}/metrics" for name in ("frontend_port", "mocker_system_port")
    }
    result = build_result(point_from_row(MOCKER_POINT), root / "aiperf_artifacts", run=RunMeta(sweep_id="s"))
    theirs = oracle.ask(root, env_of(result), "sglang:")
    assert theirs["agg"]["server_metrics"]["adapter"] == "dynamo-vllm"
    assert result.server_metrics.adapter == "sglang"


def test_the_mockers_sglang_families_are_aggregated_as_by_inferencex(oracle: Oracle, tmp_path: Path) -> None:
    result, theirs = compare(oracle, _artifacts(tmp_path, keep="sglang:"), MOCKER_POINT)
    assert theirs["validation"] == [] and theirs["server_metrics"]["rc"] == 0, theirs
    assert theirs["agg"]["server_metrics"]["adapter"] == "sglang" == result.server_metrics.adapter
    export = json.loads((MOCKER / "aiperf_artifacts" / "server_metrics_export.json").read_text())
    (gauge,) = export["metrics"]["sglang:cache_hit_rate"]["series"]
    records = [json.loads(line) for line in (MOCKER / "aiperf_artifacts" / "profile_export.jsonl").open()]
    turns = sum(1 for line in TRACE.read_text().splitlines() if line.strip())
    # no token counters: the overall hit rate is the engine's own gauge over the window, prompt tokens the records'
    cache, tokens = result.server_metrics.cache, result.server_metrics.tokens
    assert cache.overall_cache_hit_rate == pytest.approx(gauge["stats"]["avg"])
    assert tokens.prompt_total == sum(r["metrics"]["input_sequence_length"]["value"] for r in records)
    assert tokens.requests_completed == len(records) == turns == 12
    # the simulator splits no cached tokens by tier: no GPU or host hit rate, so no HiCache evidence either
    assert cache.gpu_cache_hit_rate is None and cache.cpu_cache_hit_rate is None and cache.cached_tokens_by_source == {}
    after = (MOCKER / "mocker_metrics_after.prom").read_text()
    assert "sglang:num_requests_total" in after and "sglang:cached_tokens" not in after and "hicache" not in after
