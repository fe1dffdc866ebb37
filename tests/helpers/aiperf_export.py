"""aiperf 0.13's server_metrics_export.json of one replay window between two scrapes of an engine's /metrics, one series
per label set: a counter's window increase as stats.total under its name without `_total` (its value after a reset),
a gauge's avg/min/max over the two scrapes, `labels` on a series that has any (as tests/data/aiperf's real export)."""

from __future__ import annotations

from typing import Any

from slurmx.results import prometheus

ENDPOINT = "http://127.0.0.1:8888/metrics"


def _help(text: str) -> dict[str, str]:
    return {p[2]: p[3] for line in text.splitlines() if (p := line.split(" ", 3))[:2] == ["#", "HELP"]}


def export_of(before: str, after: str, window_s: float) -> dict[str, Any]:
    start = {(s.name, s.labels): s.value for s in prometheus.iter_samples(before)}
    docs = _help(after)
    metrics: dict[str, Any] = {}
    for s in prometheus.iter_samples(after):
        labels = {"labels": dict(s.labels)} if s.labels else {}
        if s.name.endswith("_total"):
            family, kind = s.name.removesuffix("_total"), "counter"
            total = s.value - start.get((s.name, s.labels), 0.0)
            stats: dict[str, float] = {"total": s.value if total < 0 else total}
            stats["rate"] = stats["total"] / window_s
        else:
            family, kind = s.name, "gauge"
            seen = [start.get((s.name, s.labels), s.value), s.value]
            stats = {"avg": sum(seen) / 2, "min": min(seen), "max": max(seen)}
        entry = metrics.setdefault(family, {"type": kind, "description": docs.get(s.name, ""), "series": []})
        entry["series"].append({"endpoint_url": ENDPOINT, **labels, "stats": stats})
    return {"schema_version": "1.1", "aiperf_version": "0.13.0", "metrics_phase": "profiling", "metrics": metrics}
