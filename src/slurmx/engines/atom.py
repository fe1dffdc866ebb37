"""ATOM's OpenAI server (`python -m atom.entrypoints.openai_server`, ROCm/ATOM): every ATOM flag, metric name and
rule slurmx knows.

The argv is InferenceX's AMD agentic scripts' (benchmarks/single_node/agentic/*_mi355x_atom_mtp.sh): the model by
--model, the port by --server-port, tensor parallelism by --tensor-parallel-size (data-parallel attention by
--enable-dp-attention, experts by --enable-expert-parallel on it), speculative decoding by the recipe's own --method
/ --num-speculative-tokens flags. Its LMCache arm is in-process: ATOM's `lmcache_offload` connector with LMCache's
own LMCACHE_* env (backends/lmcache.py, `in-process`), which this module turns into ATOM's flag and env.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from slurmx.engines.base import (
    EngineMetrics,
    Frontend,
    KvOffload,
    KvPoolLog,
    NodePart,
    RecipeProblem,
    RecipeSizing,
)
from slurmx.errors import UserError
from slurmx.flags import Flags
from slurmx.plan import Point

SERVER_MODULE = "atom.entrypoints.openai_server"
TRANSFER_FLAG = "--kv-transfer-config"
MAX_NUM_SEQS = "--max-num-seqs"
# backends' engine-neutral connector names -> ATOM's own (atom/kv_transfer: the in-process LMCache offload tier,
# whose role is `offload`)
CONNECTORS: Mapping[str, str] = MappingProxyType({"lmcache-in-process": "lmcache_offload"})
ROLE = "offload"
# ATOM's /metrics (atom/entrypoints/openai/metrics.py, docs/metrics.md "ATOM Metrics Reference"): counters by
# family name (the text carries `_total`), the engine's state summed over data-parallel ranks (no rank label).
# ATOM has no prompt-tokens-by-source split nor a cached-by-tier counter nor a host-pool gauge: "" names none.
METRICS = EngineMetrics(
    prefix="atom:",
    required_prefix="atom:",  # what InferenceX's ATOM scripts set (AIPERF_REQUIRED_SERVER_METRIC_PREFIX)
    prefix_queries="atom:prefix_cache_full_tokens",  # prompt tokens considered by prefix-cache accounting
    prefix_hits="atom:prefix_cache_cached_tokens",  # served from the admitted GPU prefix (LMCache loads included)
    external_queries="atom:prefix_cache_full_tokens",
    external_hits="atom:lmcache_loaded_tokens",  # tokens loaded from LMCache (InferenceX's backends/atom.py reads it)
    prompt_tokens="atom:prompt_tokens",
    generation_tokens="atom:generation_tokens",
    requests_done="atom:requests_finished",
    rank_label="dp_rank",  # the scheduler's own histograms; the engine totals carry none
    cached_by_source="",
    prompt_by_source="",
    gpu_usage=("atom:kv_cache_usage_ratio",),
    cpu_usage="",
    offload={},
    lists_sources=False,  # InferenceX's backends/atom.py fills no server_metrics.sources
)
# slurmx knows no ATOM log line that gives its KV pool in tokens (ATOM sizes it in blocks, num_kvcache_blocks, and
# exports it as atom:kv_cache_blocks_total): a marker no line holds (a NUL), so the pool size stays unknown
KV_POOL_LOG = KvPoolLog(marker="\0", size=r"(?P<tokens>\d+)\0", rank=r"(?P<tag>\0)")
# the parallel flags slurmx sets from the point (a recipe sets none of them)
PARALLEL_FLAGS = ("--tensor-parallel-size", "--enable-dp-attention", "--enable-expert-parallel")

# unverified: slurmx reads no ATOM block size off its flags; 16 is what slurmx has always recorded for it
DEFAULT_BLOCK_SIZE = 16


class Atom:
    name = "atom"
    computed_flags = frozenset({
        "--model", "--served-model-name", "--host", "--server-port", TRANSFER_FLAG, *PARALLEL_FLAGS,
    })  # fmt: skip
    metrics_path = "/metrics"
    health_path = "/health"  # benchmark_lib.sh's wait_for_server_ready polls it
    frontend: Frontend | None = None  # it serves the OpenAI API itself
    distributions: tuple[str, ...] = ("atom", "amd-aiter", "torch", "lmcache")
    metrics = METRICS
    kv_pool_log = KV_POOL_LOG
    reserved_kv_blocks = 0
    lru_prefix_cache = False  # its own eviction rules, which advise does not model
    hash_env: frozenset[str] = frozenset()
    # none needed: without --tool-call-parser ATOM reads the tool-call format off the model's chat template
    # (tool_parser/registry.py resolve_tool_call_parser), and the scripts pass none
    tool_call_flags: tuple[str, ...] = ()
    router_dp_size_flag: str | None = None  # no router in InferenceX's ATOM scripts
    # kimik3/glm5.2 start `python -m ...`, dsv4 `python3 -u -m ...` (unbuffered): the same server
    upstream_programs: Mapping[str, str] = MappingProxyType({
        f"python -m {SERVER_MODULE}": "engine", f"python3 -u -m {SERVER_MODULE}": "engine",
        f"python3 -m {SERVER_MODULE}": "engine",
    })  # fmt: skip
    cache_env: tuple[str, ...] = ()
    env_prefixes: tuple[str, ...] = ("ATOM_", "AITER_", "OFFLOAD_")
    image_packages: tuple[str, ...] = ("atom", "aiter")
    image_dirs: tuple[str, ...] = ()
    script_suffix = ""
    srt_direct_launch: tuple[str, ...] = ()
    loads_connectors = True  # its in-process LMCache tier (CONNECTORS); no vLLM connector class
    # unverified: ATOM's EngineArgs as read (atom/model_engine/arg_utils.py) name no revision flag and no ATOM script
    # pins one; a recipe's model-revision on ATOM is untried
    revision_flag = "--revision"
    model_flag: str | None = "--model"
    # no JSON value holds a draft's path (dspark's --draft-model is a plain flag no imported script passes)
    draft_at: tuple[str, str] | None = None
    # mtp: the recipe's own --method mtp|dspark and --num-speculative-tokens (dspark's --draft-model too)
    spec_methods = frozenset({"none", "mtp"})

    def parallel_flags(self, point: Point) -> list[str]:
        """TP over the point's GPUs; data-parallel attention and, with it, expert parallelism when ep > 1 (the
        glm5.2 script's PARALLEL_ARGS)."""
        flags = ["--tensor-parallel-size", str(point.tp)]
        if point.dp_attn:
            flags.append("--enable-dp-attention")
            if point.ep > 1:
                flags.append("--enable-expert-parallel")
        return flags

    def ready_timeout_s(self, env: Mapping[str, str]) -> int:
        return 0

    def argv(
        self, head: list[str], model: str, model_flag: str | None, served_model_name: str, port: int,
        flags: list[str],
    ) -> list[str]:  # fmt: skip
        argv = [*head, model_flag or "--model", model, "--served-model-name", served_model_name]
        return [*argv, "--host", "127.0.0.1", "--server-port", str(port), *flags]

    def block_size(self, flags: Flags) -> int:
        block = flags.get("--block-size")
        return block if isinstance(block, int) else DEFAULT_BLOCK_SIZE

    def rank_gpus(self, flags: Flags) -> tuple[int, int]:
        raise NotImplementedError(f"{self.name} is not served from srt-slurm recipes")

    def kv_pool_tokens(self, argv: list[str], block_size: int) -> int | None:
        return None  # sized from free memory at start: only its log line knows

    def files(self, flags: list[str], run_dir: Path) -> tuple[list[str], dict[str, str]]:
        return flags, {}  # every setting is a flag

    def inline_files(self, flags: Flags, files: Mapping[str, str]) -> Flags:
        return flags

    def offload_args(self, offload: KvOffload) -> tuple[list[str], dict[str, str]]:
        """The in-process tier's connector as ATOM's --kv-transfer-config, its settings as the env it reads."""
        connector = CONNECTORS.get(offload.connector)
        if connector is None:
            raise UserError(f"ATOM loads no {offload.connector} (it has {', '.join(sorted(CONNECTORS))})")
        config = json.dumps({"kv_connector": connector, "kv_role": ROLE}, separators=(",", ":"))
        return [TRANSFER_FLAG, config], {name: str(value) for name, value in offload.settings.items()}

    def offload_in(self, flags: Flags) -> dict[str, Any] | None:
        value = flags.get(TRANSFER_FLAG)
        if not isinstance(value, dict):
            return None
        neutral = {atom: name for name, atom in CONNECTORS.items()}
        return {**value, "kv_connector": neutral.get(str(value.get("kv_connector")), value.get("kv_connector"))}

    def connector_of(self, argv: list[str]) -> str | None:
        for index, arg in enumerate(argv[:-1]):
            if arg == TRANSFER_FLAG:
                try:
                    config = json.loads(argv[index + 1])
                except json.JSONDecodeError:
                    return f"unparsable {TRANSFER_FLAG}"
                return str(config.get("kv_connector")) if isinstance(config, dict) else f"unparsable {TRANSFER_FLAG}"
        return None

    def computed_for(self, sizing: RecipeSizing) -> frozenset[str]:
        # --max-num-seqs is the recipe's own unless it asks slurmx to size it by concurrency
        return self.computed_flags | ({MAX_NUM_SEQS} if sizing.max_num_seqs_per_conc else set())

    def recipe_problems(self, flags: Flags, sizing: RecipeSizing) -> list[RecipeProblem]:
        problems = []
        if sizing.capture_tokens_per_seq or sizing.capture_size_is_max_num_seqs:
            problems.append(RecipeProblem(
                ("engine",), "ATOM's graph sizes are its own --cudagraph-capture-sizes: set them per conc"
            ))  # fmt: skip
        if sizing.draft_model is not None:
            problems.append(RecipeProblem(("engine", "draft-model"), "ATOM's draft model is its --draft-model flag"))
        return problems

    def sized_flags(self, flags: Flags, sizing: RecipeSizing, conc: int, draft_path: str) -> tuple[Flags, list[str]]:
        """--max-num-seqs k x conc where the recipe sizes it so (dsv4's MAX_NUM_SEQS=$((2 * CONC)))."""
        after = [MAX_NUM_SEQS, str(sizing.max_num_seqs_per_conc * conc)] if sizing.max_num_seqs_per_conc else []
        return dict(flags), after

    def rank_span_problem(self, rank_gpus: int, gpus_per_node: int) -> str | None:
        return "slurmx runs ATOM on one node only"

    def binds_numa(self, flags: list[str]) -> str | None:
        return None

    def node_flags(self, part: NodePart, nodes: int, ranks_per_node: int) -> list[str]:
        raise NotImplementedError("slurmx runs ATOM on one node only")

    def port_env(self, port: int) -> dict[str, str]:
        return {}  # its port is a flag

    def deployment_env(self, run_dir: Path) -> dict[str, str]:
        return {}

    def node_env(self, part: NodePart) -> dict[str, str]:
        return {}

    def local_rendezvous_flags(self, argv: list[str], port: int) -> list[str]:
        return []  # no rendezvous address of its own on one node

    def cache_reset_path(self) -> str | None:
        return None  # the scripts reset nothing between points; slurmx starts a server per point

    def cache_reset_hint(self) -> str:
        return "ATOM's server has no prefix-cache reset slurmx uses"

    def version_of(self, versions: dict[str, str]) -> str | None:
        return versions.get("atom")


ENGINE = Atom()
