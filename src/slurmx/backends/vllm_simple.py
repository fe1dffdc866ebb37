"""vLLM's own SimpleCPUOffloadConnector: per-rank bytes from the point's budget; no server of its own."""

from __future__ import annotations

from collections.abc import Mapping

from slurmx.backends.base import Arm, BackendSpec, BaseBackend, TierReading, backend_version
from slurmx.engines.base import Engine, KvOffload
from slurmx.plan import Point
from slurmx.process import ServerPorts


class VllmSimpleSpec(BackendSpec):
    cpu_bytes_per_rank: int


class VllmSimple(BaseBackend[VllmSimpleSpec]):
    name = "vllm-simple"
    spec_model = VllmSimpleSpec
    connector = "SimpleCPUOffloadConnector"

    def spec(self, arm: Arm, point: Point) -> VllmSimpleSpec:
        # the budget is one server's (a multinode point's: one prefill worker's, plan's multinode rule),
        # shared by that server's GPU ranks
        per_rank = int(point.total_cpu_dram_gb * 1e9 / point.server_gpus)
        return VllmSimpleSpec(name=self.name, version=backend_version(point), cpu_bytes_per_rank=per_rank)

    def refusal(self, engine: Engine) -> str | None:
        if engine.name != "vllm":  # the connector is part of vLLM itself
            return f"kv-offload-backend {self.name} is vLLM's own CPU offload: engine {engine.name} has none"
        return None

    def offload(self, spec: VllmSimpleSpec, ports: ServerPorts, engine: str) -> KvOffload | None:
        assert self.connector is not None
        return KvOffload(self.connector, {"cpu_bytes_to_use_per_rank": spec.cpu_bytes_per_rank})

    def tier_reading(self, deltas: Mapping[str, float], gauges: Mapping[str, float]) -> TierReading:
        # vLLM's own CPU offload counters; they count bytes, so the tier side has no token figure
        names = {
            "bytes_cpu_to_gpu": "vllm:kv_offload_bytes_cpu_to_gpu",
            "bytes_gpu_to_cpu": "vllm:kv_offload_bytes_gpu_to_cpu",
        }
        counters = {field: deltas[name] for field, name in names.items() if name in deltas}
        if not counters:
            return TierReading(absent="no vLLM CPU offload counter (vllm:kv_offload_bytes_*) in the replay's metrics")
        return TierReading(
            counters, absent="vLLM's CPU offload counters count bytes, not tokens: no tier-side hit figure"
        )


BACKEND = VllmSimple()
