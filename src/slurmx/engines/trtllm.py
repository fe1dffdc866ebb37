"""TensorRT-LLM's server (`trtllm-serve`, started by `mpirun -n 1`): every TRT-LLM flag, file, metric and rule slurmx
knows.

The argv is InferenceX's single-node agentic TRT-LLM scripts' (benchmarks/single_node/agentic/*_trt_mtp.sh):
`mpirun -n 1 --oversubscribe --allow-run-as-root trtllm-serve MODEL --tp_size TP --host --port --chat_template ...
--config ser.yaml`. Most of the engine's settings are not flags but the keys of that extra-options YAML file
(TRT-LLM's LLM API options), which the script writes per point from a heredoc. A recipe names each top-level
key of the file as a flag without dashes (`max_batch_size`, `kv_cache_config`, ...), so per-conc and per-TP rules
set them as they set flags; the engine gathers them into `--config`, and the node writes that mapping as the YAML
file into the point's run directory (`files`). Its host-memory KV tier is its own ("native" in InferenceX's master
config): `kv_cache_config.host_cache_size` bytes of that file (backends/native.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from slurmx.engines.base import (
    EngineMetrics,
    Frontend,
    KvOffload,
    KvPoolLog,
    NodePart,
    RecipeProblem,
    RecipeSizing,
)
from slurmx.flags import Flags
from slurmx.plan import Point

CONFIG_FLAG = "--config"  # trtllm-serve's extra LLM API options file (YAML); older releases: --extra_llm_api_options
CONFIG_NAME = "trtllm_config.yaml"  # under the point's run directory
KV_CACHE = "kv_cache_config"
HOST_CACHE = "host_cache_size"  # bytes of host memory the KV cache manager keeps as its secondary pool
TOKENS_PER_BLOCK = "tokens_per_block"  # kv_cache_config's KV block size in tokens
# KvCacheConfig.tokens_per_block's default (tensorrt_llm/llmapi/llm_args.py; the LLM API reference of 1.3.0rc27
# and latest): the block when the file sets none. InferenceX's scripts set 128.
DEFAULT_TOKENS_PER_BLOCK = 32
SPECULATIVE = "speculative_config"
DRAFT_KEY = "speculative_model"  # the draft's path inside speculative_config
# the server programs InferenceX's scripts start: trtllm-serve under a one-rank mpirun (MPI spawns its TP workers)
LAUNCHER = "mpirun -n 1 --oversubscribe --allow-run-as-root trtllm-serve"
# Counter names without `_total`. trtllm-serve's Prometheus text (tensorrt_llm/metrics/collector.py, MetricsCollector,
# `trtllm_` prefix) is served on /prometheus/metrics (as TRT-LLM's own examples/serve/prometheus_metrics.py scrapes
# it); its /metrics is JSON iteration stats, no Prometheus text. The metric names below are unverified against a
# running trtllm-serve (no TRT-LLM runs here).
# TRT-LLM counts reuse in KV blocks, not tokens (kv_cache_reused_blocks / kv_cache_missed_blocks); it has no
# per-source token counters and no per-rank label.
METRICS = EngineMetrics(
    prefix="trtllm_",
    required_prefix=None,  # InferenceX's TRT-LLM scripts set no AIPERF_REQUIRED_SERVER_METRIC_PREFIX
    prefix_queries="trtllm_prompt_tokens",  # every prompt token is looked up
    prefix_hits="trtllm_prompt_cache_hit_tokens",
    external_queries="trtllm_prompt_tokens",
    external_hits="trtllm_prompt_cached_tokens",
    prompt_tokens="trtllm_prompt_tokens",
    generation_tokens="trtllm_generation_tokens",
    requests_done="trtllm_request_success",
    rank_label="",  # one API server over all TP ranks: no rank label
    cached_by_source="trtllm_prompt_cached_tokens",  # by cache_tier where the release labels it
    prompt_by_source="",  # no prompt tokens by origin
    gpu_usage=("trtllm_kv_cache_utilization",),
    cpu_usage="trtllm_kv_cache_host_utilization",
    offload={
        "bytes_gpu_to_cpu": "trtllm_kv_cache_offload_bytes",
        "bytes_cpu_to_gpu": "trtllm_kv_cache_onboard_bytes",
    },
)
# "[MemUsageChange] Allocated N GiB for max tokens in paged KV cache (T)." (the C++ KVCacheManager::allocatePools, on
# every rank; "[TRT-LLM] [I] [batchmgr] [RANK r] " before it where the logger knows its rank, "[TensorRT-LLM][INFO] " in
# older builds): each rank's blocks, equal on all ranks, of the one pool its TP ranks shard by heads, unless attention
# DP gives every rank a pool of its own (docs/kv-pool-log.md)
KV_POOL_LOG = KvPoolLog(
    marker="max tokens in paged KV cache",
    size=r"max tokens in paged KV cache \((?P<tokens>[\d,]+)\)",
    rank=r"\[(?P<tag>RANK \d+)\]",
    shared=True,
)


def config_keys(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe's flags that are keys of the extra-options file (no dashes), as the file holds them."""
    return {name: value for name, value in flags.items() if not name.startswith("-")}


class TrtLlm:
    name = "trt"  # the master config's framework for these keys
    # as trtllm-serve spells them and as recipes' rules read them (dashes for underscores)
    computed_flags = frozenset({
        "--tp_size", "--tp-size", "--pp_size", "--pp-size", "--ep_size", "--ep-size", "--host", "--port", CONFIG_FLAG,
        "--extra_llm_api_options", "--extra-llm-api-options",
    })  # fmt: skip
    metrics_path = "/prometheus/metrics"
    health_path = "/health"  # benchmark_lib.sh's wait_for_server_ready polls it
    frontend: Frontend | None = None  # it serves the OpenAI API itself
    distributions: tuple[str, ...] = ("tensorrt_llm", "tensorrt", "torch", "flashinfer-python")
    metrics = METRICS
    kv_pool_log = KV_POOL_LOG
    reserved_kv_blocks = 0
    lru_prefix_cache = False  # its own eviction rules, which advise does not model
    hash_env: frozenset[str] = frozenset()  # block reuse keys on token ids
    tool_call_flags: tuple[str, ...] = ()  # InferenceX's TRT-LLM scripts pass no tool parser
    router_dp_size_flag: str | None = None  # no router in InferenceX's TRT-LLM scripts
    upstream_programs: Mapping[str, str] = MappingProxyType({LAUNCHER: "engine"})
    cache_env: tuple[str, ...] = ()
    env_prefixes: tuple[str, ...] = ("TLLM_", "TRTLLM_")
    image_packages: tuple[str, ...] = ("tensorrt_llm",)
    image_dirs: tuple[str, ...] = ()
    srt_direct_launch: tuple[str, ...] = ()
    script_suffix = "_trt"  # minimaxm3_fp4_b200_trt_mtp.sh: the launchers' only non-empty FRAMEWORK_SUFFIX
    loads_connectors = False  # its host tier is its own (kv_cache_config.host_cache_size)
    revision_flag = "--revision"
    model_flag: str | None = None  # trtllm-serve takes the model positionally
    draft_at: tuple[str, str] | None = (SPECULATIVE, DRAFT_KEY)
    # mtp: the file's speculative_config (EAGLE3 with the recipe's draft-model)
    spec_methods = frozenset({"none", "mtp"})

    def parallel_flags(self, point: Point) -> list[str]:
        return ["--tp_size", str(point.tp)]

    def ready_timeout_s(self, env: Mapping[str, str]) -> int:
        return 0  # no start-up limit of its own

    def argv(
        self, head: list[str], model: str, model_flag: str | None, served_model_name: str, port: int,
        flags: list[str],
    ) -> list[str]:  # fmt: skip
        # no --served-model-name: the scripts serve under the model path, which the replay names
        return [*head, model, "--host", "127.0.0.1", "--port", str(port), *flags]

    def block_size(self, flags: Flags) -> int:
        """kv_cache_config.tokens_per_block of the file, else TRT-LLM's default."""
        kv = flags.get(KV_CACHE)
        block = kv.get(TOKENS_PER_BLOCK) if isinstance(kv, dict) else None
        return block if isinstance(block, int) else DEFAULT_TOKENS_PER_BLOCK

    def rank_gpus(self, flags: Flags) -> tuple[int, int]:
        raise NotImplementedError(f"{self.name} is not served from srt-slurm recipes")

    def kv_pool_tokens(self, argv: list[str], block_size: int) -> int | None:
        return None  # sized from free memory at start: only its log line knows

    def files(self, flags: list[str], run_dir: Path) -> tuple[list[str], dict[str, str]]:
        """`--config MAPPING` (what sized_flags gathered) as the YAML file it names in `run_dir`."""
        if CONFIG_FLAG not in flags:
            return flags, {}
        i = flags.index(CONFIG_FLAG) + 1
        path = run_dir / CONFIG_NAME
        text = yaml.safe_dump(json.loads(flags[i]), sort_keys=False, default_flow_style=None)
        return [*flags[:i], str(path), *flags[i + 1 :]], {str(path): text}

    def inline_files(self, flags: Flags, files: Mapping[str, str]) -> Flags:
        """The captured file `--config` names, as the recipe's dashless flags (its top-level keys)."""
        if CONFIG_FLAG not in files:
            return flags
        content = yaml.safe_load(files[CONFIG_FLAG])
        if not isinstance(content, dict):
            raise ValueError(f"{CONFIG_FLAG} names no YAML mapping")
        return {**{n: v for n, v in flags.items() if n != CONFIG_FLAG}, **content}

    def offload_args(self, offload: KvOffload) -> tuple[list[str], dict[str, str]]:
        return [], {}  # the host tier is a key of the file, set by the recipe's rules

    def offload_in(self, flags: Flags) -> dict[str, Any] | None:
        kv = flags.get(KV_CACHE)
        if isinstance(kv, dict) and HOST_CACHE in kv:
            return {"kv_connector": "native", HOST_CACHE: kv[HOST_CACHE]}
        return None

    def connector_of(self, argv: list[str]) -> str | None:
        return None  # the argv names only the file; the host tier is read from it (offload_in)

    def computed_for(self, sizing: RecipeSizing) -> frozenset[str]:
        return self.computed_flags

    def recipe_problems(self, flags: Flags, sizing: RecipeSizing) -> list[RecipeProblem]:
        problems = []
        if KV_CACHE in flags and self.block_size(flags) != sizing.block_size:
            problems.append(RecipeProblem(
                ("engine", "block-size"), f"differs from {KV_CACHE}.{TOKENS_PER_BLOCK} {self.block_size(flags)}"
            ))  # fmt: skip
        if sizing.max_num_seqs_per_conc or sizing.capture_tokens_per_seq or sizing.capture_size_is_max_num_seqs:
            problems.append(RecipeProblem(
                ("engine",), "TRT-LLM's batch and graph sizes are keys of its file (max_batch_size, "
                "cuda_graph_config): set them per conc"
            ))  # fmt: skip
        return problems

    def sized_flags(self, flags: Flags, sizing: RecipeSizing, conc: int, draft_path: str) -> tuple[Flags, list[str]]:
        """The dashless flags gathered into `--config` (the file's content), the draft's path in its
        speculative_config."""
        config = config_keys(flags)
        speculative = config.get(SPECULATIVE)
        if sizing.draft_model is not None and isinstance(speculative, dict):
            config[SPECULATIVE] = {**speculative, DRAFT_KEY: draft_path}
        out: Flags = {n: v for n, v in flags.items() if n.startswith("-")}
        if config:
            out[CONFIG_FLAG] = config
        return out, []

    def rank_span_problem(self, rank_gpus: int, gpus_per_node: int) -> str | None:
        return "slurmx runs TRT-LLM on one node only"

    def binds_numa(self, flags: list[str]) -> str | None:
        return None

    def node_flags(self, part: NodePart, nodes: int, ranks_per_node: int) -> list[str]:
        raise NotImplementedError("slurmx runs TRT-LLM on one node only")

    def port_env(self, port: int) -> dict[str, str]:
        return {}  # its port is a flag

    def deployment_env(self, run_dir: Path) -> dict[str, str]:
        return {}

    def node_env(self, part: NodePart) -> dict[str, str]:
        return {}

    def local_rendezvous_flags(self, argv: list[str], port: int) -> list[str]:
        return []  # no rendezvous address of its own on one node

    def cache_reset_path(self) -> str | None:
        return None  # trtllm-serve has no cache-reset endpoint: each point starts its own server

    def cache_reset_hint(self) -> str:
        return "trtllm-serve cannot empty its KV cache over HTTP: points must not share a server"

    def version_of(self, versions: dict[str, str]) -> str | None:
        return versions.get("tensorrt_llm")


ENGINE = TrtLlm()
