"""A point's aiperf artifacts as one sample: aiperf/ itself, or the pooled rounds of a point replayed until
certified (`submit --until-certified`: aiperf/round-<k>/, each a full cold replay of the point's trace).

Pooled: the profiled records of every round (every figure of result.json comes from them), the request
accounting and aiperf's counts summed (InferenceX's gate judges the whole sample), the server-metrics exports'
series side by side (counters add up, gauges keep their maximum), the export check passing only when every round
passes it, and aiperf's run-level profile: the first round's start, the last round's end, cancelled or incomplete
when any round was, the theoretical prefix-cache hits summed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmx.engines.base import EngineMetrics
from slurmx.results.requests import (
    PROFILE_JSON,
    PROFILE_JSONL,
    SERVER_METRICS_JSON,
    _load_json,
    aiperf_counts,
    load_records,
)
from slurmx.results.schema import AiperfCounts, MetricsExport, RequestAccounting
from slurmx.results.server_metrics import metrics_export
from slurmx.store.tree import round_dirs


@dataclass(frozen=True)
class Artifacts:
    """What build_result reads of a point's aiperf artifacts; `rounds` None: replayed once."""

    records: list[dict[str, Any]]
    accounting: RequestAccounting
    profile: dict[str, Any]
    server_export: dict[str, Any]
    counts: AiperfCounts
    export: MetricsExport
    rounds: int | None = None
    by_round: list[list[dict[str, Any]]] | None = None  # the records split by round (None: replayed once)


def read_artifacts(artifact_dir: Path, names: EngineMetrics) -> Artifacts:
    """aiperf/ as it is, or its rounds pooled (see the module docstring)."""
    rounds = round_dirs(artifact_dir)
    if not rounds:
        records, accounting = load_records(artifact_dir / PROFILE_JSONL)
        return Artifacts(
            records, accounting, _load_json(artifact_dir / PROFILE_JSON), _load_json(artifact_dir / SERVER_METRICS_JSON),
            aiperf_counts(artifact_dir / PROFILE_JSON), metrics_export(artifact_dir, names),
        )  # fmt: skip
    if not (rounds[-1] / PROFILE_JSONL).is_file() and len(rounds) > 1:
        rounds = rounds[:-1]  # the last round was cut before aiperf wrote a record (a cancel, the time limit)
    loaded = [load_records(d / PROFILE_JSONL) for d in rounds]
    exports = [metrics_export(d, names) for d in rounds]
    return Artifacts(
        records=[r for part, _ in loaded for r in part],
        accounting=pooled_accounting([acc for _, acc in loaded]),
        profile=pooled_profile([_load_json(d / PROFILE_JSON) for d in rounds]),
        server_export=pooled_export([_load_json(d / SERVER_METRICS_JSON) for d in rounds]),
        counts=pooled_counts([aiperf_counts(d / PROFILE_JSON) for d in rounds]),
        export=MetricsExport(
            required_prefix=exports[0].required_prefix,
            json_nonempty=all(e.json_nonempty for e in exports),
            csv_nonempty=all(e.csv_nonempty for e in exports),
            prefix_found=all(e.prefix_found for e in exports),
        ),
        rounds=len(rounds),
        by_round=[part for part, _ in loaded],
    )


def pooled_accounting(parts: list[RequestAccounting]) -> RequestAccounting:
    categories: dict[str, int] = {}
    for part in parts:
        for name, count in part.error_categories.items():
            categories[name] = categories.get(name, 0) + count
    return RequestAccounting(
        records_total=sum(p.records_total for p in parts),
        records_profiled=sum(p.records_profiled for p in parts),
        records_dropped_total=sum(p.records_dropped_total for p in parts),
        records_warmup_dropped=sum(p.records_warmup_dropped for p in parts),
        records_error_dropped=sum(p.records_error_dropped for p in parts),
        error_categories=categories,
    )


def pooled_counts(parts: list[AiperfCounts]) -> AiperfCounts:
    """Each count summed over the rounds; unknown (None) when a round lacks it; unreadable when a round is."""
    for part in parts:
        if part.unreadable is not None:
            return AiperfCounts(unreadable=part.unreadable)

    def total(name: str) -> float | None:
        values = [getattr(p, name) for p in parts]
        return None if any(v is None for v in values) else float(sum(values))

    return AiperfCounts(
        request_count=total("request_count"),
        error_request_count=total("error_request_count"),
        completed_request_count=total("completed_request_count"),
    )


def pooled_export(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The rounds' server-metrics exports as one: each metric's series of every round, side by side."""
    metrics: dict[str, dict[str, Any]] = {}
    for part in parts:
        entries = part.get("metrics") if isinstance(part, dict) else None
        for name, entry in (entries or {}).items() if isinstance(entries, dict) else ():
            if not isinstance(entry, dict):
                continue
            merged = metrics.setdefault(name, {**entry, "series": []})
            merged["series"] = [*merged["series"], *(entry.get("series") or [])]
    return {"metrics": metrics} if metrics else {}


def pooled_profile(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """aiperf's run-level profile of the whole sample: the last round's, spanning every round (module docstring)."""
    present = [p for p in parts if p]
    if not present:
        return {}
    out = dict(present[-1])
    out["start_time"] = present[0].get("start_time")
    out["was_cancelled"] = any(bool(p.get("was_cancelled", False)) for p in present)
    incomplete = [p for p in present if p.get("is_complete") is False]
    if incomplete:
        out["is_complete"] = False
        out["incomplete_reason"] = incomplete[0].get("incomplete_reason")
    summaries = [p.get("error_summary") for p in present]
    if any(isinstance(s, list) for s in summaries):
        out["error_summary"] = [item for s in summaries if isinstance(s, list) for item in s]
    hits = [p.get("theoretical_prefix_cache_hit") for p in present]
    if all(isinstance(h, dict) and _numeric(h.get("sum")) and _numeric(h.get("count")) for h in hits):
        out["theoretical_prefix_cache_hit"] = {
            "sum": sum(h["sum"] for h in hits if isinstance(h, dict)),
            "count": sum(h["count"] for h in hits if isinstance(h, dict)),
        }
    else:
        out.pop("theoretical_prefix_cache_hit", None)  # one round's figure is not the sample's
    return out


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
