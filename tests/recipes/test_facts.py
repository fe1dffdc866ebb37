"""argv as facts: aiperf's multi-valued --server-metrics is one fact of all its URLs, on both sides alike."""

from __future__ import annotations

from slurmx.upstream.facts import argv_facts


def test_server_metrics_urls_are_one_fact() -> None:
    argv = ["profile", "--server-metrics", "http://a/metrics", "http://b/metrics", "--streaming", "--x", "1"]
    facts = argv_facts("replay", argv, {})
    assert facts[("replay", "--server-metrics")] == "http://a/metrics http://b/metrics"
    assert facts[("replay", "--streaming")] == "" and facts[("replay", "--x")] == "1"
    assert [k for k in facts if k[1].startswith("arg")] == [("replay", "arg0")]  # only `profile` is positional


def test_a_flag_naming_a_captured_file_compares_by_the_files_keys_not_its_path() -> None:
    """trtllm-serve's `--config ser.yaml` (beside the script) and slurmx's `--config RUN_DIR/trtllm_config.yaml`:
    the same YAML is no difference; a changed key is one, under `file --config/...`; a file slurmx does not write
    leaves its path a difference."""
    from slurmx.process import Process
    from slurmx.upstream.capture import Capture, Started
    from slurmx.upstream.facts import NAMED_FILE, differences, slurmx_facts, upstream_facts

    launcher = ["-n", "1", "--oversubscribe", "--allow-run-as-root", "trtllm-serve", "/m", "--port", "8888"]
    text = "max_batch_size: 8\nkv_cache_config:\n  tokens_per_block: 128\n"
    started = Started("mpirun", [*launcher, "--config", "ser.yaml"], {}, files={"--config": text})
    upstream = upstream_facts(Capture([started], {}, 0, ""), {})
    assert upstream[("engine", "--config")] == NAMED_FILE
    assert upstream[("engine", "file --config/kv_cache_config/tokens_per_block")] == "128"

    def ours(written: dict[str, str]) -> dict[tuple[str, str], str]:
        argv = ["mpirun", *launcher, "--config", "/run/trtllm_config.yaml"]
        return slurmx_facts([Process("engine", argv, {}, files=written)], {}, {})

    assert differences(upstream, ours({"/run/trtllm_config.yaml": text})) == []
    changed = differences(upstream, ours({"/run/trtllm_config.yaml": text.replace("8", "16", 1)}))
    assert [(d.item, d.upstream, d.slurmx) for d in changed] == [("file --config/max_batch_size", "8", "16")]
    unwritten = {d.item for d in differences(upstream, ours({}))}
    assert "--config" in unwritten and "file --config/max_batch_size" in unwritten
