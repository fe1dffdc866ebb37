"""argv as facts: aiperf's multi-valued --server-metrics is one fact of all its URLs, on both sides alike."""

from __future__ import annotations

from slurmx.upstream.facts import argv_facts


def test_server_metrics_urls_are_one_fact() -> None:
    argv = ["profile", "--server-metrics", "http://a/metrics", "http://b/metrics", "--streaming", "--x", "1"]
    facts = argv_facts("replay", argv, {})
    assert facts[("replay", "--server-metrics")] == "http://a/metrics http://b/metrics"
    assert facts[("replay", "--streaming")] == "" and facts[("replay", "--x")] == "1"
    assert [k for k in facts if k[1].startswith("arg")] == [("replay", "arg0")]  # only `profile` is positional
