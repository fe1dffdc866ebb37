"""An engine's own host-memory KV tier, as InferenceX's master config names it (`kv-offload-backend: native`).

TensorRT-LLM's TRT keys (minimaxm3-fp4-b{200,300}-trtllm-agentic-mtp) offload to the KV cache manager's secondary
pool in host memory: `kv_cache_config.host_cache_size` bytes in the engine's extra-options file, which InferenceX's
scripts pin per TP (not derived from TOTAL_CPU_DRAM_GB). The recipe sets that key by its per-TP rules, so the arm
has no knobs and no server; its evidence is the engine's own host-pool gauge and transfer counters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slurmx.backends.base import Arm, ArmCapture, BackendSpec, BaseBackend, TierReading, backend_version
from slurmx.engines.base import Engine
from slurmx.plan import Point

NAME = "native"
ENGINES = frozenset({"trt"})  # the engines whose own host tier this is
# TRT-LLM's MetricsCollector counters of the host pool (names without `_total`)
TRANSFERS = {"bytes_cpu_to_gpu": "trtllm_kv_cache_onboard_bytes", "bytes_gpu_to_cpu": "trtllm_kv_cache_offload_bytes"}
HOST_GAUGE = "trtllm_kv_cache_host_utilization"


class NativeSpec(BackendSpec):
    pass


class Native(BaseBackend[NativeSpec]):
    name = NAME
    spec_model = NativeSpec

    def spec(self, arm: Arm, point: Point) -> NativeSpec:
        return NativeSpec(name=self.name, version=backend_version(point))

    def refusal(self, engine: Engine) -> str | None:
        if engine.name not in ENGINES:
            return f"kv-offload-backend {NAME} is an engine's own host tier ({', '.join(sorted(ENGINES))}), not {engine.name}'s"
        return None

    def knobs_from_connector(
        self, configs: list[dict[str, Any]], points: list[Point], handed: Sequence[ArmCapture] = ()
    ) -> dict[str, Any]:
        """No knobs: the host pool's size is a key of the engine's file, which the recipe's rules set."""
        if len(configs) != len(points):
            raise ValueError("the engine's file names no host_cache_size on every point of the arm")
        return {}

    def tier_reading(self, deltas: Mapping[str, float], gauges: Mapping[str, float]) -> TierReading:
        counters = {name: deltas[metric] for name, metric in TRANSFERS.items() if metric in deltas}
        if HOST_GAUGE in gauges:
            counters["host_utilization_max"] = gauges[HOST_GAUGE]
        if not counters:
            return TierReading(absent=f"the engine exported none of {', '.join([*TRANSFERS.values(), HOST_GAUGE])}")
        return TierReading(counters=counters)


BACKEND = Native()
