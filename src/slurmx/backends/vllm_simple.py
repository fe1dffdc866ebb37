"""vLLM's own SimpleCPUOffloadConnector: per-rank bytes from the point's budget; no server of its own."""

from __future__ import annotations

from typing import Any

from slurmx.backends.base import Arm, BackendSpec, BaseBackend, backend_version
from slurmx.plan import Point
from slurmx.process import ServerPorts


class VllmSimpleSpec(BackendSpec):
    cpu_bytes_per_rank: int


class VllmSimple(BaseBackend[VllmSimpleSpec]):
    name = "vllm-simple"
    spec_model = VllmSimpleSpec

    def spec(self, arm: Arm, point: Point) -> VllmSimpleSpec:
        per_rank = int(point.total_cpu_dram_gb * 1e9 / point.gpus)
        return VllmSimpleSpec(name=self.name, version=backend_version(point), cpu_bytes_per_rank=per_rank)

    def connector_config(self, spec: VllmSimpleSpec, ports: ServerPorts) -> dict[str, Any] | None:
        return {
            "kv_connector": "SimpleCPUOffloadConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"cpu_bytes_to_use_per_rank": spec.cpu_bytes_per_rank},
        }


BACKEND = VllmSimple()
