"""Pydantic models of InferenceX master configs, field for field (unknown fields are errors)."""

from __future__ import annotations

from typing import Generic, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

E = TypeVar("E", bound=BaseModel)
F = TypeVar("F", bound=BaseModel)
A = TypeVar("A", bound=BaseModel)

BackendName = Literal["vllm-simple", "lmcache", "mooncake", "hicache", "native"]


def kebab(name: str) -> str:
    return name.replace("_", "-")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, alias_generator=kebab, populate_by_name=True)


class KvOffloadBackend(_Model):
    name: BackendName
    version: str | None = None


class Router(_Model):
    name: str
    version: str | None = None


class _Concurrency(_Model):
    """Either an explicit `conc-list` or a doubling range `conc-start`..`conc-end`."""

    conc_list: list[PositiveInt] | None = Field(default=None, min_length=1)
    conc_start: PositiveInt | None = None
    conc_end: PositiveInt | None = None

    @model_validator(mode="after")
    def _one_concurrency_form(self) -> Self:
        has_range = self.conc_start is not None or self.conc_end is not None
        if self.conc_list is not None and has_range:
            raise ValueError("give conc-list or conc-start/conc-end, not both")
        if self.conc_list is None and not has_range:
            raise ValueError("missing concurrency: give conc-list or conc-start and conc-end")
        if has_range and (self.conc_start is None or self.conc_end is None):
            raise ValueError("conc-start and conc-end must be given together")
        if self.conc_start is not None and self.conc_end is not None and self.conc_start > self.conc_end:
            raise ValueError(f"conc-start {self.conc_start} is above conc-end {self.conc_end}")
        return self

    def concurrencies(self) -> list[int]:
        """The list, or the range doubling from start and always ending at end (3, 6, 12, 24, 40)."""
        if self.conc_list is not None:
            return list(self.conc_list)
        assert self.conc_start is not None and self.conc_end is not None
        values, conc = [], self.conc_start
        while conc < self.conc_end:
            values.append(conc)
            conc *= 2
        values.append(self.conc_end)
        return values


class _KvOffload(_Model):
    kv_offloading: Literal["none", "dram"] = "none"
    kv_offload_backend: KvOffloadBackend | None = None

    @model_validator(mode="after")
    def _backend_needs_offloading(self) -> Self:
        if self.kv_offloading == "none" and self.kv_offload_backend is not None:
            raise ValueError(f"kv-offload-backend {self.kv_offload_backend.name} is set but kv-offloading is none")
        return self


class WorkerSpec(_Model):
    """One side (prefill or decode) of a multinode deployment."""

    num_worker: int = Field(ge=0)
    tp: PositiveInt
    ep: PositiveInt = 1
    dp_attn: bool = False
    pp: PositiveInt = 1
    dcp_size: PositiveInt = 1
    pcp_size: PositiveInt = 1
    additional_settings: list[str] | None = None


class SingleNodeEntry(_Concurrency):
    tp: PositiveInt
    pp: PositiveInt = 1
    dcp_size: PositiveInt = 1
    pcp_size: PositiveInt = 1
    ep: PositiveInt | None = None
    dp_attn: bool | None = None
    spec_decoding: Literal["none", "mtp"] = "none"
    router: Router | None = None
    kv_p2p_transfer: str | None = None


class SingleNodeAgenticEntry(SingleNodeEntry, _KvOffload):
    pass


class MultiNodeEntry(_Concurrency):
    spec_decoding: Literal["none", "mtp"] = "none"
    prefill: WorkerSpec
    decode: WorkerSpec
    router: Router | None = None
    kv_p2p_transfer: str | None = None


class MultiNodeAgenticEntry(MultiNodeEntry, _KvOffload):
    pass


class FixedSeqLen(_Model, Generic[E]):
    isl: PositiveInt
    osl: PositiveInt
    search_space: list[E] = Field(min_length=1)


class AgenticCoding(_Model, Generic[E]):
    dram_utilization: float | None = Field(default=None, gt=0, le=1)
    search_space: list[E] = Field(min_length=1)

    @model_validator(mode="after")
    def _offload_needs_budget(self) -> Self:
        offloading = any(getattr(e, "kv_offloading", "none") != "none" for e in self.search_space)
        if offloading and self.dram_utilization is None:
            raise ValueError("dram-utilization is required when a search-space entry offloads KV to DRAM")
        return self


class Scenarios(_Model, Generic[F, A]):
    fixed_seq_len: list[FixedSeqLen[F]] = Field(default_factory=list)
    agentic_coding: list[AgenticCoding[A]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _some_scenario(self) -> Self:
        if not self.fixed_seq_len and not self.agentic_coding:
            raise ValueError("no scenario: give fixed-seq-len or agentic-coding")
        return self


class _MasterBase(_Model):
    image: str
    model: str
    model_prefix: str
    runner: str
    precision: str
    framework: str
    disagg: bool = False
    router: Router | None = None
    kv_p2p_transfer: str | None = None


class SingleNodeConfig(_MasterBase):
    multinode: Literal[False]
    scenarios: Scenarios[SingleNodeEntry, SingleNodeAgenticEntry]


class MultiNodeConfig(_MasterBase):
    multinode: Literal[True]
    scenarios: Scenarios[MultiNodeEntry, MultiNodeAgenticEntry]


MasterConfig = SingleNodeConfig | MultiNodeConfig
