"""vLLM's OpenAI-compatible server."""

from __future__ import annotations

import json
from typing import Any

from slurmx.engines.base import NodePart
from slurmx.plan import Point


class VLLM:
    name = "vllm"
    computed_flags = frozenset({
        "--tensor-parallel-size", "--data-parallel-size", "--enable-expert-parallel", "--pipeline-parallel-size",
        "--decode-context-parallel-size", "--max-num-seqs", "--kv-transfer-config", "--host", "--port",
        "--served-model-name", "--model", "--data-parallel-size-local", "--data-parallel-address",
        "--data-parallel-rpc-port", "--data-parallel-start-rank", "--headless", "--nnodes", "--node-rank",
        "--master-addr", "--master-port",
    })  # fmt: skip
    metrics_path = "/metrics"
    # mtp: the recipe's own --speculative-config; draft_model needs a second model no recipe names yet.
    spec_methods = frozenset({"none", "mtp"})

    def parallel_flags(self, point: Point) -> list[str]:
        """DEP runs data-parallel attention with expert parallelism. An aggregated multinode point runs its
        workers as the data-parallel ranks of one engine (per-node flags: node_flags)."""
        if point.multinode:
            assert point.prefill is not None
            worker = point.prefill
            flags = ["--tensor-parallel-size", str(worker.tp), "--data-parallel-size", str(worker.num_worker)]
            if worker.ep > 1:
                flags.append("--enable-expert-parallel")
            if worker.pp > 1:
                flags += ["--pipeline-parallel-size", str(worker.pp)]
            return flags
        return server_parallel_flags(point.tp, point.ep, point.dp_attn, point.pp, point.dcp_size)

    def argv(
        self, head: list[str], model: str, model_flag: str | None, served_model_name: str, port: int,
        flags: list[str], connector: dict[str, Any] | None,
    ) -> list[str]:  # fmt: skip
        argv = [*head, *([model_flag, model] if model_flag else [model])]
        argv += ["--served-model-name", served_model_name, "--host", "127.0.0.1", "--port", str(port), *flags]
        if connector is not None:
            argv += ["--kv-transfer-config", json.dumps(connector, separators=(",", ":"))]
        return argv

    def node_flags(self, part: NodePart, nodes: int, ranks_per_node: int) -> list[str]:
        """One node's part of a multinode engine: the head serves the API, the others are headless. Whole
        ranks per node: each node starts its own ranks, which register over the data-parallel RPC port. A
        rank wider than a node: one torch.distributed world over every node (master on the head), vLLM's
        --nnodes/--node-rank launch, each rank's first node running its engine core."""
        flags = ["--data-parallel-address", part.head_address, "--data-parallel-rpc-port", str(part.rpc_port)]
        if ranks_per_node:
            flags = ["--data-parallel-size-local", str(ranks_per_node), *flags]
            if part.index:
                flags += ["--headless", "--data-parallel-start-rank", str(part.index * ranks_per_node)]
            return flags
        flags += ["--nnodes", str(nodes), "--node-rank", str(part.index)]
        flags += ["--master-addr", part.head_address, "--master-port", str(part.master_port)]
        return [*flags, "--headless"] if part.index else flags

    def node_env(self, part: NodePart) -> dict[str, str]:
        # vLLM otherwise advertises the interface of its default route, which on a node with a management
        # network beside the fabric may not be the one the other nodes reach: Slurm's NodeAddr is.
        return {"VLLM_HOST_IP": part.address} if part.address else {}

    def cache_reset_path(self) -> str | None:
        # needs VLLM_SERVER_DEV_MODE=1; reset_external also clears the connector's view
        return "/reset_prefix_cache?reset_external=true"


ENGINE = VLLM()


def server_parallel_flags(tp: int, ep: int, dp_attn: bool, pp: int = 1, dcp_size: int = 1) -> list[str]:
    """vLLM's parallel flags of one server (a single-node point, or one disaggregated worker): DEP runs
    data-parallel attention with expert parallelism, otherwise tensor parallelism (experts when ep > 1)."""
    if dp_attn:
        flags = ["--tensor-parallel-size", "1", "--data-parallel-size", str(tp), "--enable-expert-parallel"]
    else:
        flags = ["--tensor-parallel-size", str(tp)]
        if ep > 1:
            flags.append("--enable-expert-parallel")
    if pp > 1:
        flags += ["--pipeline-parallel-size", str(pp)]
    if dcp_size > 1:
        flags += ["--decode-context-parallel-size", str(dcp_size)]
    return flags
