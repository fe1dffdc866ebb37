"""vLLM's own SimpleCPUOffloadConnector: per-rank bytes from the point's budget; no server of its own."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from pydantic import Field, field_validator

from slurmx.backends.base import GB, Arm, ArmCapture, BackendSpec, BaseBackend, TierReading, backend_version
from slurmx.engines.base import Engine, KvOffload
from slurmx.plan import Point
from slurmx.process import ServerPorts

GIB = 1 << 30
PER_RANK: Final = "cpu_bytes_to_use_per_rank"
WHOLE: Final = "cpu_bytes_to_use"
# The connector's own counters (vLLM 0.32, vllm/v1/simple_kv_offload/metrics.py), names without `_total`:
# blocks restored to the engine from the CPU pool, counted when a load finishes; the pool's pinned blocks and
# its pending stores. Its save-outcome counter classifies hybrid models' boundary-state hand-offs only (not
# the blocks a plain model stores), so it is not read as a stored total.
LOAD_BLOCKS: Final = "vllm:simple_kv_offload_load_blocks"
TIER_COUNTERS: Final = {
    "blocks_loaded": LOAD_BLOCKS,
    # OffloadingConnector's byte counters, which InferenceX reads for its CPU offload arms, when present
    "bytes_cpu_to_gpu": "vllm:kv_offload_bytes_cpu_to_gpu",
    "bytes_gpu_to_cpu": "vllm:kv_offload_bytes_gpu_to_cpu",
}
TIER_GAUGES: Final = {
    "used_blocks_max": "vllm:simple_kv_offload_used_blocks",
    "pending_store_blocks_max": "vllm:simple_kv_offload_pending_store_blocks",
}


class VllmSimpleArm(Arm):
    """How the connector is sized: per GPU rank in GB (the default), or, as some InferenceX scripts pass it,
    the whole budget (`cpu_bytes_to_use`) in GiB; `lazy-offload` passed only when set."""

    size_setting: Literal["cpu_bytes_to_use_per_rank", "cpu_bytes_to_use"] = PER_RANK
    budget_unit: Literal["GB", "GiB"] = "GB"
    lazy_offload: bool | None = None
    lazy_offload_dp_attn: bool | None = None  # lazy_offload on DP-attention points, where it differs
    # further kv_connector_extra_config settings passed as written (e.g. enable_cross_layers_blocks); the
    # size settings are the backend's
    extra_settings: dict[str, str | int | float | bool] = Field(default_factory=dict)
    # the sizes in bytes as a recipe fixes them (an srt-slurm recipe's cpu_bytes_to_use and/or its per-rank share),
    # over the budget's: passed as given
    fixed_sizes: dict[str, int] = Field(default_factory=dict)

    @field_validator("fixed_sizes")
    @classmethod
    def _size_names(cls, value: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(value) - {PER_RANK, WHOLE})
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not a size setting ({PER_RANK}, {WHOLE})")
        return value

    @field_validator("extra_settings")
    @classmethod
    def _not_the_sizes(cls, value: dict[str, str | int | float | bool]) -> dict[str, str | int | float | bool]:
        sized = sorted(set(value) & {PER_RANK, WHOLE, "lazy_offload"})
        if sized:
            raise ValueError(f"{', '.join(sized)}: set by the backend from the budget (size-setting, lazy-offload)")
        return value


class VllmSimpleSpec(BackendSpec):
    cpu_bytes_per_rank: int
    size_setting: str = PER_RANK
    cpu_bytes: int | None = None  # the whole budget, when size_setting is cpu_bytes_to_use
    lazy_offload: bool | None = None
    extra_settings: dict[str, str | int | float | bool] = Field(default_factory=dict)
    ranks: int = 1  # the server's GPU ranks, each holding cpu_bytes_per_rank of host memory

    def host_memory_bytes(self) -> int:
        # every rank of the server allocates its share of the pool in host memory, as LMCache's server does its L1;
        # a multinode server's whole pool is asked of each node, which the budget caps at one node's share
        return self.cpu_bytes_per_rank * self.ranks


class VllmSimple(BaseBackend[VllmSimpleSpec]):
    name = "vllm-simple"
    spec_model = VllmSimpleSpec
    arm_model = VllmSimpleArm
    connector = "SimpleCPUOffloadConnector"

    def spec(self, arm: Arm, point: Point) -> VllmSimpleSpec:
        # the budget is one server's (a multinode point's: one prefill worker's, plan's multinode rule),
        # shared by that server's GPU ranks
        knobs = arm if isinstance(arm, VllmSimpleArm) else VllmSimpleArm()
        unit = GIB if knobs.budget_unit == "GiB" else GB
        per_rank = int(point.total_cpu_dram_gb * unit / point.server_gpus)
        whole = point.total_cpu_dram_gb * unit if knobs.size_setting == WHOLE else None
        setting = knobs.size_setting
        if knobs.fixed_sizes:  # as the recipe fixes them: the per-rank share where given, else the whole over the ranks
            whole = knobs.fixed_sizes.get(WHOLE)
            per_rank = knobs.fixed_sizes.get(PER_RANK) or (whole or 0) // point.server_gpus
            setting = PER_RANK if PER_RANK in knobs.fixed_sizes else WHOLE
        dp_lazy = knobs.lazy_offload_dp_attn
        lazy = dp_lazy if point.dp_attn and dp_lazy is not None else knobs.lazy_offload
        return VllmSimpleSpec(
            name=self.name, version=backend_version(point), cpu_bytes_per_rank=per_rank,
            size_setting=setting, cpu_bytes=whole, lazy_offload=lazy,
            extra_settings=dict(knobs.extra_settings), ranks=point.server_gpus,
        )  # fmt: skip

    def refusal(self, engine: Engine) -> str | None:
        if engine.name not in ("vllm", "dynamo-vllm"):  # the connector is part of vLLM itself (or as Dynamo's worker)
            return f"kv-offload-backend {self.name} is vLLM's own CPU offload: engine {engine.name} has none"
        return None

    def offload(self, spec: VllmSimpleSpec, ports: ServerPorts, engine: str) -> KvOffload | None:
        assert self.connector is not None
        size = spec.cpu_bytes if spec.size_setting == WHOLE and spec.cpu_bytes is not None else spec.cpu_bytes_per_rank
        settings: dict[str, object] = {spec.size_setting: size}
        if spec.size_setting == PER_RANK and spec.cpu_bytes is not None:  # both sizes, as a recipe fixed them
            settings = {WHOLE: spec.cpu_bytes, **settings}
        if spec.lazy_offload is not None:
            settings["lazy_offload"] = spec.lazy_offload
        settings.update(spec.extra_settings)
        return KvOffload(self.connector, settings)

    def fixed_knobs(self, config: dict[str, Any]) -> dict[str, Any] | None:
        """The connector's sizes in bytes as given, its lazy_offload and its other settings."""
        extra = config.get("kv_connector_extra_config")
        if not isinstance(extra, dict):
            return None
        sizes = {k: v for k in (PER_RANK, WHOLE) if isinstance(v := extra.get(k), int) and not isinstance(v, bool)}
        if not sizes:
            return None
        knobs: dict[str, Any] = {"fixed-sizes": sizes}
        if isinstance(extra.get("lazy_offload"), bool):
            knobs["lazy-offload"] = extra["lazy_offload"]
        rest = {k: v for k, v in extra.items() if k not in {PER_RANK, WHOLE, "lazy_offload"}}
        if rest:
            knobs["extra-settings"] = rest
        return knobs

    def tier_reading(self, deltas: Mapping[str, float], gauges: Mapping[str, float]) -> TierReading:
        counters = {field: deltas[name] for field, name in TIER_COUNTERS.items() if name in deltas}
        counters |= {field: gauges[name] for field, name in TIER_GAUGES.items() if name in gauges}
        loaded = counters.get("blocks_loaded")
        if loaded is not None:  # the blocks it restored to the engine: its side of the hit figure, in blocks
            return TierReading(counters, hit_blocks=loaded)
        if not counters:
            return TierReading(absent=f"no SimpleCPUOffloadConnector counter ({LOAD_BLOCKS}) in the replay's metrics")
        return TierReading(counters, absent=f"no {LOAD_BLOCKS} counter: the offload counters count bytes, not tokens")

    def knobs_from_connector(
        self, configs: list[dict[str, Any]], points: list[Point], handed: Sequence[ArmCapture] = ()
    ) -> dict[str, Any]:
        """The vllm-simple arm's sizing knobs that rebuild the captured SimpleCPUOffloadConnector JSON."""
        extras = [c.get("kv_connector_extra_config") for c in configs]
        if not extras or not all(isinstance(e, dict) for e in extras):
            raise ValueError("no connector JSON with kv_connector_extra_config was captured")
        knobs: dict[str, Any] = {}
        first: dict[str, Any] = extras[0]  # type: ignore[assignment]  # every one is a dict: checked above
        setting: Literal["cpu_bytes_to_use_per_rank", "cpu_bytes_to_use"] = WHOLE if WHOLE in first else PER_RANK
        captured = [e.get(setting) for e in extras if isinstance(e, dict)]
        units: tuple[Literal["GB", "GiB"], ...] = ("GB", "GiB")
        for name in units:
            # the sizes spec() computes for each point under these knobs
            expect = [self.spec(VllmSimpleArm(size_setting=setting, budget_unit=name), p) for p in points]
            if captured == [s.cpu_bytes if setting == WHOLE else s.cpu_bytes_per_rank for s in expect]:
                knobs = {"size-setting": setting, "budget-unit": name}
                break
            if setting == WHOLE and captured == [s.cpu_bytes_per_rank for s in expect]:
                # a rank's share under the server-wide name, which vLLM divides by the engine's tp x pp again:
                # slurmx passes it as the per-rank setting it is (check names the difference, for review)
                knobs = {"size-setting": PER_RANK, "budget-unit": name}
                break
        else:
            raise ValueError(f"{setting} follows neither GB nor GiB of the point's DRAM budget")
        # lazy_offload: one value, or one per attention layout (a DP-attention point's own)
        seen: dict[bool, set[str]] = {}
        for e, p in zip(extras, points):
            seen.setdefault(p.dp_attn, set()).add(json.dumps(e.get("lazy_offload") if isinstance(e, dict) else None))
        if any(len(values) > 1 for values in seen.values()):
            raise ValueError("lazy_offload differs between points of one attention layout")
        lazy = {dp: json.loads(values.pop()) for dp, values in seen.items()}
        if (plain := lazy.get(False, lazy.get(True))) is not None:
            knobs["lazy-offload"] = plain
        if False in lazy and lazy.get(True, plain) != plain:
            knobs["lazy-offload-dp-attn"] = lazy[True]
        rest = sorted({k for e in extras if isinstance(e, dict) for k in e} - {setting, PER_RANK, "lazy_offload"})
        for name in rest:  # passed as written, when every point passes one value
            values = {json.dumps(e.get(name), sort_keys=True) for e in extras if isinstance(e, dict)}
            if len(values) > 1 or not isinstance(first.get(name), (str, int, float, bool)):
                raise ValueError(f"connector setting {name} differs between points or is not a plain value")
            knobs.setdefault("extra-settings", {})[name] = first[name]
        # slurmx's defaults are left out, so an arm reads as what differs from them
        defaults = {"size-setting": PER_RANK, "budget-unit": "GB"}
        return {k: v for k, v in knobs.items() if defaults.get(k) != v}


BACKEND = VllmSimple()
