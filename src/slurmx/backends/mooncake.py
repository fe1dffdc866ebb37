"""Mooncake store: a master process and MooncakeStoreConnector (rendered and validated; no RDMA here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from slurmx.backends.base import Arm, BackendSpec, BaseBackend, TierReading, backend_version
from slurmx.engines import DEFAULT as DEFAULT_ENGINE
from slurmx.engines.base import KvOffload
from slurmx.flags import Flags, render_flags
from slurmx.plan import Point
from slurmx.process import Process, ServerPorts
from slurmx.runtimes.base import Runtime

TIER_ABSENT = "Mooncake's store counters are not collected: slurmx scrapes no Mooncake endpoint (never run here)"


class MooncakeArm(Arm):
    master_flags: Flags = Field(default_factory=dict)
    load_failure_policy: Literal["recompute", "fail"] = "recompute"
    distribution: str = "mooncake-transfer-engine"  # the wheel built for the image's CUDA major


class MooncakeSpec(BackendSpec):
    per_rank_gb: float
    master_flags: list[str] = []
    load_failure_policy: str
    distribution: str = "mooncake-transfer-engine"


class Mooncake(BaseBackend[MooncakeSpec]):
    name = "mooncake"
    arm_model = MooncakeArm
    spec_model = MooncakeSpec
    port_names = ("mooncake-master",)
    connector = "MooncakeStoreConnector"
    # kv-offload-backend.version pins this wheel by default (vLLM's docs: the CUDA 12 build); CUDA 13 images
    # need mooncake-transfer-engine-cuda13, which the recipe arm names as `distribution`
    distribution = "mooncake-transfer-engine"

    def distribution_of(self, spec: MooncakeSpec) -> str | None:
        return spec.distribution

    def import_checks(self, spec: MooncakeSpec, engine: str = DEFAULT_ENGINE) -> list[str]:
        return ["mooncake.store"]  # what MooncakeStoreConnector imports: a wheel for the wrong CUDA fails here

    def spec(self, arm: Arm, point: Point) -> MooncakeSpec:
        assert isinstance(arm, MooncakeArm)
        return MooncakeSpec(
            name=self.name,
            version=backend_version(point),
            per_rank_gb=round(point.total_cpu_dram_gb / point.server_gpus, 3),  # each rank brings one segment
            master_flags=render_flags(arm.master_flags),
            load_failure_policy=arm.load_failure_policy,
            distribution=arm.distribution,
            startup_timeout_s=arm.startup_timeout_s,
        )

    def servers(self, spec: MooncakeSpec, ports: ServerPorts, runtime: Runtime, env: dict[str, str]) -> list[Process]:
        argv = [runtime.mooncake_master_bin, "--port", str(ports["mooncake-master"]), *spec.master_flags]
        return [Process("mooncake-master", runtime.wrap(argv, "mooncake-master"), {}, None, 60)]

    def offload(self, spec: MooncakeSpec, ports: ServerPorts, engine: str) -> KvOffload | None:
        settings = {
            "master_server_address": f"127.0.0.1:{ports['mooncake-master']}",
            "global_segment_size_gb": spec.per_rank_gb,
        }
        return KvOffload(self.connector, settings, load_failure_policy=spec.load_failure_policy)

    def tier_reading(self, deltas: Mapping[str, float], gauges: Mapping[str, float]) -> TierReading:
        # slurmx scrapes no Mooncake endpoint (metrics_urls is empty): Mooncake cannot run on the local
        # CPU stack, so no counter name of its store could be verified. The engine's side (its external
        # prefix-cache hit tokens) still stands and says whether the tier served anything.
        return TierReading(absent=TIER_ABSENT)


BACKEND = Mooncake()
