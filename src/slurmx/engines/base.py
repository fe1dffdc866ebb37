"""A serving engine: how its server is started for a point, what it reports, and what its recipes may say.

Everything an engine knows lives in its module as data or methods: the flags it computes, how a KV-offload
backend's connector becomes its flags and env (`offload_args`), its metric names and KV-pool log line (read
by results/), the distributions whose versions the lock records, its recipe rules and readiness paths.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from slurmx.config.master import WorkerSpec
from slurmx.flags import Flags
from slurmx.plan import Point


@dataclass(frozen=True)
class NodePart:
    """One node's part of a multinode engine: its index (0: the head, which serves the API), where the
    head listens (data-parallel RPC port; torch.distributed master port when a rank spans nodes), and the
    address other nodes reach this one at."""

    index: int
    head_address: str
    rpc_port: int
    master_port: int = 0
    address: str = ""


@dataclass(frozen=True)
class KvOffload:
    """What a KV-offload backend asks of the engine, in no engine's shape: the connector class it plugs in,
    the module that holds it (None: the engine ships it), the connector's own settings, and what a failed
    load does."""

    connector: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    module: str | None = None
    load_failure_policy: str | None = None


@dataclass(frozen=True)
class EngineMetrics:
    """The engine's /metrics names (counters without `_total`) that result.json's server metrics read."""

    prefix: str  # every name of this engine starts with it (the result's metrics adapter)
    prefix_queries: str
    prefix_hits: str
    external_queries: str
    external_hits: str
    prompt_tokens: str
    generation_tokens: str
    requests_done: str  # per finish reason and rank
    rank_label: str  # the label naming a data-parallel rank
    cached_by_source: str  # cached prompt tokens by tier (source = device | host | ...)
    prompt_by_source: str  # prompt tokens by origin (local_cache_hit | external_kv_transfer | local_compute)
    gpu_usage: tuple[str, ...]  # KV-cache usage gauges, any of them
    cpu_usage: str
    offload: Mapping[str, str]  # KvOffload field -> counter
    # InferenceX's AIPERF_REQUIRED_SERVER_METRIC_PREFIX for this engine: aiperf's export must hold one such
    # metric (the engine's own, not only a router's), else the point is invalid (None: no such check)
    required_prefix: str | None = None
    # whether InferenceX's aggregation adapter for this engine lists the scraped servers (server_metrics.sources:
    # its vLLM adapter does, its ATOM one leaves the list empty)
    lists_sources: bool = True
    # the label that splits `cached_by_source` by tier where the engine's hit rates are each tier's cached tokens over
    # the window's prompt tokens (SGLang's cache_source: device | host | storage_*; InferenceX's backends/sglang.py);
    # "": prefix_hits over prefix_queries, and prompt tokens by origin under the `source` label (vLLM's)
    tier_label: str = ""
    computed_tokens: tuple[str, str] = ("", "")  # (label, value) of prompt_by_source's series of computed tokens
    gpu_total: str = ""  # gauge: the device KV pool's tokens, summed over the servers' series
    hit_rate_gauge: str = ""  # gauge: the engine's own overall hit rate, read where no prompt tokens rate it
    cpu_total: str = ""  # gauge: the host tier's tokens (cpu usage = cpu_usage / cpu_total where set)


@dataclass(frozen=True)
class KvPoolLog:
    """The engine log line that says how many tokens of KV cache it allocated: `marker` filters lines,
    `size` holds a `tokens` group, `rank` a `tag` group naming the pool's owner (one per data-parallel rank).
    Lines without a tag count only in a log with no tagged line: summed when each comes from its own pool
    (`untagged="sum"`), else the last. `ranks` (a `ranks` group, read anywhere in the log) is how many pools a
    log stands for when one rank alone logged the line. `shared`: every rank logs the one pool its TP/PP group
    shards between them (each rank its heads or layers of the same tokens): a log's ranks are one pool, times the
    engine's attention-DP ranks, each of which holds a pool of its own (docs/kv-pool-log.md says which engine logs
    what)."""

    marker: str
    size: str
    rank: str
    untagged: Literal["sum", "last"] = "last"
    ranks: str | None = None
    shared: bool = False


@dataclass(frozen=True)
class RecipeSizing:
    """A recipe's engine sizing knobs, as the engine reads them (recipes/ owns the schema)."""

    block_size: int
    max_num_seqs_per_conc: int | None = None
    capture_size_is_max_num_seqs: bool = False
    capture_tokens_per_seq: int | None = None
    draft_model: str | None = None


@dataclass(frozen=True)
class RecipeProblem:
    """A recipe rule of the engine that a recipe breaks: the field under `engine`, and why."""

    field: tuple[str | int, ...]
    message: str


@dataclass(frozen=True)
class Frontend:
    """The OpenAI frontend of its own process in front of an engine's workers (Dynamo's): how it starts, the flags
    naming its listening host and port, and its readiness path. The engine's own port is then its worker's."""

    launcher: tuple[str, ...]
    host_flag: str
    port_flag: str
    health_path: str
    startup_timeout_s: int


class Engine(Protocol):
    name: str  # the master config's `framework`
    # a frontend process the engine's workers serve behind (None: the engine serves the OpenAI API itself)
    frontend: Frontend | None
    # Flags the engine module computes from the point or the node; a recipe that set one would put it twice.
    computed_flags: frozenset[str]
    metrics_path: str
    health_path: str  # readiness, unless the recipe names another
    # The master config's spec-decoding methods this engine's recipes can serve ("none" included).
    spec_methods: frozenset[str]
    # Distributions whose versions the lock records, the engine's own first (its version: the first found).
    distributions: tuple[str, ...]
    # The server programs InferenceX's scripts start for this engine, by the slurmx process each one is
    # (the drift check's stand-ins and the facts it compares).
    upstream_programs: Mapping[str, str]
    cache_env: tuple[str, ...]  # env naming the engine's own cache directory, which launchers hand the container
    env_prefixes: tuple[str, ...]  # the engine's own settings' names begin so (the drift check's engine-side env)
    # the Python packages its images hold that a script's container patch resolves and patches (the capture's
    # sandbox site-packages has them)
    image_packages: tuple[str, ...]
    # where the image's own checkout of the engine lies, whose files a script may edit in place (`sed -i`): the
    # capture records such an edit instead of running it
    image_dirs: tuple[str, ...]
    # what InferenceX's launchers append to this engine's historical script name, the one without the framework
    # (their FRAMEWORK_SUFFIX), tried when no framework-tagged script exists
    script_suffix: str
    # how srt-slurm's direct frontend (a recipe's frontend.type naming this engine) starts it: program and leading
    # arguments, the recipe's flags after them (and the model path first where model_flag is None); () for none
    srt_direct_launch: tuple[str, ...]
    metrics: EngineMetrics
    kv_pool_log: KvPoolLog
    reserved_kv_blocks: int  # blocks of the pool no request ever holds (vLLM's null block), for `slurmx advise`
    lru_prefix_cache: bool  # freed blocks stay cached and are evicted least recently used: what advise models
    hash_env: frozenset[str]  # env that decides the engine's prefix-cache block keys (recipe-wide only)
    tool_call_flags: tuple[str, ...]  # what an agentic recipe's tool-call requests need
    # the flag that tells the router in front of a DP-attention engine how many data-parallel ranks its one URL holds
    # (the point's tp); None where the router asks the worker itself
    router_dp_size_flag: str | None
    loads_connectors: bool  # the engine plugs in a backend's connector class (else only "none" runs)
    revision_flag: str  # loads the model's hub snapshot at a commit (a recipe's model-revision)
    # the flag InferenceX's scripts pass the model path by (None: a positional after the launcher), as an imported
    # recipe's model-flag
    model_flag: str | None
    # where a recipe's draft-model path sits: (flag, key of its JSON value); None: the engine drafts with no
    # second model
    draft_at: tuple[str, str] | None

    def parallel_flags(self, point: Point) -> list[str]: ...

    def ready_timeout_s(self, env: Mapping[str, str]) -> int:
        """How long the engine itself waits for its workers to start under `env` (0: no limit of its own)."""
        ...

    def block_size(self, flags: Flags) -> int:
        """The KV block size in tokens that an engine run with `flags` uses (its own default where they set none):
        a recipe's engine block-size, which the backends' chunk checks read."""
        ...

    def rank_gpus(self, flags: Flags) -> tuple[int, int]:
        """(GPUs of one data-parallel rank, data-parallel ranks) of an engine run with `flags` as they stand (an
        srt-slurm recipe's own parallelism, which lays its points out over nodes)."""
        ...

    def kv_pool_tokens(self, argv: list[str], block_size: int) -> int | None:
        """The KV pool in tokens (what its pool-size log line will say) that `argv` fixes, or None where the engine
        sizes it from free memory at start (then only its log knows)."""
        ...

    def files(self, flags: list[str], run_dir: Path) -> tuple[list[str], dict[str, str]]:
        """The flags with each value the engine reads from a file replaced by that file's path in `run_dir`, and
        the files the node writes there (path -> text)."""
        ...

    def inline_files(self, flags: Flags, files: Mapping[str, str]) -> Flags:
        """A captured engine's flags with the files its flags name (flag -> text) as the recipe holds them."""
        ...

    def offload_args(self, offload: KvOffload) -> tuple[list[str], dict[str, str]]:
        """The engine's flags and env for a backend's connector."""
        ...

    def offload_in(self, flags: Flags) -> dict[str, Any] | None:
        """The offload settings a captured engine's flags carry (a connector's JSON), which recipes import rebuilds
        an arm's knobs from; None: none."""
        ...

    def connector_of(self, argv: list[str]) -> str | None:
        """The connector an engine argv that ran carries (or its native offload), read back for evidence."""
        ...

    def argv(
        self, head: list[str], model: str, model_flag: str | None, served_model_name: str, port: int,
        flags: list[str],
    ) -> list[str]: ...  # fmt: skip

    def computed_for(self, sizing: RecipeSizing) -> frozenset[str]:
        """The computed flags a recipe with this sizing may not set."""
        ...

    def version_of(self, versions: dict[str, str]) -> str | None:
        """The engine's own version among the distributions the lock read."""
        ...

    def recipe_problems(self, flags: Flags, sizing: RecipeSizing) -> list[RecipeProblem]:
        """Rules the recipe's base flags and sizing obey for this engine (checked when the recipe loads)."""
        ...

    def sized_flags(self, flags: Flags, sizing: RecipeSizing, conc: int, draft_path: str) -> tuple[Flags, list[str]]:
        """The flags with what the engine computes from the concurrency and the draft (speculation, graph
        capture), and the argv it appends after the parallel flags (batch size)."""
        ...

    def rank_span_problem(self, rank_gpus: int, gpus_per_node: int) -> str | None:
        """Why a data-parallel rank of `rank_gpus` GPUs cannot span nodes of `gpus_per_node`, or None."""
        ...

    def binds_numa(self, flags: list[str]) -> str | None:
        """The flag that places the engine's workers on their GPUs' NUMA nodes, when `flags` carry it."""
        ...

    def node_flags(self, part: NodePart, nodes: int, ranks_per_node: int) -> list[str]:
        """`part`'s flags in an engine over `nodes` nodes with `ranks_per_node` whole data-parallel ranks on
        each (0: each rank spans several nodes)."""
        ...

    def node_env(self, part: NodePart) -> dict[str, str]:
        """`part`'s env: the address the engine advertises to the other nodes."""
        ...

    def port_env(self, port: int) -> dict[str, str]:
        """Env naming the engine's own port, where it reads it so (Dynamo's worker: its system port); {} else."""
        ...

    def deployment_env(self, run_dir: Path) -> dict[str, str]:
        """Env the engine and its frontend share to find each other, under the point's directory `run_dir`."""
        ...

    def local_rendezvous_flags(self, argv: list[str], port: int) -> list[str]:
        """The flags an engine on one node with server `argv` needs to name its ranks' rendezvous at `port`, a free
        loopback port the node chose (ServerPorts.rendezvous); [] where it needs none."""
        ...

    def cache_reset_path(self) -> str | None:
        """POST path that empties the engine's prefix cache (and the external tier's view of it)."""
        ...

    def cache_reset_hint(self) -> str:
        """What a failed cache reset usually means for this engine (appended to the point's failure)."""
        ...


class DisaggWorkers(Protocol):
    """A disaggregated framework's prefill/decode worker processes (rendered for review, never started):
    what its worker runs and the KV-transfer connectors it names, by the config's kv-p2p-transfer."""

    framework: str  # the master config's framework, e.g. a Dynamo flavour
    kv_connectors: Mapping[str, str]  # kv-p2p-transfer -> the connector both sides load

    def worker_argv(
        self, role: str, worker: WorkerSpec, model_path: str, served_model_name: str, kv: str
    ) -> list[str]: ...

    def worker_env(self, node_address: str) -> dict[str, str]: ...


def server_argv(
    head: list[str], model: str, model_flag: str | None, served_model_name: str, port: int, flags: list[str]
) -> list[str]:
    """An OpenAI-compatible server's argv: the launcher, the model (positional or by its flag), the name it serves
    under, loopback host and port, then the recipe's flags (vLLM's and SGLang's spell these alike)."""
    argv = [*head, *([model_flag, model] if model_flag else [model])]
    return [*argv, "--served-model-name", served_model_name, "--host", "127.0.0.1", "--port", str(port), *flags]


def argv_value(argv: list[str], flag: str) -> str | None:
    """The value after `flag` (or of `flag=VALUE`) in an argv, the last one where it repeats."""
    found = None
    for index, word in enumerate(argv):
        if word == flag and index + 1 < len(argv):
            found = argv[index + 1]
        elif word.startswith(flag + "="):
            found = word.partition("=")[2]
    return found
