"""The Prometheus text parser on vLLM-shaped /metrics output."""

from __future__ import annotations

import math

import pytest

from slurmx.results import prometheus

TEXT = r"""# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 1536.0
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 1.152e+03
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="tiny",source="local"} 1152.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0
python_info{implementation="CPython",major="3",minor="11",patchlevel="2",version="3.11.2"} 1.0
odd{path="a \"quoted\" \\ value",le="+Inf"} +Inf 1700000000000
no_labels 42
"""


def test_samples_parse_with_labels_and_values() -> None:
    samples = prometheus.parse(TEXT)
    assert len(samples) == 7
    first = samples[0]
    assert first.name == "vllm:prefix_cache_queries_total"
    assert first.labels == (("engine", "0"), ("model_name", "tiny"))
    assert first.value == 1536.0
    assert samples[1].value == 1152.0
    odd = samples[5]
    assert odd.label("path") == 'a "quoted" \\ value' and math.isinf(odd.value)
    assert samples[6].name == "no_labels" and samples[6].labels == ()


def test_helpers_sum_series_and_split_by_label() -> None:
    samples = prometheus.parse(TEXT + 'vllm:prefix_cache_hits_total{engine="1",model_name="tiny"} 8\n')
    assert prometheus.total(samples, "vllm:prefix_cache_hits_total") == 1160.0
    assert prometheus.total(samples, "vllm:absent_total") is None
    assert prometheus.by_label(samples, "vllm:prompt_tokens_cached_by_source_total", "source") == {"local": 1152.0}


def test_a_broken_line_names_its_line_number() -> None:
    with pytest.raises(prometheus.PrometheusParseError, match="line 2"):
        prometheus.parse('ok 1\nbad{x="1" \n')
