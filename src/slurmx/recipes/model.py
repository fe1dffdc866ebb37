"""Pydantic model of a serving recipe file; flags are a mapping so each is named exactly once."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator

from slurmx.config.master import kebab
from slurmx.flags import Flags

# Hashing env decides prefix-cache block keys: it belongs to the recipe's one env policy, never to an arm.
HASH_ENV = frozenset({"PYTHONHASHSEED", "VLLM_PREFIX_CACHE_HASH_SEED", "LMCACHE_HASH_SEED"})
TOOL_CALL_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, alias_generator=kebab, populate_by_name=True)


class Match(_Model):
    """Which points a recipe serves: InferenceX's script choice by prefix, precision, hardware, framework."""

    model_prefix: str
    precision: str
    framework: str
    runner: str


class ConcRule(_Model):
    """Flags and env that apply when conc-min <= conc <= conc-max (e.g. speculative depth by load)."""

    conc_min: PositiveInt | None = None
    conc_max: PositiveInt | None = None
    flags: Flags = Field(default_factory=dict)

    def applies(self, conc: int) -> bool:
        return (self.conc_min is None or conc >= self.conc_min) and (self.conc_max is None or conc <= self.conc_max)


class Engine(_Model):
    launcher: list[str] = Field(min_length=1)  # argv head; {engine_python} is the runtime's interpreter
    model_flag: str | None = None  # None: the model path is positional after the launcher
    block_size: PositiveInt
    health_path: str = "/health"
    startup_timeout_s: PositiveInt = 1800
    flags: Flags
    max_num_seqs_per_conc: PositiveInt | None = None  # --max-num-seqs = this x conc
    per_conc: list[ConcRule] = Field(default_factory=list)


class Replay(_Model):
    """How the agentic trace is replayed: InferenceX's production scenario, or a local synthetic trace."""

    kind: Literal["production", "synthetic"]
    scenario: str = "inferencex-agentx-mvp"
    public_dataset: str = "semianalysis_cc_traces_weka_062126"
    num_dataset_entries: PositiveInt = 393
    warmup_request_count: int = Field(default=10, ge=0)
    failed_request_threshold: float = Field(default=0.10, ge=0, le=1)
    random_seed: int = 42
    # synthetic
    sessions_per_conc: PositiveInt = 2
    turns: PositiveInt = 3
    first_turn_tokens: PositiveInt = 600
    turn_delta_tokens: PositiveInt = 100
    shared_prefix_tokens: int = Field(default=512, ge=0)
    output_tokens: PositiveInt = 16
    block_tokens: PositiveInt = 128


class RouterRecipe(_Model):
    """A request router in front of the engine, started when a point's config names a router."""

    name: str  # the config's router name this serves, e.g. vllm-router
    launcher: list[str] = Field(min_length=1)
    flags: Flags = Field(default_factory=dict)
    health_path: str = "/health"
    startup_timeout_s: PositiveInt = 300


class Recipe(_Model):
    recipe: str
    match: Match
    scenario: Literal["agentic-coding", "fixed-seq-len"] = "agentic-coding"
    model_path: str | None = None  # under the runtime's model-root; default: the config's model name
    served_model_name: str | None = None
    env_policy: dict[str, str]  # shared by every arm of this recipe
    engine: Engine
    # arm name (a registered kv-offload backend) -> its fields; typed by the backend when the recipe loads
    arms: dict[str, dict[str, Any]]
    replay: Replay
    router: RouterRecipe | None = None

    @field_validator("env_policy")
    @classmethod
    def _hash_env_in_policy(cls, env_policy: dict[str, str]) -> dict[str, str]:
        # A field validator, so the error is located at env-policy (file:line), not at the file.
        if "PYTHONHASHSEED" not in env_policy:
            raise ValueError("env-policy must set PYTHONHASHSEED: every arm hashes prefixes the same way")
        return env_policy
