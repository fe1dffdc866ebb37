"""KV-offload backends as a registry: one module per kv-offload-backend name; a new backend is one file.

Each module defines a `Backend` (see base.py) and `register()`s it here by name; `get(name)` finds it,
and `backend_spec` reads a stored `BackendSpec` back as the backend's own subclass.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, SerializeAsAny

from slurmx.backends import hicache, lmcache, mooncake, native, none, vllm_simple
from slurmx.backends.base import Arm, ArmProblem, Backend, BackendSpec
from slurmx.errors import UserError

REGISTRY: dict[str, Backend[Any]] = {}


def register(backend: Backend[Any]) -> Backend[Any]:
    REGISTRY[backend.name] = backend
    return backend


for _module in (none, vllm_simple, lmcache, mooncake, hicache, native):
    register(_module.BACKEND)


def get(name: str) -> Backend[Any]:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UserError(f"no KV-offload backend {name!r} in slurmx (have: {', '.join(sorted(REGISTRY))})") from None


def _as_backend_spec(value: Any) -> Any:
    """A stored spec (a dict) becomes the spec model of the backend it names: a union open to registration."""
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        return get(value["name"]).spec_model.model_validate(value)
    return value


# Typed as the base, validated as the named backend's subclass, dumped with all of its fields.
AnyBackendSpec = Annotated[SerializeAsAny[BackendSpec], BeforeValidator(_as_backend_spec)]

__all__ = ["REGISTRY", "AnyBackendSpec", "Arm", "ArmProblem", "Backend", "BackendSpec", "get", "register"]
