"""SGLang's server metrics in result.json against InferenceX's own aggregation (utils/agentic/aggregation, whose
backends/sglang.py adapter chooses itself by the `sglang:` names), run as the oracle (tests/helpers/inferencex_results).

SGLang cannot run here (no GPU; its CPU backend is a separate build): tests/data/sglang/sglang_metrics_{before,after}.prom
are SGLang's /metrics in its exporter's names and labels (README there), and the replay's aiperf export of them is
built as aiperf 0.13 writes it (tests/helpers/aiperf_export.py). The records and run aggregate are tests/data/aiperf's
real replay. On those, and on generated SGLang windows (no host-tier hits, no tokens, a counter reset), InferenceX and
slurmx agree on every field InferenceX writes: the GPU hit rate from `cached_tokens{cache_source="device"}`, the
host tier's (HiCache) from `cache_source="host"`, the overall from their sum, each over the window's prompt tokens.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from slurmx.results.aggregate import ReplayWindow, RunMeta, build_result
from tests.helpers.aiperf_export import export_of
from tests.helpers.inferencex_results import POINT, Oracle, compare
from tests.helpers.points import point_from_row

DATA = Path(__file__).resolve().parents[1] / "data"
SGLANG = DATA / "sglang"
REPLAY = DATA / "aiperf" / "lmcache-replay"  # real aiperf records and run aggregate
WINDOW_S = 3601.0
# a qwen3.5-fp8-h200-sglang-agentic-hicache-mtp point's identity (its budget: 1612 GB x 0.8)
SGLANG_POINT: dict[str, Any] = {
    **POINT, "image": "lmsysorg/sglang:nightly-dev-cu13-20260815-a5ba081f", "model": "Qwen/Qwen3.5-397B-A17B-FP8",
    "model-prefix": "qwen3.5", "precision": "fp8", "framework": "sglang", "runner": "h200-dgxc", "tp": 8,
    "spec-decoding": "mtp", "conc": 16, "kv-offloading": "dram", "kv-offload-backend": {"name": "hicache"},
    "total-cpu-dram-gb": 1289, "exp-name": "qwen3.5_tp8_conc16_kvdram-hicache_spec-mtp",
}  # fmt: skip


def _artifacts(root: Path, before: str, after: str) -> Path:
    artifacts = root / "aiperf_artifacts"
    artifacts.mkdir(parents=True)
    for name in ("profile_export.jsonl", "profile_export_aiperf.json", "server_metrics_export.csv"):
        shutil.copy(REPLAY / name, artifacts / name)
    (artifacts / "server_metrics_export.json").write_text(json.dumps(export_of(before, after, WINDOW_S)))
    return root


def test_sglangs_metrics_are_aggregated_as_by_inferencex(oracle: Oracle, tmp_path: Path) -> None:
    before, after = ((SGLANG / f"sglang_metrics_{w}.prom").read_text() for w in ("before", "after"))
    result, theirs = compare(oracle, _artifacts(tmp_path, before, after), SGLANG_POINT)
    assert theirs["validation"] == [] and theirs["server_metrics"]["rc"] == 0, theirs
    assert theirs["agg"]["server_metrics"]["adapter"] == "sglang" and result.server_metrics.adapter == "sglang"
    # the window's deltas of the fixture's counters (after - before): device hits, HiCache host hits, prompt tokens
    cache, prompt = result.server_metrics.cache, 60293120
    assert cache.gpu_cache_hit_rate == pytest.approx(42205184 / prompt)
    assert cache.cpu_cache_hit_rate == cache.external_cache_hit_rate == pytest.approx(6029312 / prompt)
    assert cache.overall_cache_hit_rate == pytest.approx((42205184 + 6029312) / prompt)
    assert cache.cached_tokens_by_source == {"device": 42205184, "host": 6029312}
    kv = result.server_metrics.kv_cache
    assert kv.gpu_usage_pct == pytest.approx(0.91) and kv.cpu_usage_pct == pytest.approx(5046272 / 12058624)
    tokens = result.server_metrics.tokens
    assert (tokens.prompt_total, tokens.prompt_by_source.computed) == (prompt, 12058624)
    # the HiCache arm's evidence: the host tier's hits among the window's prompt tokens, the host pool's gauges
    evidence = result.slurmx.evidence if result.slurmx else None
    assert evidence is not None and evidence.arm == "hicache"
    assert (evidence.prompt_tokens, evidence.local_hit_tokens, evidence.tier_tokens) == (prompt, 42205184, 6029312)
    assert evidence.tier_hit_rate == pytest.approx(6029312 / prompt) and evidence.computed_tokens == 12058624
    assert evidence.tier == {"host_used_tokens": 5046272, "host_total_tokens": 12058624}
    assert evidence.tier_side_hit_tokens is None and evidence.tier_absent_reason
    # slurmx's own source, the two scrapes, reads the same window
    scraped = build_result(
        point_from_row(SGLANG_POINT), tmp_path / "aiperf_artifacts", run=RunMeta(sweep_id="s"),
        window=ReplayWindow(engine_metrics_before=before, engine_metrics_after=after),
    )  # fmt: skip
    assert scraped.slurmx is not None and scraped.slurmx.engine_metrics_source == "scrape-delta"
    assert scraped.server_metrics.cache.model_dump() == cache.model_dump()
    assert scraped.server_metrics.tokens.model_dump() == tokens.model_dump()


COUNTERS = ("prompt_tokens", "generation_tokens", "num_requests")
SOURCES = ("device", "host")
MODES = ("prefill_compute", "prefill_cache", "decode")


@st.composite
def window(draw: st.DrawFn) -> tuple[str, str]:
    """Two scrapes of SGLang's counters and gauges: a window with no tokens (the overall hit rate is then the engine's
    own gauge's), no host-tier hits (no HiCache, or a cold host pool), hits up to every prompt token, or a counter
    that reset (the engine restarted)."""
    series = [*COUNTERS, *(f"cached:{s}" for s in SOURCES), *(f"mode:{m}" for m in MODES)]
    start = {c: draw(st.integers(0, 10**7)) for c in series}
    prompt = draw(st.sampled_from([0, draw(st.integers(1, 10**8))]))
    device = draw(st.integers(0, prompt))
    host = draw(st.sampled_from([0, draw(st.integers(0, prompt - device))]))
    delta = {"prompt_tokens": prompt, "generation_tokens": draw(st.integers(0, 10**6)),
             "num_requests": draw(st.integers(0, 5000)), "cached:device": device, "cached:host": host,
             "mode:prefill_compute": prompt - device - host, "mode:prefill_cache": device + host,
             "mode:decode": draw(st.integers(0, 10**6))}  # fmt: skip
    reset = draw(st.sampled_from([None, *series]))
    end = {c: (delta[c] if c == reset else start[c] + delta[c]) for c in series}
    gauges = [(draw(st.floats(0, 1)), draw(st.integers(0, 10**7)), draw(st.integers(1, 10**7)), draw(st.floats(0, 1)))
              for _ in range(2)]  # fmt: skip

    def text(values: dict[str, int], usage: float, used: int, total: int, hit: float) -> str:
        lines = [f'sglang:{c}_total{{tp_rank="0"}} {values[c]:.1f}' for c in COUNTERS]
        lines += [f'sglang:cached_tokens_total{{cache_source="{s}"}} {values[f"cached:{s}"]:.1f}' for s in SOURCES]
        lines += [f'sglang:realtime_tokens_total{{mode="{m}"}} {values[f"mode:{m}"]:.1f}' for m in MODES]
        lines += [f"sglang:token_usage {usage!r}", f"sglang:hicache_host_used_tokens {used:.1f}",
                  f"sglang:hicache_host_total_tokens {total:.1f}", f"sglang:cache_hit_rate {hit!r}"]  # fmt: skip
        return "\n".join([*lines, ""])

    return text(start, *gauges[0]), text(end, *gauges[1])


@seed(20261204)
@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
@given(scrapes=window())
def test_generated_sglang_windows_are_aggregated_as_by_inferencex(
    oracle: Oracle, tmp_path: Path, scrapes: tuple[str, str]
) -> None:
    root = tmp_path / "case"
    shutil.rmtree(root, ignore_errors=True)
    result, theirs = compare(oracle, _artifacts(root, *scrapes), SGLANG_POINT)
    assert "agg" in theirs and theirs["agg"]["server_metrics"]["adapter"] == "sglang", theirs


def test_collect_shows_sglangs_arms_side_by_side_with_the_host_tiers_evidence(tmp_path: Path) -> None:
    """One key's GPU-only point and its HiCache point, collected: each row's arm, its GPU hit rate and the host
    tier's tokens and share of the prompt tokens (none on the GPU-only arm, whose SGLang counts no host source)."""
    from slurmx.collect import collect as col
    from slurmx.store.tree import SweepDir
    from tests.helpers.synthetic import write_sweep

    before, after = ((SGLANG / f"sglang_metrics_{w}.prom").read_text() for w in ("before", "after"))
    gpu_only = [
        "\n".join(line for line in text.splitlines() if 'cache_source="host"' not in line and "hicache" not in line)
        for text in (before, after)
    ]
    rows = {
        "hicache": (SGLANG_POINT, (before, after)),
        "none": ({**SGLANG_POINT, "kv-offloading": "none", "kv-offload-backend": None, "total-cpu-dram-gb": 0,
                  "exp-name": "qwen3.5_tp8_conc16_kvnone_spec-mtp", "point-id": "0123456789ac"}, gpu_only),
    }  # fmt: skip
    results = []
    for arm, (row, scrapes) in rows.items():
        _artifacts(tmp_path / arm, *scrapes)
        results.append(
            build_result(point_from_row(row), tmp_path / arm / "aiperf_artifacts", run=RunMeta(sweep_id="s1"))
        )
    sweep = SweepDir(write_sweep(tmp_path / "results", "qwen3.5-fp8-h200-sglang-agentic-mtp", "s1", results))
    by_arm = {r.arm: r for r in col.collect([sweep]).rows}
    assert set(by_arm) == {"none", "hicache"}
    hicache, none = by_arm["hicache"], by_arm["none"]
    assert (hicache.tier_tokens, hicache.tier_hit_rate) == (6029312, pytest.approx(6029312 / 60293120))
    assert none.tier_tokens is None and none.tier_hit_rate is None
    assert hicache.gpu_hit_rate == none.gpu_hit_rate == pytest.approx(42205184 / 60293120)
