"""Mooncake store: a master process and MooncakeStoreConnector (rendered and validated; no RDMA here)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from slurmx.backends.base import Arm, BackendSpec, BaseBackend, backend_version
from slurmx.flags import Flags, render_flags
from slurmx.plan import Point
from slurmx.process import Process, ServerPorts
from slurmx.runtimes.base import Runtime


class MooncakeArm(Arm):
    master_flags: Flags = Field(default_factory=dict)
    load_failure_policy: Literal["recompute", "fail"] = "recompute"


class MooncakeSpec(BackendSpec):
    per_rank_gb: float
    master_flags: list[str] = []
    load_failure_policy: str


class Mooncake(BaseBackend[MooncakeSpec]):
    name = "mooncake"
    arm_model = MooncakeArm
    spec_model = MooncakeSpec
    port_names = ("mooncake-master",)
    connector = "MooncakeStoreConnector"

    def spec(self, arm: Arm, point: Point) -> MooncakeSpec:
        assert isinstance(arm, MooncakeArm)
        return MooncakeSpec(
            name=self.name,
            version=backend_version(point),
            per_rank_gb=round(point.total_cpu_dram_gb / point.tp, 3),
            master_flags=render_flags(arm.master_flags),
            load_failure_policy=arm.load_failure_policy,
            startup_timeout_s=arm.startup_timeout_s,
        )

    def servers(self, spec: MooncakeSpec, ports: ServerPorts, runtime: Runtime, env: dict[str, str]) -> list[Process]:
        argv = [runtime.mooncake_master_bin, "--port", str(ports["mooncake-master"]), *spec.master_flags]
        return [Process("mooncake-master", runtime.wrap(argv, "mooncake-master"), {}, None, 60)]

    def connector_config(self, spec: MooncakeSpec, ports: ServerPorts) -> dict[str, Any] | None:
        return {
            "kv_connector": self.connector,
            "kv_role": "kv_both",
            "kv_load_failure_policy": spec.load_failure_policy,
            "kv_connector_extra_config": {
                "master_server_address": f"127.0.0.1:{ports['mooncake-master']}",
                "global_segment_size_gb": spec.per_rank_gb,
            },
        }


BACKEND = Mooncake()
