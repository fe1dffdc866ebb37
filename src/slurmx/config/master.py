"""Pydantic models of InferenceX master configs, field for field (unknown fields are errors).

The rules mirror InferenceX's `validation.py` (main 843c6254f): what it accepts loads here, what it refuses
is refused here. Vocabularies InferenceX leaves open (backend names, frameworks) stay open: whether slurmx
can run a point is decided at submit/render, not here. Deliberate differences, all stricter, each because
InferenceX's lax pydantic mode would pass a raw value through to its rows: values are typed strictly
("8" is not a tp), and tp, ep, isl, osl are positive.
"""

from __future__ import annotations

from typing import Any, Generic, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

E = TypeVar("E", bound=BaseModel)
F = TypeVar("F", bound=BaseModel)
A = TypeVar("A", bound=BaseModel)

# InferenceX's SpecDecoding literal; which of them slurmx can serve is the engine's business.
SpecDecoding = Literal["none", "mtp", "draft_model"]
# InferenceX requires agentic configs to name one exact fleet.
CLUSTER_LABEL_PREFIX = "cluster:"


def kebab(name: str) -> str:
    return name.replace("_", "-")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, alias_generator=kebab, populate_by_name=True)


# The scenario models are validated only inside a master config, whose schema holds theirs: a validator of
# their own, for the generic class and for each of its parametrizations, would be built at import, never run.
_NESTED_ONLY = ConfigDict(defer_build=True)


class _Versioned(_Model):
    @field_validator("version", check_fields=False)
    @classmethod
    def _not_an_image(cls, version: str | None) -> str | None:
        if version is not None and version.startswith("image:"):
            raise ValueError("version must be a release, package version or source commit, not an image reference")
        return version


class KvOffloadBackend(_Versioned):
    """Any non-empty name (an open vocabulary, as in InferenceX); the version is optional."""

    name: str = Field(min_length=1)
    version: str | None = Field(default=None, min_length=1)


class Router(_Versioned):
    """InferenceX's ComponentMetadata: name and version both required."""

    name: str = Field(min_length=1)
    version: str = Field(min_length=1)


class _Concurrency(_Model):
    """A non-empty `conc-list`, or a doubling range `conc-start`..`conc-end`; as in InferenceX, the form not
    chosen is ignored when half-given (a lone conc-start beside a list, an empty list beside a range)."""

    conc_list: list[PositiveInt] | None = None
    conc_start: int | None = None
    conc_end: int | None = None

    @property
    def _has_list(self) -> bool:
        return bool(self.conc_list)

    @model_validator(mode="after")
    def _one_concurrency_form(self) -> Self:
        has_range = self.conc_start is not None and self.conc_end is not None
        if self._has_list and has_range:
            raise ValueError("give conc-list or conc-start/conc-end, not both")
        if not self._has_list and not has_range:
            raise ValueError("missing concurrency: give conc-list, or conc-start and conc-end together")
        if self.conc_start is not None and self.conc_end is not None and not self._has_list:
            if self.conc_start <= 0 or self.conc_end <= 0:
                raise ValueError("conc-start and conc-end must be greater than 0")
            if self.conc_start > self.conc_end:
                raise ValueError(f"conc-start {self.conc_start} is above conc-end {self.conc_end}")
        return self

    def concurrencies(self) -> list[int]:
        """The list, or the range doubling from start and always ending at end (3, 6, 12, 24, 40)."""
        if self.conc_list:
            return list(self.conc_list)
        assert self.conc_start is not None and self.conc_end is not None
        values, conc = [], self.conc_start
        while conc < self.conc_end:
            values.append(conc)
            conc *= 2
        values.append(self.conc_end)
        return values


def server_gpus(tp: int, pp: int = 1, pcp: int = 1) -> int:
    """GPUs of one server: tensor x pipeline x prefill-context parallel (the one formula everywhere)."""
    return tp * pp * pcp


def _check_dcp(tp: int, dcp_size: int) -> None:
    if tp % dcp_size:
        raise ValueError(f"tp ({tp}) must be divisible by dcp-size ({dcp_size})")


class _KvOffload(_Model):
    kv_offloading: Literal["none", "dram"] | None = None
    kv_offload_backend: KvOffloadBackend | None = None

    @model_validator(mode="after")
    def _backend_matches_offloading(self) -> Self:
        name = self.kv_offload_backend.name if self.kv_offload_backend else None
        if self.kv_offloading is None and name is not None:
            raise ValueError(f"kv-offload-backend {name} is set but kv-offloading is not")
        if self.kv_offloading == "none" and name is not None:
            raise ValueError(f"kv-offload-backend {name} is set but kv-offloading is none")
        if self.kv_offloading == "dram" and name is None:
            raise ValueError("kv-offloading dram needs a kv-offload-backend (name, and optionally version)")
        return self


class WorkerSpec(_Model):
    """One side (prefill or decode) of a multinode deployment; ep and dp-attn are required, as in InferenceX."""

    num_worker: int = Field(ge=0)
    tp: PositiveInt
    ep: PositiveInt
    dp_attn: bool
    pp: PositiveInt = 1
    dcp_size: PositiveInt = 1
    pcp_size: PositiveInt = 1
    hardware: str | None = Field(default=None, min_length=1)
    additional_settings: list[str] | None = None

    @model_validator(mode="after")
    def _topology(self) -> Self:
        _check_dcp(self.tp, self.dcp_size)
        return self

    @property
    def gpus(self) -> int:
        """GPUs of one worker replica (one data-parallel rank of its side)."""
        return server_gpus(self.tp, self.pp, self.pcp_size)


class _Workers(_Model):
    prefill: WorkerSpec
    decode: WorkerSpec

    @model_validator(mode="after")
    def _hardware_pair(self) -> Self:
        if bool(self.prefill.hardware) != bool(self.decode.hardware):
            raise ValueError("hardware must be given for both prefill and decode, or neither")
        return self


class SingleNodeEntry(_Concurrency):
    tp: PositiveInt
    pp: PositiveInt = 1
    dcp_size: PositiveInt = 1
    pcp_size: PositiveInt = 1
    ep: PositiveInt | None = None
    dp_attn: bool | None = None
    spec_decoding: SpecDecoding = "none"
    router: Router | None = None

    @model_validator(mode="after")
    def _topology(self) -> Self:
        _check_dcp(self.tp, self.dcp_size)
        return self


class SingleNodeAgenticEntry(SingleNodeEntry, _KvOffload):
    @model_validator(mode="after")
    def _offloading_named(self) -> Self:
        if self.kv_offloading is None:
            raise ValueError("a single-node agentic entry must give kv-offloading (none or dram)")
        return self


class MultiNodeEntry(_Workers, _Concurrency):
    spec_decoding: SpecDecoding = "none"
    router: Router | None = None
    kv_p2p_transfer: str | None = Field(default=None, min_length=1)


class MultiNodeAgenticEntry(MultiNodeEntry, _KvOffload):
    # InferenceX's agentic entry schema allows these beside prefill/decode; its generator ignores them.
    ep: int | None = None
    dp_attn: bool | None = None


class FixedSeqLen(_Model, Generic[E]):
    model_config = _NESTED_ONLY
    isl: PositiveInt
    osl: PositiveInt
    search_space: list[E]


class AgenticCoding(_Model, Generic[E]):
    model_config = _NESTED_ONLY
    dram_utilization: float | None = Field(default=None, gt=0, le=1)
    search_space: list[E]

    @model_validator(mode="after")
    def _offload_needs_budget(self) -> Self:
        offloading = any(getattr(e, "kv_offloading", None) == "dram" for e in self.search_space)
        if offloading and self.dram_utilization is None:
            raise ValueError("dram-utilization is required when a search-space entry offloads KV to DRAM")
        return self


class Scenarios(_Model, Generic[F, A]):
    model_config = _NESTED_ONLY
    fixed_seq_len: list[FixedSeqLen[F]] | None = None
    agentic_coding: list[AgenticCoding[A]] | None = None

    @model_validator(mode="after")
    def _some_scenario(self) -> Self:
        if not self.fixed_seq_len and not self.agentic_coding:
            raise ValueError("no scenario: give fixed-seq-len or agentic-coding")
        return self

    def entries(self) -> list[Any]:
        """Every search-space entry of every scenario."""
        groups: list[Any] = [*(self.fixed_seq_len or []), *(self.agentic_coding or [])]
        return [entry for group in groups for entry in group.search_space]


class _MasterBase(_Model):
    image: str
    model: str
    model_prefix: str
    runner: str
    precision: str
    framework: str
    router: Router | None = None

    def _check_scope(self, scenarios: Scenarios[Any, Any], kv_p2p_transfer: str | None, disagg: bool) -> None:
        """InferenceX's component-metadata scope and agentic-runner rules, across all scenarios."""
        if scenarios.agentic_coding and not self.runner.startswith(CLUSTER_LABEL_PREFIX):
            raise ValueError(f"agentic configs must use a '{CLUSTER_LABEL_PREFIX}<name>' runner, got {self.runner!r}")
        entries = scenarios.entries()
        for name, top in (("router", self.router), ("kv-p2p-transfer", kv_p2p_transfer)):
            attribute = name.replace("-", "_")
            if top is not None and any(getattr(e, attribute, None) is not None for e in entries):
                raise ValueError(
                    f"{name} must be declared either at the top level or in search-space entries, not both"
                )
        every_entry_has_one = entries and all(getattr(e, "kv_p2p_transfer", None) is not None for e in entries)
        if disagg and kv_p2p_transfer is None and not every_entry_has_one:
            raise ValueError("disagg true needs kv-p2p-transfer at the top level or in every search-space entry")


class SingleNodeConfig(_MasterBase):
    multinode: Literal[False]
    disagg: Literal[False] = False
    scenarios: Scenarios[SingleNodeEntry, SingleNodeAgenticEntry]

    @property
    def kv_p2p_transfer(self) -> str | None:
        return None

    @model_validator(mode="after")
    def _scope(self) -> Self:
        self._check_scope(self.scenarios, None, False)
        return self


class MultiNodeConfig(_MasterBase):
    multinode: Literal[True]
    disagg: bool = False
    kv_p2p_transfer: str | None = Field(default=None, min_length=1)
    scenarios: Scenarios[MultiNodeEntry, MultiNodeAgenticEntry]

    @model_validator(mode="after")
    def _scope(self) -> Self:
        self._check_scope(self.scenarios, self.kv_p2p_transfer, self.disagg)
        return self


MasterConfig = SingleNodeConfig | MultiNodeConfig
