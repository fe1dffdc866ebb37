"""A point's result.json rebuilt from the raw artifacts it kept, with today's code (`slurmx rebuild`): a fixed
aggregation or gate re-judges old sweeps.

Recomputed: everything `results/aggregate.py:build_result` derives from point.json, aiperf/ and
telemetry/, then the validity gate with the threshold the node recorded. Carried over from the old file,
because no artifact on disk holds them: the run's identity (attempt, job, nodes, window, versions, image
digest, threshold, repeat), the arm evidence (built on the node from the engine's argv and live logs), the
server metrics when they came from the engine's before/after scrapes (kept in memory only), and a
"partial replay" verdict (the node saw the replay end early).

The previous file stays beside the new one as `result.json.<UTC stamp>.prev` (collect reads only
`result.json`); a rebuild that would change nothing writes nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

from slurmx.errors import UserError
from slurmx.results import certify, gate
from slurmx.results.aggregate import ArtifactError, ReplayWindow, RunFacts, RunMeta, build_result
from slurmx.results.schema import Result
from slurmx.store import atomic, ledger
from slurmx.store.tree import REPEATS, PointDir, SweepDir


@dataclass(frozen=True)
class Outcome:
    """What a rebuild did (or would do) to one result.json."""

    path: Path
    status: str  # changed | unchanged | skipped
    old_valid: bool | None = None
    new_valid: bool | None = None
    old_reason: str | None = None
    new_reason: str | None = None
    old_headline: float | None = None  # E2E-normalized interactivity P90
    new_headline: float | None = None
    why: str | None = None  # a skipped point's reason
    previous: Path | None = None  # where the old file was kept

    @property
    def verdict_changed(self) -> bool:
        return self.status == "changed" and (self.old_valid, self.old_reason) != (self.new_valid, self.new_reason)

    def json(self) -> dict[str, object]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in self.__dict__.items()}


def runs_of(sweep: SweepDir, point: PointDir | None = None) -> list[PointDir]:
    """Every repeat directory with a result.json, of one point or of the whole sweep."""
    points = [point] if point is not None else list(sweep.points())
    out = []
    for p in points:
        root = p.repeat_dir(1)
        repeats = sorted((root.path / REPEATS).glob("[0-9]*"), key=lambda d: int(d.name) if d.name.isdigit() else 0)
        for run in [root, *(PointDir(d) for d in repeats if d.name.isdigit())]:
            if run.result_json.is_file():
                out.append(run)
    return out


def rebuilt(run: PointDir, old: Result) -> Result:
    """`old` rebuilt from `run`'s artifacts (ArtifactError or UserError when they are not there)."""
    record = ledger.read_point(run)
    meta = old.slurmx
    window = ReplayWindow(meta.started_at, meta.ended_at) if meta else ReplayWindow()
    run_meta = RunMeta(
        sweep_id=meta.sweep_id if meta else record.sweep_id,
        attempt=meta.attempt if meta else 1,
        slurm_job_id=meta.slurm_job_id if meta else None,
        node=meta.node if meta else None,
        nodes=tuple(meta.nodes) if meta and meta.nodes else (),
    )
    telemetry = run.telemetry if run.telemetry.is_dir() else None
    logs = sorted(run.logs.glob("engine*.log")) if run.logs.is_dir() else []
    facts = RunFacts.of(meta) if meta is not None else RunFacts()
    if record.serving is not None and (meta is None or "failed_request_threshold" not in meta.model_fields_set):
        # a result written before it recorded its threshold: the recipe's, as point.json holds it, not the default
        facts = replace(facts, failed_request_threshold=record.serving.replay.failed_request_threshold)
    new = build_result(
        record.point,
        run.aiperf,
        run=run_meta,
        window=window,
        engine_logs=logs,
        telemetry_dir=telemetry,
        facts=facts,
        policy=policy_of(old),
    )
    if meta is not None:
        _carry(old, new)
    return gate.judged(new)  # again: the evidence carried over is part of the verdict


def policy_of(result: Result) -> certify.Policy | None:
    """The certification rule a result was certified with, so a rebuild certifies by the same one (None: the
    default, for a result written before it was certified)."""
    cert = result.slurmx.certification if result.slurmx is not None else None
    if cert is None:
        return None
    width = cert.rel_width if cert.rel_width is not None else certify.DEFAULT_REL_WIDTH
    return certify.Policy(confidence=cert.confidence, rel_width=width, method=cert.method)


def _carry(old: Result, new: Result) -> None:
    """The facts of the run no kept artifact holds (see the module docstring)."""
    assert old.slurmx is not None and new.slurmx is not None
    o, n = old.slurmx, new.slurmx
    n.evidence = o.evidence  # built on the node from the live engine argv and logs
    if o.engine_metrics_source == "scrape-delta":
        new.server_metrics = old.server_metrics
        new.kv_cache_pool_tokens = old.kv_cache_pool_tokens
        new.warnings = old.warnings
        n.engine_metrics_source = o.engine_metrics_source
        n.requests_by_rank = o.requests_by_rank


def _headline(r: Result) -> float | None:
    return r.request_metrics.latency.e2e_norm_intvty.p90


def rebuild_run(run: PointDir, *, dry_run: bool = False, stamp: str | None = None) -> Outcome:
    """Rebuild one result.json; keep the old file as result.json.<stamp>.prev when it changes."""
    path = run.result_json
    try:
        old = Result.model_validate_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        return Outcome(path, "skipped", why=f"the current result.json does not read: {str(exc).splitlines()[0]}")
    try:
        new = rebuilt(run, old)
    except (ArtifactError, UserError, OSError) as exc:
        return Outcome(path, "skipped", why=str(exc).splitlines()[0])
    old_reason = old.slurmx.invalid_reason if old.slurmx else None  # the verdict as the file states it
    new_reason = new.slurmx.invalid_reason if new.slurmx else None
    facts = {
        "old_valid": old_reason is None,
        "new_valid": new_reason is None,
        "old_reason": old_reason,
        "new_reason": new_reason,
        "old_headline": _headline(old),
        "new_headline": _headline(new),
    }
    if new.dump() == old.dump():
        return Outcome(path, "unchanged", **facts)  # type: ignore[arg-type]  # the facts' types match the fields
    previous = run.previous_result(stamp or _stamp())
    if not dry_run:
        atomic.write_text(previous, path.read_text(encoding="utf-8"))  # the old file first: never lost
        atomic.write_json(path, new.dump())
    return Outcome(path, "changed", previous=previous, **facts)  # type: ignore[arg-type]  # as above


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
