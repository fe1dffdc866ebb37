"""results/server_metrics.py on aiperf's server-metrics export against InferenceX's own adapters
(utils/agentic/aggregation/server_metrics.py with backends/vllm.py and backends/sglang.py, imported in-process from
the fixture tree): every figure InferenceX writes of server_metrics is slurmx's, to 1e-12, on exports chosen for
the corners of each rule: several series per counter, statistics other than `total` standing in, a split by source
with one origin missing or summing to zero, zero queries, usage in 0..1 and in percent, offload in one direction
only, servers told apart by role, endpoint and rank labels, SGLang's tiers, host pool and hit-rate gauge."""

from __future__ import annotations

import math
from typing import Any

import pytest

from slurmx.engines import sglang, vllm
from slurmx.results.server_metrics import counters_from_export, export_sources, server_metrics_from
from tests.helpers.inferencex_aggregation import module


def _series(labels: dict[str, str], **stats: float) -> dict[str, Any]:
    return {"labels": labels, "stats": stats}


def _metric(kind: str, *series: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "series": list(series)}


def _records(*pairs: tuple[int, int]) -> list[dict[str, Any]]:
    return [
        {"metrics": {"input_sequence_length": {"value": i}, "output_sequence_length": {"value": o}}} for i, o in pairs
    ]


R0, R1 = {"engine": "0"}, {"engine": "1"}
VLLM_FULL = {
    "vllm:prompt_tokens": _metric("counter", _series(R0, total=4000.0), _series(R1, total=1001.5)),
    "vllm:generation_tokens": _metric("counter", _series(R0, sum=700.0, max=9.0), _series(R1, max=300.0, avg=2.0)),
    "vllm:prefix_cache_hits": _metric("counter", _series(R0, total=250.0), _series(R1, avg=50.0)),
    "vllm:prefix_cache_queries": _metric("counter", _series(R0, total=1000.0), _series(R1, total=500.0)),
    "vllm:external_prefix_cache_hits": _metric("counter", _series(R0, total=150.0), _series(R1, total=50.0)),
    "vllm:external_prefix_cache_queries": _metric("counter", _series(R0, total=800.0)),
    "vllm:kv_cache_usage_perc": _metric("gauge", _series(R0, max=0.4, avg=0.1), _series(R1, max=0.7, avg=0.3)),
    "vllm:cpu_kv_cache_usage_perc": _metric("gauge", _series({}, max=55.0, avg=20.0)),
    "vllm:kv_offload_bytes_gpu_to_cpu": _metric("counter", _series({}, total=4e9)),
    "vllm:kv_offload_time_gpu_to_cpu": _metric("counter", _series({}, total=2.5)),
    "vllm:kv_offload_bytes_cpu_to_gpu": _metric("counter", _series({}, total=3e9)),
}
SPLIT = {
    "vllm:prompt_tokens_by_source": _metric(
        "counter",
        _series({"source": "local_cache_hit", **R0}, total=1000.0),
        _series({"source": "local_cache_hit", **R1}, total=500.0),
        _series({"source": "external_kv_transfer"}, total=1500.0),
        _series({"source": "local_compute"}, total=2000.0),
    )
}
DYNAMO_LABELS = [
    {"labels": {"dynamo_component": "prefill", "worker_id": "w1"}, "endpoint_url": "http://p:1/metrics"},
    {"labels": {"component": "backend", "dp_rank": "3"}, "endpoint_url": "http://d:2/metrics"},
    {"labels": {"component": "decode", "engine": "1", "worker_id": "w2"}},
    {"labels": {"dynamo_component": "frontend"}},
    {"labels": {"component": "router", "dp_rank": "0", "engine": "0"}},
    {"labels": {"component": "other"}},
    {"labels": "not labels"},
]


def _by_server(name: str, kind: str, *values: float, key: str = "total") -> dict[str, Any]:
    return _metric(kind, *({**server, "stats": {key: v}} for server, v in zip(DYNAMO_LABELS, values)))


VLLM = {
    "full": {"metrics": VLLM_FULL},
    "split by source": {"metrics": {**VLLM_FULL, **SPLIT}},
    "split without external": {
        "metrics": {
            **VLLM_FULL,
            "vllm:prompt_tokens_by_source": _metric(
                "counter",
                _series({"source": "local_cache_hit"}, total=30.0),
                _series({"source": "local_compute"}, total=90.0),
            ),
        }
    },
    "split without local": {
        "metrics": {
            "vllm:prompt_tokens_by_source": _metric(
                "counter",
                _series({"source": "external_kv_transfer"}, total=30.0),
                _series({"source": "other"}, total=10.0),
            )
        }
    },
    "split summing to zero": {
        "metrics": {
            "vllm:prefix_cache_hits": _metric("counter", _series({}, total=5.0)),
            "vllm:prefix_cache_queries": _metric("counter", _series({}, total=20.0)),
            "vllm:prompt_tokens_by_source": _metric("counter", _series({"source": "local_cache_hit"}, total=0.0)),
        }
    },
    "zero queries": {
        "metrics": {
            "vllm:prefix_cache_hits": _metric("counter", _series({}, total=0.0)),
            "vllm:prefix_cache_queries": _metric("counter", _series({}, total=0.0)),
            "vllm:gpu_cache_usage_perc": _metric("gauge", _series({}, avg=85.0)),
            "vllm:kv_offload_time_cpu_to_gpu": _metric("counter", _series({}, total=0.0)),
            "vllm:kv_offload_bytes_cpu_to_gpu": _metric("counter", _series({}, total=7.0)),
        }
    },
    "usage exactly 1.5 and tiny": {
        "metrics": {
            "vllm:kv_cache_usage_perc": _metric("gauge", _series({}, max=1.5)),
            "vllm:cpu_kv_cache_usage_perc": _metric("gauge", _series({}, total=1.51)),
        }
    },
    "servers by role, endpoint and rank": {
        "metrics": {
            "vllm:prompt_tokens": _by_server("p", "counter", 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0),
            "vllm:generation_tokens": _by_server("g", "counter", 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, key="sum"),
            "vllm:prefix_cache_hits": _by_server("h", "counter", 1.0, 2.0, 0.0, 4.0, 5.0, 6.0, 7.0, key="max"),
            "vllm:prefix_cache_queries": _by_server("q", "counter", 10.0, 0.0, 30.0, 40.0, 50.0, 60.0, 70.0, key="avg"),
            "vllm:kv_cache_usage_perc": _by_server("u", "gauge", 0.5, 50.0, 0.25, 1.0, 2.0, 0.0, 0.75, key="max"),
        }
    },
    "statistics that are not numbers": {
        "metrics": {
            "vllm:prompt_tokens": _metric(
                "counter",
                {"labels": {}, "stats": {"total": None, "sum": 12.0}},
                {"labels": {}, "stats": "n/a"},
                {"labels": {}},
                {"labels": {"engine": "2"}, "stats": {"total": None}},
                {"labels": {"engine": "3"}, "stats": {"p50": 4.0}},
                {"labels": {"engine": "4"}, "stats": {"total": 30.0}},  # a usable series after the unusable ones
            ),
            "vllm:generation_tokens": _metric("counter", {"labels": {}, "stats": "n/a"}, _series({}, total=7.0)),
            "vllm:kv_cache_usage_perc": _metric(
                "gauge",
                {"labels": {}, "stats": {"max": None, "avg": 0.2}},
                {"labels": {"engine": "5"}, "stats": {"total": 0.3}},
            ),
        }
    },
    "empty": {},
}


def _theirs(export: dict[str, Any], framework: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    nested: dict[str, Any] = module("server_metrics").compute_server_metrics(
        export, framework=framework, records=records, server_log_paths=[]
    )[1]
    return nested


def _mine(export: dict[str, Any], engine: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
    metrics = engine.METRICS
    server = server_metrics_from(records, counters_from_export(export, metrics.rank_label), metrics)
    server.sources = export_sources(export, metrics)
    return server.model_dump()


def _differences(theirs: Any, mine: Any, where: str = "") -> list[str]:
    """Where `mine` differs from what InferenceX wrote (every key of theirs), numbers to 1e-12 relative."""
    if isinstance(theirs, dict):
        if not isinstance(mine, dict):
            return [f"{where}: slurmx {mine!r}, InferenceX {theirs!r}"]
        return [d for k, v in theirs.items() for d in _differences(v, mine.get(k), f"{where}.{k}")]
    if isinstance(theirs, list):
        if not isinstance(mine, list) or len(mine) != len(theirs):
            return [f"{where}: slurmx {mine!r}, InferenceX {theirs!r}"]
        return [d for i, (a, b) in enumerate(zip(theirs, mine)) for d in _differences(a, b, f"{where}[{i}]")]
    if isinstance(theirs, float) and isinstance(mine, (int, float)) and not isinstance(mine, bool):
        return [] if math.isclose(theirs, mine, rel_tol=1e-12) else [f"{where}: slurmx {mine!r}, InferenceX {theirs!r}"]
    return [] if theirs == mine and type(theirs) is type(mine) else [f"{where}: slurmx {mine!r}, InferenceX {theirs!r}"]


@pytest.mark.parametrize("case", VLLM, ids=list(VLLM))
def test_vllm_server_metrics_from_the_export_are_inferencexs(case: str) -> None:
    records = _records((100, 7), (250, 12), (30, 1))
    theirs = _theirs(VLLM[case], "vllm", records)
    assert _differences(theirs, _mine(VLLM[case], vllm, records)) == []


def _tiers(**tokens: float) -> dict[str, Any]:
    return _metric("counter", *(_series({"cache_source": tier, "dp_rank": "0"}, total=n) for tier, n in tokens.items()))


SGLANG_FULL = {
    "sglang:prompt_tokens": _metric(
        "counter", _series({"dp_rank": "0"}, total=6000.0), _series({"dp_rank": "1"}, sum=2000.0)
    ),
    "sglang:generation_tokens": _metric("counter", _series({}, total=900.4)),
    "sglang:cached_tokens": _tiers(device=2000.0, host=1000.0, storage_file=400.0),
    "sglang:realtime_tokens": _metric(
        "counter",
        _series({"mode": "prefill_compute"}, total=4600.0),
        _series({"mode": "decode"}, total=900.0),
        _series({"mode": "prefill_cache"}, total=3400.0),
    ),
    "sglang:token_usage": _metric("gauge", _series({}, max=0.61, avg=0.2), _series({}, max=0.42)),
    "sglang:max_total_num_tokens": _metric(
        "gauge", _series({"dp_rank": "0"}, max=50_000.0), _series({"dp_rank": "1"}, avg=50_000.0)
    ),
    "sglang:hicache_host_used_tokens": _metric("gauge", _series({}, max=3000.0, avg=100.0), _series({}, max=5000.0)),
    "sglang:hicache_host_total_tokens": _metric("gauge", _series({}, max=20_000.0)),
    "sglang:cache_hit_rate": _metric("gauge", _series({}, avg=0.3, max=0.9)),
}
SGLANG = {
    "full": {"metrics": SGLANG_FULL},
    "device only": {"metrics": {**SGLANG_FULL, "sglang:cached_tokens": _tiers(device=500.0)}},
    "no prompt tokens: the hit-rate gauges averaged": {
        "metrics": {
            "sglang:cached_tokens": _tiers(device=10.0, host=5.0),
            "sglang:cache_hit_rate": _metric("gauge", _series({}, avg=40.0), _series({}, max=80.0)),
            "sglang:token_usage": _metric("gauge", _series({}, total=2.0)),
        }
    },
    "no prompt tokens, a fraction gauge": {
        "metrics": {
            "sglang:cache_hit_rate": _metric("gauge", _series({}, avg=0.2, max=0.9), _series({}, avg=0.4)),
        }
    },
    "nothing cached": {"metrics": {"sglang:prompt_tokens": _metric("counter", _series({}, total=100.0))}},
}


@pytest.mark.parametrize("case", SGLANG, ids=list(SGLANG))
def test_sglang_server_metrics_from_the_export_are_inferencexs(case: str) -> None:
    records = _records((1000, 70), (2000, 30))
    theirs = _theirs(SGLANG[case], "sglang", records)
    assert _differences(theirs, _mine(SGLANG[case], sglang, records)) == []
