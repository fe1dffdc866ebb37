"""The aiperf replay as an argv: InferenceX's production command, or a local synthetic-trace replay."""

from __future__ import annotations

from pathlib import Path

from slurmx.flags import render_flags
from slurmx.recipes.spec import ServingSpec


def production_argv(
    aiperf: str, spec: ServingSpec, url: str, artifact_dir: Path, model_path: str, extra_metrics_urls: list[str]
) -> list[str]:
    """InferenceX's agentic replay with the SemiAnalysis aiperf fork's flags, as its benchmark_lib.sh builds it."""
    replay = spec.replay
    argv = [
        aiperf, "profile",
        "--scenario", replay.scenario,
        "--url", url,
        "--endpoint", "/v1/chat/completions",
        "--endpoint-type", "chat",
        "--streaming",
        "--model", spec.served_model_name,
        "--tokenizer", model_path,
        "--tokenizer-trust-remote-code",
        "--concurrency", str(spec.conc),
        "--benchmark-duration", str(spec.duration_s),
        "--random-seed", str(replay.random_seed),
        "--failed-request-threshold", str(replay.failed_request_threshold),
        "--trajectory-start-min-ratio", "0.25",
        "--trajectory-start-max-ratio", "0.75",
        "--warmup-grace-period", str(replay.warmup_grace_period_s),
        "--use-server-token-count",
        "--no-gpu-telemetry",
        "--num-dataset-entries", str(replay.num_dataset_entries),
        "--slice-duration", "1.0",
        "--public-dataset", replay.public_dataset,
        "--ui-type", "none",
        "--output-artifact-dir", str(artifact_dir),
    ]  # fmt: skip
    # The fork's flags that changed between benchmark_lib.sh versions, as the recipe's replay says.
    if replay.stats_interval_s is not None:
        argv += ["--stats-interval", str(replay.stats_interval_s)]
    if replay.warmup_requests_per_lane is not None:
        argv += ["--warmup-requests-per-lane", str(replay.warmup_requests_per_lane)]
    if replay.cache_warmup_duration_s is not None:
        argv += ["--agentic-cache-warmup-duration", str(replay.cache_warmup_duration_s)]
    if replay.trace_idle_gap_cap_s is not None:
        argv += ["--trace-idle-gap-cap-seconds", str(replay.trace_idle_gap_cap_s)]
    argv += render_flags(replay.flags)
    # aiperf scrapes the engine's /metrics by itself; other servers' metrics are added by URL.
    if extra_metrics_urls:
        argv += ["--server-metrics", *extra_metrics_urls]
    return argv


def synthetic_argv(
    aiperf: str,
    spec: ServingSpec,
    url: str,
    artifact_dir: Path,
    trace: Path,
    turns: int,
    tokenizer: str,
    extra_metrics_urls: list[str],
) -> list[str]:
    """Replay of a local mooncake_trace file; every turn is sent (--request-count = turns)."""
    argv = [
        aiperf, "profile",
        "--model", spec.served_model_name,
        "--url", url,
        "--endpoint-type", "chat",
        "--streaming",
        "--tokenizer", tokenizer,
        "--custom-dataset-type", "mooncake_trace",
        "--input-file", str(trace),
        "--isl-block-size", str(spec.replay.block_tokens),
        "--request-count", str(turns),
        "--concurrency", str(spec.conc),
        "--extra-inputs", "ignore_eos:true",
        "--random-seed", str(spec.replay.random_seed),
        "--use-server-token-count",
        "--no-gpu-telemetry",
        "--ui-type", "none",
        "--workers-max", "2",
        "--no-auto-plot",
        "--artifact-dir", str(artifact_dir),
    ]  # fmt: skip
    if extra_metrics_urls:
        argv += ["--server-metrics", *extra_metrics_urls]
    return argv
