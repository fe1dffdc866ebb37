"""A disaggregated point's shape in result.json against InferenceX's own _gpu_shape (process_agentic_result.py,
imported in-process from the fixture tree, reading the environment InferenceX's multinode launchers export): each
side's fields, the GPU count, tp, ep and dp_attention, on shapes whose decode side has pp, dcp and pcp above 1 (an
aggregated config drops them), a decode side of exactly one GPU (kept), and workers naming their hardware."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurmx.results.aggregate import RunMeta, build_result
from tests.helpers.inferencex_aggregation import module
from tests.helpers.inferencex_results import POINT, multinode_env
from tests.helpers.points import point_from_row


def _worker(num: int, tp: int, ep: int = 1, dp_attn: bool = False, **more: Any) -> dict[str, Any]:
    return {"num-worker": num, "tp": tp, "ep": ep, "dp-attn": dp_attn, **more}


WIDE = {"pp": 2, "dcp-size": 2, "pcp-size": 3}
SHAPES = {
    "aggregated, decode wide": (_worker(2, 4, 2), _worker(0, 8, 8, True, **WIDE)),
    "decode of one GPU": (_worker(1, 2, 4), _worker(1, 1)),
    "both sides wide": (_worker(1, 4, 1, False, **WIDE), _worker(3, 2, 2, False, pp=3, **{"pcp-size": 2})),
    "decode wider ep, dp attention on prefill": (_worker(2, 2, 2, True), _worker(1, 8, 16)),
    "heterogeneous": (_worker(1, 4, hardware="h200"), _worker(2, 8, hardware="b300")),
}
FIELDS = [
    f"{side}_{name}"
    for side in ("prefill", "decode")
    for name in ("num_workers", "tp", "pp", "dcp_size", "pcp_size", "ep", "dp_attention", "hw")
] + ["num_prefill_gpu", "num_decode_gpu"]


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
def test_a_disaggregated_points_shape_is_inferencexs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    prefill, decode = SHAPES[shape]
    row = {**POINT, "prefill": prefill, "decode": decode, "disagg": True}
    for name, value in multinode_env(row).items():
        monkeypatch.setenv(name, value)
    fields, gpus, tp, ep, dp_attention = module("process_agentic_result")._gpu_shape()
    record = {"metadata": {"request_start_ns": 10**9, "request_end_ns": 2 * 10**9}, "metrics": {}, "error": None}
    (tmp_path / "profile_export.jsonl").write_text(json.dumps(record) + "\n")
    result = build_result(point_from_row(row), tmp_path, run=RunMeta(sweep_id="s")).dump()
    assert {k: result.get(k) for k in FIELDS} == {k: fields.get(k) for k in FIELDS}
    assert (result["num_gpus"], result["tp"], result["ep"], result["dp_attention"]) == (gpus, tp, ep, dp_attention)
