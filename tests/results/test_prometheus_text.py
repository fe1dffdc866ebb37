"""results/prometheus.py on the corners of the Prometheus text exposition format (prometheus.io/docs/instrumenting/
exposition_formats): label values with each escape the format defines (\\\\, \\", \\n) and one it does not, spaces
and a trailing comma between labels, empty braces, the special values, timestamps after the value, comments and
blank lines counted in the line numbers, `# TYPE` lines, and each refusal's exact message."""

from __future__ import annotations

import math

import pytest

from slurmx.results import prometheus
from slurmx.results.prometheus import Sample

TEXT = (
    "# HELP vllm:x_total a counter\n"
    "# TYPE vllm:x_total counter\n"
    "\n"
    'vllm:x_total{engine="0", model_name="tiny",} 12 1700000000000\n'
    '   esc{a="line\\nbreak",b="back\\\\slash",c="say \\"hi\\"",d="tab\\t"} -0.5\n'
    "empty{} 3e2\n"
    "plus_inf +Inf\n"
    "inf_word inf\n"
    'minus_inf{x="1"} -Inf\n'
    "not_a_number NaN\n"
    "low_nan nan\n"
    "spaced  7   \n"
    'braces{path="/v1/{model}"} 8\n'
    'with_exemplar_total 9 # {trace_id="abc"} 1.0\n'
)


def test_every_sample_with_its_labels_and_value() -> None:
    samples = prometheus.parse(TEXT)
    assert [(s.name, s.labels) for s in samples] == [
        ("vllm:x_total", (("engine", "0"), ("model_name", "tiny"))),
        ("esc", (("a", "line\nbreak"), ("b", "back\\slash"), ("c", 'say "hi"'), ("d", "tab\\t"))),
        ("empty", ()),
        ("plus_inf", ()),
        ("inf_word", ()),
        ("minus_inf", (("x", "1"),)),
        ("not_a_number", ()),
        ("low_nan", ()),
        ("spaced", ()),
        ("braces", (("path", "/v1/{model}"),)),
        ("with_exemplar_total", ()),  # OpenMetrics' exemplar after the value: skipped
    ]
    values = [s.value for s in samples]
    assert values[:3] == [12.0, -0.5, 300.0] and values[-3:] == [7.0, 8.0, 9.0]
    assert values[3] == values[4] == math.inf and values[5] == -math.inf
    assert math.isnan(values[6]) and math.isnan(values[7])
    assert samples[1].label("c") == 'say "hi"' and samples[1].label("e") is None
    assert list(prometheus.iter_samples(TEXT)) == samples


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("lonely", "sample without a value"),
        ('braced{a="1"}', "sample without a value"),
        ('braced{a="1"}   ', "sample without a value"),
        ("bare{a=1} 2", "label a value not quoted"),
        ("bare{ b =x} 2", "label b value not quoted"),
        ("word one", "could not convert string to float: 'one'"),
        ('cut{a="1', "string index out of range"),
        ("cut{a", "substring not found"),
    ],
)
def test_a_broken_line_is_refused_with_its_number_reason_and_text(line: str, message: str) -> None:
    text = f"# TYPE ok gauge\n\nok 1\n{line}\nlater 2\n"
    with pytest.raises(prometheus.PrometheusParseError) as caught:
        prometheus.parse(text)
    assert str(caught.value) == f"line 4: {message}: {line!r}"


def test_a_long_broken_line_is_quoted_to_120_characters() -> None:
    line = "x" * 150
    with pytest.raises(prometheus.PrometheusParseError) as caught:
        prometheus.parse(line)
    assert str(caught.value) == f"line 1: sample without a value: {'x' * 120!r}"


def test_type_lines_name_the_counter_families() -> None:
    text = (
        "# TYPE mem_cache_hit_nums_ counter\n"
        "# TYPE usage gauge\n"
        "#  TYPE spaced counter\n"
        "# HELP helped counter\n"
        "# TYPE extra counter trailing\n"
        "#TYPE glued counter\n"
        "# TYPE short\n"
        "mem_cache_hit_nums_ 20\n"
    )
    assert prometheus.counter_families(text) == {"mem_cache_hit_nums_", "spaced"}


def test_sums_splits_and_maxima_over_series() -> None:
    samples = [
        Sample("req", (("engine", "0"), ("reason", "stop")), 4.0),
        Sample("req", (("engine", "1"), ("reason", "stop")), 6.0),
        Sample("req", (("engine", "0"), ("reason", "length")), 1.5),
        Sample("req", (), 100.0),
        Sample("other", (("engine", "0"),), 1000.0),
    ]
    assert prometheus.total(samples, "req") == 111.5
    assert prometheus.total(samples, "req", lambda s: s.label("engine") == "0") == 5.5
    assert prometheus.total(samples, "req", lambda s: s.label("engine") == "9") is None
    assert prometheus.total(samples, "absent") is None
    assert prometheus.by_label(samples, "req", "engine") == {"0": 5.5, "1": 6.0}
    assert prometheus.by_label(samples, "req", "reason") == {"stop": 10.0, "length": 1.5}
    assert prometheus.by_label(samples, "absent", "engine") == {}
    assert prometheus.maximum(samples, "req") == 100.0
    assert prometheus.maximum([Sample("g", (), -3.0), Sample("g", (), -1.0)], "g") == -1.0
    assert prometheus.maximum(samples, "absent") is None
