"""The Dynamo vLLM disaggregated key's processes (submit/disagg.py, the workers from engines.DISAGG_WORKERS): built as argv, rendered by `slurmx render`,
kept in tests/golden/, and refused by submit with the reason (KV transfer needs GPUs and RDMA)."""

from __future__ import annotations

import re

import pytest

from slurmx import engines
from slurmx.commands.common import load_points
from slurmx.config.master import WorkerSpec
from slurmx.errors import UserError
from slurmx.submit import disagg
from slurmx.submit.resolved import check_submittable
from tests.helpers.golden import _DefaultInputs, golden_path

KEY = "dsv4-fp4-gb300-dynamo-vllm-agentic"


def _points(text: str) -> dict[str, str]:
    blocks = re.split(r"^(?=# point )", text, flags=re.M)
    return {b.split()[3]: b for b in blocks if b.startswith("# point ")}


def test_worker_argv_names_its_role_parallelism_and_connector() -> None:
    workers = engines.disagg_workers("dynamo-vllm")
    assert workers is not None
    dep4 = WorkerSpec(num_worker=1, tp=4, ep=4, dp_attn=True)
    argv = workers.worker_argv("prefill", dep4, "/models/m", "org/m", "nixl")
    assert argv[:3] == ["python3", "-m", "dynamo.vllm"]
    assert argv[argv.index("--disaggregation-mode") + 1] == "prefill"
    assert "--tensor-parallel-size 1 --data-parallel-size 4 --enable-expert-parallel" in " ".join(argv)
    assert argv[-2:] == ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}']
    tp4 = WorkerSpec(num_worker=6, tp=4, ep=1, dp_attn=False)
    tp4_argv = workers.worker_argv("decode", tp4, "/models/m", "org/m", "nixl")
    assert tp4_argv[tp4_argv.index("--disaggregation-mode") + 2 : -2] == ["--tensor-parallel-size", "4"]
    assert disagg.frontend_argv(8888, kv_routing=True)[-2:] == ["--router-mode", "kv"]
    assert "--router-mode" not in disagg.frontend_argv(8888, kv_routing=False)


def test_rendered_1p6d_points_place_every_role_on_its_node() -> None:
    points = _points(golden_path(KEY).read_text())
    one_p_six_d = [b for name, b in points.items() if "p1x4ep4dpa_d6x4" in name]
    assert len(one_p_six_d) == 2
    for block in one_p_six_d:
        assert "# submit refuses: KV transfer between prefill and decode workers" in block
        assert "x7 nodes" in block
        titles = re.findall(r"^## (node \d+: \S+)", block, flags=re.M)
        assert titles == [
            "node 0: etcd", "node 0: nats", "node 0: frontend", "node 0: prefill-0",
            *(f"node {n}: decode-{n - 1}" for n in range(1, 7)),
        ]  # fmt: skip
        assert block.count("--disaggregation-mode decode") == 6 and block.count("--disaggregation-mode prefill") == 1
        assert block.count('"kv_connector":"NixlConnector"') == 7
        assert block.count("VLLM_NIXL_SIDE_CHANNEL_HOST='$NODE_ADDRESS'") == 7
        assert "ETCD_ENDPOINTS='http://$HEAD_ADDRESS:2379'" in block
        assert "python3 -m dynamo.frontend --http-host 0.0.0.0 --http-port 8888 --router-mode kv" in block


def test_a_worker_wider_than_a_node_is_listed_refused() -> None:
    points = _points(golden_path(KEY).read_text())
    block = next(b for name, b in points.items() if "d1x8ep8dpa" in name)
    assert "# refused: a decode worker spanning nodes" in block
    assert "dynamo.vllm" not in block


def test_submit_refuses_with_the_reason() -> None:
    inputs = load_points(_DefaultInputs(), [KEY])  # type: ignore[arg-type]  # reads only .config, .clusters and .inferencex
    with pytest.raises(UserError, match="needs GPUs and RDMA"):
        check_submittable(inputs.key_points(KEY))
