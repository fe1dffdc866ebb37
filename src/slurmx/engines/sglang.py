"""SGLang's server (`python3 -m sglang.launch_server`): every SGLang flag, metric name, log line and rule slurmx knows.

The argv is InferenceX's single-node agentic scripts' (benchmarks/single_node/agentic/*sglang*.sh): the model by
--model-path, parallelism by --tp / --ep-size, data-parallel attention by --dp TP --enable-dp-attention, and
speculative decoding (NEXTN/EAGLE MTP) by the recipe's own --speculative-* flags. Its host-memory KV tier,
HiCache, is a backend (backends/hicache.py) whose settings become SGLang's --enable-hierarchical-cache flags here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import slurmx.engines.dynamo as dynamo
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
from slurmx.flags import Flags
from slurmx.plan import Point

HIERARCHICAL = "--enable-hierarchical-cache"  # SGLang's own host-memory tier (HiCache) on
HICACHE_SIZED = ("--hicache-size", "--hicache-ratio")  # its host pool: GB per rank, or a ratio of the device pool
SERVER_MODULE = "sglang.launch_server"
ROUTER_MODULE = "sglang_router.launch_router"  # sglang-router's, a request router of its own process
# every spelling SGLang's server arguments take for the parallel sizes slurmx sets (--tp, --dp, --ep-size): a recipe
# may set none of them (the long ones are what some scripts pass: qwen3.5_fp8_mi300x_mtp.sh --tensor-parallel-size)
PARALLEL_ALIASES = (
    "--tp", "--tp-size", "--tensor-parallel-size", "--dp", "--dp-size", "--data-parallel-size",
    "--ep", "--ep-size", "--expert-parallel-size", "--pp-size", "--pipeline-parallel-size",
)  # fmt: skip
# counter names without the `_total` suffix (aiperf's export strips it; the raw text keeps it). SGLang's
# production metrics (docs.sglang.io references/production_metrics): cached prompt tokens by cache_source
# (device | host | storage_<backend>), token usage of the device pool, requests done.
METRICS = EngineMetrics(
    prefix="sglang:",
    required_prefix="sglang:",  # what InferenceX's SGLang scripts set (AIPERF_REQUIRED_SERVER_METRIC_PREFIX)
    # its hit rates are cached_tokens by cache_source over prompt_tokens (tier_label), as InferenceX's adapter has
    # them; it reports no hits/queries pair of its own
    prefix_queries="",
    prefix_hits="",
    external_queries="",
    external_hits="",
    prompt_tokens="sglang:prompt_tokens",
    generation_tokens="sglang:generation_tokens",
    requests_done="sglang:num_requests",
    rank_label="dp_rank",
    cached_by_source="sglang:cached_tokens",
    prompt_by_source="sglang:realtime_tokens",  # mode = prefill_compute | prefill_cache | decode
    gpu_usage=("sglang:token_usage",),
    cpu_usage="sglang:hicache_host_used_tokens",
    offload={},
    lists_sources=False,  # InferenceX's SGLang adapter lists no scraped servers
    tier_label="cache_source",
    computed_tokens=("mode", "prefill_compute"),
    gpu_total="sglang:max_total_num_tokens",
    hit_rate_gauge="sglang:cache_hit_rate",
    cpu_total="sglang:hicache_host_total_tokens",
)
# "[... DP0 TP0 EP0] max_total_num_tokens=N, ..." (the scheduler's line, logged by TP rank 0 of each TP group
# only): one line per DP rank without DP attention; with it, TP rank 0 alone logs its rank's pool and every
# DP rank has one as large, so a lone line counts dp_size (server_args) times (docs/kv-pool-log.md)
KV_POOL_LOG = KvPoolLog(
    marker="max_total_num_tokens=",
    size=r"\bmax_total_num_tokens=(?P<tokens>\d+)\b",
    rank=r"\[[^\]]*\b(?P<tag>DP\d+)\b[^\]]*\]",
    ranks=r"\bdp_size=(?P<ranks>\d+)\b",
)

# unverified: SGLang pages its KV by --page-size, not --block-size; 16 is what slurmx has always recorded for it
DEFAULT_BLOCK_SIZE = 16


class SGLang:
    name = "sglang"
    computed_flags = frozenset({
        "--model-path", "--served-model-name", "--host", "--port", "--enable-dp-attention", "--nnodes", "--node-rank",
        "--dist-init-addr", "--revision", *PARALLEL_ALIASES, HIERARCHICAL, *HICACHE_SIZED,
    })  # fmt: skip
    metrics_path = "/metrics"
    health_path = "/health"  # benchmark_lib.sh's wait_for_server_ready polls it
    frontend: Frontend | None = None  # it serves the OpenAI API itself
    distributions: tuple[str, ...] = ("sglang", "sgl-kernel", "torch", "flashinfer-python", "sglang-router")
    metrics = METRICS
    kv_pool_log = KV_POOL_LOG
    reserved_kv_blocks = 0
    lru_prefix_cache = False  # its own eviction rules, which advise does not model
    hash_env: frozenset[str] = frozenset()  # SGLang's radix cache keys on token ids, no hash seed
    tool_call_flags: tuple[str, ...] = ("--tool-call-parser",)
    router_dp_size_flag: str | None = None  # sglang-router's --dp-aware asks the worker (InferenceX's dsv4 scripts)
    # the router InferenceX's dsv4 scripts start in front of a DP-attention server (by the image's own python3)
    upstream_programs: Mapping[str, str] = MappingProxyType({
        f"python3 -m {SERVER_MODULE}": "engine", f"python3 -m {ROUTER_MODULE}": "router",
    })  # fmt: skip
    cache_env: tuple[str, ...] = ()
    env_prefixes: tuple[str, ...] = ("SGLANG_", "SGL_")
    image_packages: tuple[str, ...] = ("sglang", "sgl_kernel")
    # the image's SGLang checkout (qwen3.5_fp8_h{100,200}_mtp.sh's `sed -i` of its multi_tokenizer_mixin.py)
    image_dirs: tuple[str, ...] = ("/sgl-workspace/",)
    script_suffix = ""
    srt_direct_launch: tuple[str, ...] = ("python3", "-m", SERVER_MODULE)  # srt-slurm's frontend.type sglang
    loads_connectors = False  # HiCache is its own tier; it plugs in no vLLM-style connector class
    revision_flag = "--revision"
    model_flag: str | None = "--model-path"
    draft_at: tuple[str, str] | None = None  # its MTP drafts with the target model
    # mtp: the recipe's own --speculative-algorithm NEXTN/EAGLE flags (the target model's own MTP heads)
    spec_methods = frozenset({"none", "mtp"})

    def parallel_flags(self, point: Point) -> list[str]:
        """Tensor parallelism over the point's GPUs; experts spread over --ep-size (InferenceX's scripts pass it
        on every point); data-parallel attention as one DP rank per GPU of the TP group. An aggregated multinode
        point's one worker (srt-slurm's direct frontend) is a server of its worker's parallelism on one node."""
        tp, ep, dp_attn, pp = point.tp, point.ep, point.dp_attn, point.pp
        if point.multinode:
            assert point.prefill is not None
            tp, ep, dp_attn, pp = point.prefill.tp, point.prefill.ep, point.prefill.dp_attn, point.prefill.pp
        flags = ["--tp", str(tp), "--ep-size", str(ep)]
        if pp > 1:
            flags += ["--pp-size", str(pp)]
        if dp_attn:
            flags += ["--dp", str(tp), "--enable-dp-attention"]
        return flags

    def ready_timeout_s(self, env: Mapping[str, str]) -> int:
        return 0  # no start-up limit of its own in its env (its --watchdog-timeout guards a running batch)

    def argv(
        self, head: list[str], model: str, model_flag: str | None, served_model_name: str, port: int,
        flags: list[str],
    ) -> list[str]:  # fmt: skip
        return server_argv(head, model, model_flag, served_model_name, port, flags)

    def block_size(self, flags: Flags) -> int:
        block = flags.get("--block-size")
        return block if isinstance(block, int) else DEFAULT_BLOCK_SIZE

    def rank_gpus(self, flags: Flags) -> tuple[int, int]:
        """One server of --tp GPUs (data-parallel attention splits its attention within them, --dp)."""
        tp = next((flags[name] for name in PARALLEL_ALIASES[:3] if name in flags), 1)
        return (int(tp) if isinstance(tp, int | str) and str(tp).isdigit() else 1), 1

    def kv_pool_tokens(self, argv: list[str], block_size: int) -> int | None:
        """--max-total-tokens; else sized from --mem-fraction-static at start."""
        tokens = argv_value(argv, "--max-total-tokens")
        return int(tokens) if tokens is not None and tokens.isdigit() else None

    def files(self, flags: list[str], run_dir: Path) -> tuple[list[str], dict[str, str]]:
        return flags, {}  # every setting is a flag

    def inline_files(self, flags: Flags, files: Mapping[str, str]) -> Flags:
        return flags

    def offload_args(self, offload: KvOffload) -> tuple[list[str], dict[str, str]]:
        """HiCache's settings as SGLang's flags: the tier on, then each setting as `--NAME VALUE`."""
        flags = [HIERARCHICAL]
        for name, value in offload.settings.items():
            flags += [f"--{name}", str(value)]
        return flags, {}

    def offload_in(self, flags: Flags) -> dict[str, Any] | None:
        if HIERARCHICAL not in flags:
            return None
        sized = {name.removeprefix("--"): flags[name] for name in HICACHE_SIZED if name in flags}
        return {"kv_connector": "hicache", **sized}

    def connector_of(self, argv: list[str]) -> str | None:
        return "hicache" if HIERARCHICAL in argv else None

    def computed_for(self, sizing: RecipeSizing) -> frozenset[str]:
        return self.computed_flags

    def recipe_problems(self, flags: Flags, sizing: RecipeSizing) -> list[RecipeProblem]:
        problems = []
        if sizing.max_num_seqs_per_conc or sizing.capture_tokens_per_seq or sizing.capture_size_is_max_num_seqs:
            problems.append(RecipeProblem(
                ("engine",), "SGLang's batch and graph sizes are its own flags (--max-running-requests, "
                "--cuda-graph-max-bs): set them per conc"
            ))  # fmt: skip
        if sizing.draft_model is not None:
            problems.append(RecipeProblem(("engine", "draft-model"), "SGLang's MTP here drafts with the target model"))
        return problems

    def sized_flags(self, flags: Flags, sizing: RecipeSizing, conc: int, draft_path: str) -> tuple[Flags, list[str]]:
        return dict(flags), []

    def rank_span_problem(self, rank_gpus: int, gpus_per_node: int) -> str | None:
        return "slurmx runs SGLang on one node only (no --nnodes launch yet)"

    def binds_numa(self, flags: list[str]) -> str | None:
        return "--numa-node" if "--numa-node" in flags else None

    def node_flags(self, part: NodePart, nodes: int, ranks_per_node: int) -> list[str]:
        raise NotImplementedError("slurmx runs SGLang on one node only")

    def port_env(self, port: int) -> dict[str, str]:
        return {}  # its port is a flag

    def deployment_env(self, run_dir: Path) -> dict[str, str]:
        return {}

    def node_env(self, part: NodePart) -> dict[str, str]:
        return {}

    def local_rendezvous_flags(self, argv: list[str], port: int) -> list[str]:
        """DP attention joins its ranks over TCP at --dist-init-addr (and the ports right above it); without one
        on one node SGLang derives it from its --port (+233), and some versions refuse dp_size > 1 without it.
        InferenceX's dsv4 scripts pass 127.0.0.1:$((PORT + 2000)); slurmx passes a port the node found free."""
        return ["--dist-init-addr", f"127.0.0.1:{port}"] if "--enable-dp-attention" in argv else []

    def cache_reset_path(self) -> str | None:
        return "/flush_cache"  # empties the radix cache and, with HiCache, the host tier

    def cache_reset_hint(self) -> str:
        return "SGLang refuses /flush_cache while requests are running: the replay must have drained"

    def version_of(self, versions: dict[str, str]) -> str | None:
        return versions.get("sglang")


ENGINE = SGLang()


class DynamoSGLang(dynamo.DynamoWorker, SGLang):
    """SGLang's engine as Dynamo's aggregated worker (`python3 -m dynamo.sglang`: SGLang's own server flags, its
    metrics on Dynamo's system port) behind Dynamo's frontend (engines/dynamo.py). A row of framework dynamo-sglang
    whose srt-slurm recipe has frontend.type dynamo (recipes/srt.py serves it from that file)."""

    name = "dynamo-sglang"
    distributions: tuple[str, ...] = ("sglang", "sgl-kernel", "ai-dynamo", "ai-dynamo-runtime", "torch")
    upstream_programs: Mapping[str, str] = MappingProxyType({
        "python3 -m dynamo.sglang": "engine", "python3 -m dynamo.frontend": "router",
    })  # fmt: skip

    def rank_span_problem(self, rank_gpus: int, gpus_per_node: int) -> str | None:
        if rank_gpus % gpus_per_node:  # each node runs an equal share of the server's TP ranks
            return f"an SGLang server of {rank_gpus} GPUs does not fill whole {gpus_per_node}-GPU nodes"
        return None

    def node_flags(self, part: NodePart, nodes: int, ranks_per_node: int) -> list[str]:
        """One server over whole nodes, SGLang's multi-node launch: every node runs the worker with the head's
        torch.distributed address and its own rank (srt-slurm's --dist-init-addr/--nnodes/--node-rank); only the
        head's registers with Dynamo and serves."""
        return ["--dist-init-addr", f"{part.head_address}:{part.rpc_port}", "--nnodes", str(nodes),
                "--node-rank", str(part.index)]  # fmt: skip


DYNAMO_ENGINE = DynamoSGLang()
