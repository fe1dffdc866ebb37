"""ATOM's server metrics in result.json against InferenceX's own aggregation (utils/agentic/aggregation, whose
backends/atom.py adapter chooses itself by the `atom:` names), run as the oracle (tests/helpers/inferencex_results).

ATOM cannot run here (its kernels need AMD Instinct GPUs): tests/data/atom/atom_metrics_{before,after}.prom are
ATOM's /metrics as its exporter renders it (README there), and the replay's aiperf export of them is built as aiperf
0.13 writes server_metrics_export.json (a counter's window increase as stats.total under the name without `_total`,
a gauge's avg/min/max over the scrapes, no labels key for a series without labels). The records and run aggregate
are tests/data/aiperf's real replay. On those, and on generated ATOM windows (zero-token windows, no LMCache
traffic, a counter reset), InferenceX and slurmx agree on every field InferenceX writes, and slurmx's own reading of
the two scrapes (its scrape-delta source) gives the same cache figures as the export.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from slurmx.results import prometheus
from slurmx.results.aggregate import ReplayWindow, RunMeta, build_result
from tests.helpers.inferencex_results import POINT, Oracle, compare
from tests.helpers.points import point_from_row

DATA = Path(__file__).resolve().parents[1] / "data"
ATOM = DATA / "atom"
REPLAY = DATA / "aiperf" / "lmcache-replay"  # real aiperf records and run aggregate
ENDPOINT = "http://127.0.0.1:8888/metrics"
WINDOW_S = 3601.0  # the scrapes' refresh timestamps, one hour apart
# the kimik3-fp4-mi355x-atom-agentic-mtp LMCache point's identity (its budget: 257 GB)
ATOM_POINT: dict[str, Any] = {
    **POINT, "image": "rocm/atom-dev:ubuntu24.04_py3.12_pytorch_release_2.10.0_kimi_k3_agentic_0820",
    "model": "moonshotai/Kimi-K3", "model-prefix": "kimik3", "framework": "atom", "runner": "mi355x-amds", "tp": 8,
    "spec-decoding": "mtp", "conc": 8, "kv-offloading": "dram", "kv-offload-backend": {"name": "lmcache", "version": "0.4.5"},
    "total-cpu-dram-gb": 257, "exp-name": "kimik3_tp8_conc8_kvdram-lmcache_spec-mtp",
}  # fmt: skip


def _samples(text: str) -> dict[str, float]:
    return {s.name: s.value for s in prometheus.iter_samples(text)}


def _help(text: str) -> dict[str, str]:
    return {p[2]: p[3] for line in text.splitlines() if (p := line.split(" ", 3))[:2] == ["#", "HELP"]}


def aiperf_export(before: str, after: str) -> dict[str, Any]:
    """server_metrics_export.json of a window between two scrapes, in aiperf 0.13's shape."""
    start, end, docs = _samples(before), _samples(after), _help(after)
    metrics: dict[str, Any] = {}
    for name, value in end.items():
        if name.endswith("_total"):  # prometheus_client's counter sample; aiperf names the family
            family = name.removesuffix("_total")
            total = value - start.get(name, 0.0)
            total = value if total < 0 else total  # a reset: the counter counted from zero
            stats: dict[str, float] = {"total": total, "rate": total / WINDOW_S}
            metrics[family] = {"type": "counter", "description": docs.get(name, ""),
                               "series": [{"endpoint_url": ENDPOINT, "stats": stats}]}  # fmt: skip
        else:
            seen = [start.get(name, value), value]
            stats = {"avg": sum(seen) / 2, "min": min(seen), "max": max(seen)}
            metrics[name] = {"type": "gauge", "description": docs.get(name, ""),
                             "series": [{"endpoint_url": ENDPOINT, "stats": stats}]}  # fmt: skip
    return {"schema_version": "1.1", "aiperf_version": "0.13.0", "metrics_phase": "profiling", "metrics": metrics}


def _artifacts(root: Path, before: str, after: str) -> Path:
    artifacts = root / "aiperf_artifacts"
    artifacts.mkdir(parents=True)
    for name in ("profile_export.jsonl", "profile_export_aiperf.json", "server_metrics_export.csv"):
        shutil.copy(REPLAY / name, artifacts / name)
    (artifacts / "server_metrics_export.json").write_text(json.dumps(aiperf_export(before, after)))
    return root


def test_atoms_metrics_are_aggregated_as_by_inferencex(oracle: Oracle, tmp_path: Path) -> None:
    before, after = ((ATOM / f"atom_metrics_{w}.prom").read_text() for w in ("before", "after"))
    result, theirs = compare(oracle, _artifacts(tmp_path, before, after), ATOM_POINT)
    assert theirs["validation"] == [] and theirs["server_metrics"]["rc"] == 0, theirs
    server = theirs["agg"]["server_metrics"]
    assert server["adapter"] == "atom" and result.server_metrics.adapter == "atom"
    # the window's deltas of ATOM's counters (after - before of the fixture): admitted prefix hits over tokens
    # considered, LMCache loads over the same
    cache = result.server_metrics.cache
    assert cache.gpu_cache_hit_rate == pytest.approx(58355712 / (71834112 - 96512))
    assert cache.external_cache_hit_rate == pytest.approx(9437184 / (71834112 - 96512))
    assert cache.overall_cache_hit_rate == cache.gpu_cache_hit_rate  # ATOM's admitted hits include LMCache's loads
    assert result.server_metrics.kv_cache.gpu_usage_pct == pytest.approx(0.86)
    assert result.server_metrics.tokens.prompt_total == 71834112 - 96512
    # slurmx's own source, the two scrapes, reads the same window
    scraped = build_result(
        point_from_row(ATOM_POINT), tmp_path / "aiperf_artifacts", run=RunMeta(sweep_id="s"),
        window=ReplayWindow(engine_metrics_before=before, engine_metrics_after=after),
    )  # fmt: skip
    assert scraped.slurmx is not None and scraped.slurmx.engine_metrics_source == "scrape-delta"
    assert scraped.server_metrics.cache.model_dump() == cache.model_dump()
    assert scraped.server_metrics.tokens.prompt_total == result.server_metrics.tokens.prompt_total


COUNTERS = ("prompt_tokens", "generation_tokens", "prefix_cache_cached_tokens", "prefix_cache_full_tokens",
            "lmcache_loaded_tokens", "requests_finished")  # fmt: skip


@st.composite
def window(draw: st.DrawFn) -> tuple[str, str]:
    """Two scrapes of ATOM's engine counters and its KV usage gauge: a window with no tokens, no LMCache traffic,
    cached tokens up to every token considered, or a counter that reset (the engine restarted)."""
    start = {c: draw(st.integers(0, 10**7)) for c in COUNTERS}
    full = draw(st.sampled_from([0, draw(st.integers(1, 10**8))]))
    cached = draw(st.integers(0, full))
    loaded = draw(st.sampled_from([0, draw(st.integers(0, cached))]))
    delta = {"prefix_cache_full_tokens": full, "prefix_cache_cached_tokens": cached, "lmcache_loaded_tokens": loaded,
             "prompt_tokens": full, "generation_tokens": draw(st.integers(0, 10**6)),
             "requests_finished": draw(st.integers(0, 5000))}  # fmt: skip
    reset = draw(st.sampled_from([None, *COUNTERS]))
    end = {c: (delta[c] if c == reset else start[c] + delta[c]) for c in COUNTERS}
    usage = (draw(st.floats(0, 1)), draw(st.floats(0, 1)))

    def text(values: dict[str, int], ratio: float) -> str:
        lines = [f"# TYPE atom:{c}_total counter\natom:{c}_total {v:.1f}" for c, v in values.items()]
        return "\n".join([*lines, f"# TYPE atom:kv_cache_usage_ratio gauge\natom:kv_cache_usage_ratio {ratio!r}", ""])

    return text(start, usage[0]), text(end, usage[1])


@seed(20261224)
@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
@given(scrapes=window())
def test_generated_atom_windows_are_aggregated_as_by_inferencex(
    oracle: Oracle, tmp_path: Path, scrapes: tuple[str, str]
) -> None:
    root = tmp_path / "case"
    shutil.rmtree(root, ignore_errors=True)
    result, theirs = compare(oracle, _artifacts(root, *scrapes), ATOM_POINT)
    assert "agg" in theirs and theirs["agg"]["server_metrics"]["adapter"] == "atom", theirs
