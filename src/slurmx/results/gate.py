"""The validity gate: a benchmark that "passed" with zero tokens, many errors or a cancelled replay
is a failed point, not a data point (DESIGN.md, impossible-by-construction item 8)."""

from __future__ import annotations

from slurmx.results.schema import Result


def check(result: Result, *, max_error_rate: float = 0.10, min_requests: int = 1) -> str | None:
    """The one-line reason `result` is not a valid data point, or None when it is."""
    if result.slurmx is not None and result.slurmx.was_cancelled:
        return "the replay was cancelled before it finished (aiperf was_cancelled)"
    if result.slurmx is not None and result.slurmx.incomplete_reason:
        return f"aiperf marked the replay incomplete: {result.slurmx.incomplete_reason}"
    completed = result.num_requests_successful
    if completed < min_requests:
        return f"{completed} completed request(s), fewer than the minimum {min_requests}"
    rate = result.error_rate
    if rate > max_error_rate:
        errors = result.request_accounting.records_error_dropped
        total = result.request_accounting.records_total or result.num_requests_total
        return f"request error rate {rate:.1%} ({errors}/{total}) is over the threshold {max_error_rate:.0%}"
    output_tokens = _output_tokens(result)
    if not output_tokens:
        return "zero output tokens: the engine answered nothing"
    return None


def _output_tokens(result: Result) -> float:
    """Output tokens of the profiled requests (warmup excluded, so not the engine's own counter)."""
    throughput = result.request_metrics.throughput
    if throughput.output is not None and throughput.output.tokens_per_second > 0:
        return throughput.output.tokens_per_second
    mean_osl = result.request_metrics.tokens.output_actual.mean or 0.0
    return mean_osl * result.num_requests_successful
