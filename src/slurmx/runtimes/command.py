"""The point's work is one user command from the cluster profile (cluster smoke tests); no serving stack."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Self

from slurmx.config.clusters import RuntimeProfile
from slurmx.runtimes.base import Runtime


@dataclass(frozen=True)
class CommandRuntime(Runtime):
    kind: ClassVar[str] = "command"
    serves: ClassVar[bool] = False

    @classmethod
    def from_profile(cls, profile: RuntimeProfile, image: str | None) -> Self:
        return cls(image=image, command=tuple(profile.command or ()))
