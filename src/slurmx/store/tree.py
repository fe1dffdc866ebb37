"""Layout of the shared results tree; the only place that knows file names.

results/<config-key>/<sweep-id>/sweep.json
results/<config-key>/<sweep-id>/points/<point-id>/{point.json,state.json,result.json,lock.json,trace.jsonl,
                                                    commands/,logs/,aiperf/,telemetry/,nodes/,attempts/<n>/}
results/<config-key>/<sweep-id>/points/<point-id>/repeats/<n>/{state.json,result.json,...}   repeat n >= 2

Repeat 1 of a point is the point's own directory, so a sweep without repeats looks as it always did.
An array task names what it runs by member id: the point id, or "<point-id>.r<n>" for repeat n >= 2.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Every name of the tree, here only (file names below a point's directory included).
SWEEP_JSON = "sweep.json"
SUBMITIT = "submitit"
POINTS = "points"
POINT_JSON = "point.json"
STATE_JSON = "state.json"
RESULT_JSON = "result.json"
PREVIOUS_RESULT = "result.json.{stamp}.prev"  # what `slurmx rebuild` replaced; collect reads only RESULT_JSON
LOCK_JSON = "lock.json"
TRACE_JSONL = "trace.jsonl"
TEARDOWN_JSON = "teardown.json"
TEARDOWN_REPLAY_JSON = "teardown-replay.json"
COMMANDS = "commands"
LOGS = "logs"
AIPERF = "aiperf"
ROUND = "round-{k}"  # under aiperf/: one full cold replay of a point run until certified (`--until-certified`)
TELEMETRY = "telemetry"
NODES = "nodes"
ATTEMPTS = "attempts"
REPEATS = "repeats"
_MEMBER_SEP = ".r"
# What a point's directory holds of one attempt; a requeue moves it under attempts/<n>/ first.
ATTEMPT_FILES = (LOGS, COMMANDS, AIPERF, TRACE_JSONL, TEARDOWN_JSON, TEARDOWN_REPLAY_JSON, LOCK_JSON, RESULT_JSON)


def member_id(point_id: str, repeat: int = 1) -> str:
    return point_id if repeat == 1 else f"{point_id}{_MEMBER_SEP}{repeat}"


def parse_member(member: str) -> tuple[str, int]:
    """(point id, repeat) of a member id."""
    point_id, sep, repeat = member.rpartition(_MEMBER_SEP)
    if sep and repeat.isdigit():
        return point_id, int(repeat)
    return member, 1


@dataclass(frozen=True)
class PointDir:
    """One repeat of a point: repeat 1 is the point's directory, repeat n >= 2 lies under its repeats/."""

    path: Path

    @property
    def _is_repeat(self) -> bool:
        return self.path.parent.name == REPEATS and self.path.name.isdigit()

    @property
    def root(self) -> Path:
        """The point's own directory (repeat 1's), where point.json lives."""
        return self.path.parent.parent if self._is_repeat else self.path

    @property
    def point_id(self) -> str:
        return self.root.name

    @property
    def repeat(self) -> int:
        return int(self.path.name) if self._is_repeat else 1

    @property
    def member_id(self) -> str:
        return member_id(self.point_id, self.repeat)

    def repeat_dir(self, repeat: int) -> PointDir:
        return PointDir(self.root if repeat == 1 else self.root / REPEATS / str(repeat))

    @property
    def point_json(self) -> Path:
        return self.root / POINT_JSON

    @property
    def state_json(self) -> Path:
        return self.path / STATE_JSON

    @property
    def result_json(self) -> Path:
        return self.path / RESULT_JSON

    def previous_result(self, stamp: str) -> Path:
        return self.path / PREVIOUS_RESULT.format(stamp=stamp)

    @property
    def commands(self) -> Path:
        return self.path / COMMANDS

    @property
    def logs(self) -> Path:
        return self.path / LOGS

    @property
    def aiperf(self) -> Path:
        return self.path / AIPERF

    def aiperf_round(self, k: int) -> Path:
        """Round k's artifacts (1 first) of a point replayed in rounds until certified."""
        return self.aiperf / ROUND.format(k=k)

    @property
    def lock_json(self) -> Path:
        return self.path / LOCK_JSON

    @property
    def trace_jsonl(self) -> Path:
        return self.path / TRACE_JSONL

    @property
    def telemetry(self) -> Path:
        return self.path / TELEMETRY

    @property
    def nodes(self) -> Path:
        """A multinode point's per-node records (rendezvous, each node's own supervisor's files)."""
        return self.path / NODES

    def attempt(self, attempt: int) -> Path:
        """Where an earlier attempt's files are kept after a requeue."""
        return self.path / ATTEMPTS / str(attempt)


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
        return self.path / SWEEP_JSON

    @property
    def submitit(self) -> Path:
        return self.path / SUBMITIT

    def slurm_log(self, job_id: str) -> Path:
        """Slurm's output of one job or array task (submitit's name; stderr goes there too)."""
        return self.submitit / f"{job_id}_0_log.out"

    @property
    def lock(self) -> Path:
        return self.path.parent / ".submit.lock"

    def point(self, point_id: str, repeat: int = 1) -> PointDir:
        return PointDir(self.path / POINTS / point_id).repeat_dir(repeat)

    def member(self, member: str) -> PointDir:
        """The directory of an array task's member id (a point id, or "<point-id>.r<n>")."""
        return self.point(*parse_member(member))

    def points(self) -> Iterator[PointDir]:
        root = self.path / POINTS
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

    @property
    def aggregates_json(self) -> Path:
        """Per point: every repeat's values, their mean and interval, and the arm ratios (written by collect)."""
        return self.path / "aggregates.json"

    @property
    def report_html(self) -> Path:
        return self.path / "report.html"

    @property
    def inferencex_json(self) -> Path:
        """InferenceX's agg_<key>.json: its list of aggregates (written by collect --format inferencex)."""
        return self.path / f"agg_{self.config_key}.json"


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
                if (sweep / SWEEP_JSON).exists():
                    yield SweepDir(sweep)


def round_dirs(aiperf: Path) -> list[Path]:
    """A point's aiperf/round-<k>/ directories in round order; empty for a point replayed once (aiperf/ itself)."""
    prefix = ROUND.format(k="")
    found = [(int(d.name[len(prefix) :]), d) for d in aiperf.glob(f"{prefix}*") if d.name[len(prefix) :].isdigit()]
    return [d for _, d in sorted(found)]
