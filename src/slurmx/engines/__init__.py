"""Serving engines as a registry, by the master config's `framework`: one module each."""

from __future__ import annotations

from slurmx.engines.atom import ENGINE as ATOM_ENGINE
from slurmx.engines.base import (
    DisaggWorkers,
    Engine,
    EngineMetrics,
    Frontend,
    KvOffload,
    KvPoolLog,
    NodePart,
    RecipeProblem,
    RecipeSizing,
)
from slurmx.engines.sglang import DYNAMO_ENGINE as DYNAMO_SGLANG_ENGINE
from slurmx.engines.sglang import ENGINE as SGLANG_ENGINE
from slurmx.engines.trtllm import ENGINE as TRTLLM_ENGINE
from slurmx.engines.vllm import DYNAMO_ENGINE as DYNAMO_VLLM_ENGINE
from slurmx.engines.vllm import DYNAMO_WORKERS
from slurmx.engines.vllm import ENGINE as VLLM_ENGINE
from slurmx.errors import UserError

REGISTRY: dict[str, Engine] = {}


def register(engine: Engine) -> Engine:
    REGISTRY[engine.name] = engine
    return engine


register(VLLM_ENGINE)
register(SGLANG_ENGINE)
register(ATOM_ENGINE)
register(TRTLLM_ENGINE)
# an aggregated Dynamo row whose srt-slurm recipe has Dynamo's frontend: the engine as Dynamo's worker behind it
register(DYNAMO_VLLM_ENGINE)
register(DYNAMO_SGLANG_ENGINE)
# what a serving spec written before it named its engine ran, and what tests read without naming one
DEFAULT = VLLM_ENGINE.name


def default() -> Engine:
    return REGISTRY[DEFAULT]


# disaggregated frameworks' workers, by framework: rendered for review only
DISAGG_WORKERS: dict[str, DisaggWorkers] = {DYNAMO_WORKERS.framework: DYNAMO_WORKERS}


def disagg_workers(framework: str) -> DisaggWorkers | None:
    return DISAGG_WORKERS.get(framework)


def get(name: str) -> Engine:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UserError(f"no serving engine {name!r} in slurmx (have: {', '.join(sorted(REGISTRY))})") from None


__all__ = [
    "DEFAULT", "DISAGG_WORKERS", "REGISTRY", "DisaggWorkers", "Engine", "EngineMetrics", "Frontend", "KvOffload", "KvPoolLog",
    "NodePart", "RecipeProblem",
    "RecipeSizing", "default", "disagg_workers", "get", "register",
]  # fmt: skip
