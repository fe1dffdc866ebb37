"""Layout of the shared results tree; the only place that knows file names.

results/<config-key>/<sweep-id>/sweep.json
results/<config-key>/<sweep-id>/points/<point-id>/{point.json,state.json,result.json,commands/,logs/,aiperf/}
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PointDir:
    path: Path

    @property
    def point_id(self) -> str:
        return self.path.name

    @property
    def point_json(self) -> Path:
        return self.path / "point.json"

    @property
    def state_json(self) -> Path:
        return self.path / "state.json"

    @property
    def result_json(self) -> Path:
        return self.path / "result.json"

    @property
    def commands(self) -> Path:
        return self.path / "commands"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def aiperf(self) -> Path:
        return self.path / "aiperf"


@dataclass(frozen=True)
class SweepDir:
    path: Path

    @property
    def config_key(self) -> str:
        return self.path.parent.name

    @property
    def sweep_id(self) -> str:
        return self.path.name

    @property
    def sweep_json(self) -> Path:
        return self.path / "sweep.json"

    @property
    def submitit(self) -> Path:
        return self.path / "submitit"

    def slurm_log(self, job_id: str) -> Path:
        """Slurm's output of one job or array task (submitit's name; stderr goes there too)."""
        return self.submitit / f"{job_id}_0_log.out"

    @property
    def lock(self) -> Path:
        return self.path.parent / ".submit.lock"

    def point(self, point_id: str) -> PointDir:
        return PointDir(self.path / "points" / point_id)

    def points(self) -> Iterator[PointDir]:
        root = self.path / "points"
        if root.is_dir():
            for child in sorted(root.iterdir()):
                if child.is_dir():
                    yield PointDir(child)

    @property
    def summary_csv(self) -> Path:
        return self.path / "summary.csv"

    @property
    def summary_json(self) -> Path:
        return self.path / "summary.json"

    @property
    def plots(self) -> Path:
        return self.path / "plots"


@dataclass(frozen=True)
class ResultsTree:
    root: Path

    def sweep(self, config_key: str, sweep_id: str) -> SweepDir:
        return SweepDir(self.root / config_key / sweep_id)

    def key_lock(self, config_key: str) -> Path:
        return self.root / config_key / ".submit.lock"

    def sweeps(self, config_key: str | None = None) -> Iterator[SweepDir]:
        """Every sweep (a directory holding sweep.json), optionally of one key."""
        if not self.root.is_dir():
            return
        keys = [self.root / config_key] if config_key else sorted(self.root.iterdir())
        for key_dir in keys:
            if not key_dir.is_dir():
                continue
            for sweep in sorted(key_dir.iterdir()):
                if (sweep / "sweep.json").exists():
                    yield SweepDir(sweep)
