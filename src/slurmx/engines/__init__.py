"""Serving engines as a registry, by the master config's `framework`: one module each (vLLM today)."""

from __future__ import annotations

from slurmx.engines.base import Engine, EngineMetrics, KvOffload, KvPoolLog, NodePart, RecipeProblem, RecipeSizing
from slurmx.engines.vllm import ENGINE as VLLM_ENGINE
from slurmx.errors import UserError

REGISTRY: dict[str, Engine] = {}


def register(engine: Engine) -> Engine:
    REGISTRY[engine.name] = engine
    return engine


register(VLLM_ENGINE)
# what a serving spec written before it named its engine ran, and what tests read without naming one
DEFAULT = VLLM_ENGINE.name


def default() -> Engine:
    return REGISTRY[DEFAULT]


def get(name: str) -> Engine:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UserError(f"no serving engine {name!r} in slurmx (have: {', '.join(sorted(REGISTRY))})") from None


__all__ = [
    "DEFAULT", "REGISTRY", "Engine", "EngineMetrics", "KvOffload", "KvPoolLog", "NodePart", "RecipeProblem",
    "RecipeSizing", "default", "get", "register",
]  # fmt: skip
