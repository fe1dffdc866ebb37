"""No KV offload: the engine's own cache only (the baseline arm)."""

from __future__ import annotations

from slurmx.backends.base import Arm, BackendSpec, BaseBackend
from slurmx.plan import Point


class NoneSpec(BackendSpec):
    pass


class NoOffload(BaseBackend[NoneSpec]):
    name = "none"
    spec_model = NoneSpec

    def spec(self, arm: Arm, point: Point) -> NoneSpec:
        return NoneSpec(name=self.name)


BACKEND = NoOffload()
