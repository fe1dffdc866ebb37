"""What a KV-offload backend is to slurmx: a Protocol every backend module implements.

A backend owns its recipe knobs (an `Arm` subclass), their validation, the sizes it derives from a
point's DRAM budget (a `BackendSpec` subclass stored in point.json), its server processes, the
connector it plugs into the engine (as engine-neutral facts: the engine shapes its flags), which engines
it can serve, its preflight checks, its metrics and cache-reset endpoints, and the evidence
that it engaged: which counters of its tier say so, and which log lines say it did not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from slurmx.config.master import kebab
from slurmx.engines import DEFAULT as DEFAULT_ENGINE
from slurmx.engines.base import Engine, KvOffload
from slurmx.flags import Flags
from slurmx.plan import Point
from slurmx.process import Process, ServerPorts
from slurmx.runtimes.base import Runtime

GB = 1_000_000_000
# an srt-slurm recipe's store section (`backend.<name>_kv_store`), handed to fixed_knobs beside the connector JSON
KV_STORE = "kv_store"


class BackendSpec(BaseModel):
    """A backend resolved for one point at submit time; each backend stores its own subclass."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str | None = None
    startup_timeout_s: int = 600
    find_links: str | None = None  # the arm's wheel page (Arm.find_links)
    requires: list[str] = []  # the arm's pinned requirements (Arm.requires)

    def host_memory_bytes(self) -> int:
        """Host DRAM the backend pins for its cache (preflight checks the node has it)."""
        return 0

    def pool_gb_per_gpu(self) -> float:
        """GB of host pool each GPU's rank brings (a store segment), which a node's ranks need of its DRAM budget;
        0 where the backend's pool is not per rank."""
        return 0.0


class Arm(BaseModel):
    """What one kv-offload-backend adds to a recipe's base: flags, removals by name, env; plus its knobs."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, alias_generator=kebab, populate_by_name=True)

    add: Flags = Field(default_factory=dict)
    remove: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # what this arm's replay gets beyond the recipe's replay env (an upstream script's shell exports, which
    # its aiperf inherits, that only this arm sets)
    replay_env: dict[str, str] = Field(default_factory=dict)
    startup_timeout_s: PositiveInt = 600
    # a platform build's wheel page (pip --find-links: LMCache's ROCm wheels) the backend's wheel installs from
    find_links: str | None = Field(default=None, pattern=r"^https://\S+$")
    # pinned packages this arm's points install beside the backend's wheel, in its pip (no dependencies resolved)
    requires: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*==\S+$")]] = Field(default_factory=list)


class ArmProblem(ValueError):
    """A recipe arm the backend cannot run: the field under the arm, and why."""

    def __init__(self, field: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


S = TypeVar("S", bound=BackendSpec)


@dataclass(frozen=True)
class LogPattern:
    """A line that, found in one process's log (`log` is the process name: "lmcache", "engine"), means
    the arm did not do what it claims; `reason` is what result.json and status say."""

    log: str
    regex: str
    reason: str
    fatal: bool = False  # found once the server is ready, it fails the point before the replay


@dataclass(frozen=True)
class ArmCapture:
    """What one point's upstream script handed an arm's backend, beyond the connector JSON (recipes import):
    the files its engine's env names (env name -> text, as the engine found them), the flags of each of the
    backend's own servers it started (slurmx process name -> flags, as a recipe writes them: a server the script
    starts several times is named `NAME.0`, `NAME.1`, ... in start order), the distributions it pip-installs
    (name -> its requirement and options, as provisioning facts name them) and which of them one pip installed
    together, the modules it checks import, and the node's paths it measured with `df` (/dev/shm: a script that
    sizes a pool against its free space)."""

    files: Mapping[str, str] = field(default_factory=dict)
    servers: Mapping[str, Flags] = field(default_factory=dict)
    installs: Mapping[str, str] = field(default_factory=dict)
    import_checks: tuple[str, ...] = ()
    measured: tuple[str, ...] = ()
    pip_groups: tuple[frozenset[str], ...] = ()  # the names each pip command installed
    engine_env: Mapping[str, str] = field(default_factory=dict)  # what the script set in the engine's env


@dataclass(frozen=True)
class EngineFile:
    """A file the node writes into the point's run directory before the engine starts, and the env variable
    that names it to the engine (Mooncake's embedded-store config)."""

    env: str
    path: Path
    text: str


@dataclass(frozen=True)
class TierReading:
    """The tier's own figures over the replay window, from its counters (deltas) and gauges (maxima)."""

    counters: dict[str, float] = field(default_factory=dict)  # named figures: chunks stored, chunks read, ...
    hit_tokens: float | None = None  # tokens the tier says it served the engine (its side of the hit rate)
    absent: str | None = None  # why the tier's side is missing (never a silent zero), None when it is there
    # a tier that counts KV blocks: blocks it served (tokens: x the block size); last, so that the positional
    # (counters, hit_tokens, absent) of the other backends keep their meaning
    hit_blocks: float | None = None


class Backend(Protocol[S]):
    name: str  # the master config's kv-offload-backend name ("none" when a point does not offload)
    arm_model: type[Arm]
    spec_model: type[S]
    port_names: tuple[str, ...]  # ports of its own servers, chosen on the node
    connector: str | None  # the kv_connector the engine must carry for this arm (None: no connector)
    log_patterns: tuple[LogPattern, ...]  # known fallback/failure lines of this backend
    distribution: str | None  # the pip distribution kv-offload-backend.version pins (provisioning installs it)
    preloads_torch: bool  # its server needs torch's libraries preloaded (provisioning finds them)
    own_env: tuple[str, ...]  # engine env the backend sets itself (a recipe may not; import leaves it out)
    # why its store cannot serve one engine rank spread over several nodes (None: it can), said at resolve time
    rank_span_refusal: str | None
    # on a multinode point its servers run on the head only, one set every node's ranks use at the head's address
    # (ServerPorts.store_host); the other nodes start none of them
    head_servers: bool

    def check_arm(self, arm: Arm, engine_flags: Flags, env: dict[str, str], block_size: int) -> list[ArmProblem]:
        """Rules a recipe arm must obey to run this backend (checked when the recipe loads)."""
        ...

    def knobs_from_connector(
        self, configs: list[dict[str, Any]], points: list[Point], handed: Sequence[ArmCapture] = ()
    ) -> dict[str, Any]:
        """The arm knobs that rebuild a script's captured connector JSON, and the files and servers `captured`
        holds for the same points (recipes import); ValueError: cannot."""
        ...

    def fixed_knobs(self, config: dict[str, Any]) -> dict[str, Any] | None:
        """The arm knobs that pin the connector's sizes as `config` gives them (an srt-slurm recipe's fixed pool,
        over the point's DRAM budget; the recipe's store section, if any, under KV_STORE); None where the backend
        has no such form."""
        ...

    def probes(self, point: Point) -> list[Point]:
        """Variants of an arm's point (another budget, another TP) whose captures import needs besides the key's
        own to tell the knobs apart (a size formula one budget cannot pin down); a probe the script refuses is
        dropped."""
        ...

    def engine_files(self, spec: S, ports: ServerPorts, run_dir: Path) -> list[EngineFile]:
        """Files the node writes under `run_dir` before the engine starts, each named to it by an env variable."""
        ...

    def ports_of(self, spec: S) -> tuple[str, ...]:
        """The names of the ports this point's servers take (`port_names`, unless the spec starts several)."""
        ...

    def server_names(self, spec: S) -> tuple[str, ...]:
        """The names of the processes `servers` starts for this point (provisioning's env is keyed by them)."""
        ...

    def spec(self, arm: Arm, point: Point) -> S:
        """The sizes this point runs with, from its DRAM budget; ArmProblem if the arm cannot serve it."""
        ...

    def on_node(self, spec: S, gpus: int) -> S:
        """`spec` as one node of the point holds it, with `gpus` engine ranks there (one process per GPU: the
        node layout's GPUs per node); a pool each rank process allocates counts that node's ranks only."""
        ...

    def servers(self, spec: S, ports: ServerPorts, runtime: Runtime, env: dict[str, str]) -> list[Process]:
        """Processes to start before the engine, in order (env is the recipe's env policy)."""
        ...

    def refusal(self, engine: Engine) -> str | None:
        """Why this backend cannot serve `engine`'s points (one line, said at resolve time), or None."""
        ...

    def offload(self, spec: S, ports: ServerPorts, engine: str) -> KvOffload | None:
        """The connector `engine` plugs in for this point (None: none); the engine makes its flags of it."""
        ...

    def preflight(self, spec: S, runtime: Runtime) -> list[str]:
        """One line per problem on this node that would stop the backend (fast checks, before any server)."""
        ...

    def import_checks(self, spec: S, engine: str = DEFAULT_ENGINE) -> list[str]:
        """Modules the point's environment must import (provisioning checks them before any server)."""
        ...

    def distribution_of(self, spec: S) -> str | None:
        """The pip distribution this point's kv-offload-backend.version pins (`distribution` unless the arm
        names another build)."""
        ...

    def metrics_urls(self, spec: S, ports: ServerPorts) -> list[str]:
        """The tier's own /metrics, scraped alongside the engine's during the replay."""
        ...

    def cache_reset_urls(self, spec: S, ports: ServerPorts) -> list[str]:
        """POST these to empty the tier between points that share a server."""
        ...

    def tier_reading(self, deltas: Mapping[str, float], gauges: Mapping[str, float]) -> TierReading:
        """The tier's evidence from the counters scraped over the replay (names without `_total`)."""
        ...


class BaseBackend(Generic[S]):
    """Defaults for the parts of the Protocol a backend does not need: no servers, no connector."""

    name: str
    arm_model: type[Arm] = Arm
    spec_model: type[S]
    port_names: tuple[str, ...] = ()
    connector: str | None = None
    log_patterns: tuple[LogPattern, ...] = ()
    distribution: str | None = None
    preloads_torch: bool = False
    own_env: tuple[str, ...] = ()
    rank_span_refusal: str | None = None
    head_servers: bool = False

    def check_arm(self, arm: Arm, engine_flags: Flags, env: dict[str, str], block_size: int) -> list[ArmProblem]:
        return []

    def knobs_from_connector(
        self, configs: list[dict[str, Any]], points: list[Point], handed: Sequence[ArmCapture] = ()
    ) -> dict[str, Any]:
        """The arm knobs that rebuild a script's captured connector JSON (recipes import); ValueError: cannot."""
        if configs:
            raise ValueError("the importer cannot derive this backend's knobs from the captured connector JSON yet")
        return {}

    def fixed_knobs(self, config: dict[str, Any]) -> dict[str, Any] | None:
        return None

    def probes(self, point: Point) -> list[Point]:
        return []

    def engine_files(self, spec: S, ports: ServerPorts, run_dir: Path) -> list[EngineFile]:
        return []

    def ports_of(self, spec: S) -> tuple[str, ...]:
        return self.port_names

    def server_names(self, spec: S) -> tuple[str, ...]:
        return (self.name,) if self.port_names else ()

    def spec(self, arm: Arm, point: Point) -> S:
        raise NotImplementedError

    def on_node(self, spec: S, gpus: int) -> S:
        return spec

    def servers(self, spec: S, ports: ServerPorts, runtime: Runtime, env: dict[str, str]) -> list[Process]:
        return []

    def refusal(self, engine: Engine) -> str | None:
        if self.connector is not None and not engine.loads_connectors:
            return f"kv-offload-backend {self.name} plugs {self.connector} into the engine, which {engine.name} cannot load"
        return None

    def offload(self, spec: S, ports: ServerPorts, engine: str) -> KvOffload | None:
        return None

    def preflight(self, spec: S, runtime: Runtime) -> list[str]:
        return []

    def import_checks(self, spec: S, engine: str = DEFAULT_ENGINE) -> list[str]:
        return []

    def distribution_of(self, spec: S) -> str | None:
        return self.distribution

    def metrics_urls(self, spec: S, ports: ServerPorts) -> list[str]:
        return []

    def cache_reset_urls(self, spec: S, ports: ServerPorts) -> list[str]:
        return []

    def tier_reading(self, deltas: Mapping[str, float], gauges: Mapping[str, float]) -> TierReading:
        return TierReading()


def backend_version(point: Point) -> str | None:
    return point.kv_offload_backend.version if point.kv_offload_backend else None


def budget_probes(point: Point, ranks: int) -> list[Point]:
    """Variants of `point` that pin a size formula over its DRAM budget split between `ranks` (recipes import):
    budgets one GB apart over a whole cycle of the ranks (a remainder), two far ones (a unit or a reserve), and
    half the TP (what follows the ranks). Their names are derived again: the point's own would name its figures."""
    budget = point.total_cpu_dram_gb
    budgets = [budget - d for d in (*range(1, ranks + 2), 16 * ranks, 32 * ranks) if budget - d > 0]
    variants = [replace(point, total_cpu_dram_gb=b, exp_name="", point_id="") for b in budgets]
    if point.tp > 1 and point.tp % 2 == 0 and not point.multinode:
        variants.append(replace(point, tp=point.tp // 2, exp_name="", point_id=""))
    return variants
