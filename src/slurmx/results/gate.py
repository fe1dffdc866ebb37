"""The validity gate: a benchmark that "passed" with zero tokens, many errors or a cancelled replay
is a failed point, not a data point (DESIGN.md, impossible-by-construction item 8); so is an arm that
did not do what it claims (the wrong connector on the engine, a known fallback line in its backend's
log, an offload tier the engine never received a token from although the working set overflowed
its KV pool).

A refused result is still written (with `slurmx.invalid_reason`) and shown; it never enters a ratio.
"""

from __future__ import annotations

from slurmx.results.schema import DEFAULT_ERROR_THRESHOLD, ArmEvidence, Result

NOT_ENGAGED = "offload tier not engaged"
NOT_EXERCISED = "offload not exercised"
ARM_MISMATCH = "arm mismatch"


def threshold_of(result: Result) -> float:
    """The error threshold the node judged `result` with: a later judge (collect, compare) uses the same."""
    return result.slurmx.failed_request_threshold if result.slurmx is not None else DEFAULT_ERROR_THRESHOLD


def check(result: Result, *, max_error_rate: float = DEFAULT_ERROR_THRESHOLD, min_requests: int = 1) -> str | None:
    """The one-line reason `result` is not a valid data point, or None when it is."""
    meta = result.slurmx
    if meta is not None and meta.invalid_reason:
        return meta.invalid_reason  # refused when it was written (e.g. a partial replay)
    if meta is not None and meta.was_cancelled:
        return "the replay was cancelled before it finished (aiperf was_cancelled)"
    if meta is not None and meta.incomplete_reason:
        return f"aiperf marked the replay incomplete: {meta.incomplete_reason}"
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
    if meta is not None and meta.evidence is not None:
        return check_arm(meta.evidence)
    return None


def check_arm(evidence: ArmEvidence) -> str | None:
    """The arm that ran is the arm claimed, its backend logged no known failure, and an offload tier
    served tokens whenever the working set overflowed the engine's KV pool."""
    expected, found = evidence.expected_connector, evidence.engine_connector
    if evidence.engine_argv_seen and expected != found and (evidence.arm == "none" or expected is not None):
        if found is None:
            return f"{ARM_MISMATCH}: the {evidence.arm} arm's engine ran without its connector {expected}"
        return f"{ARM_MISMATCH}: the {evidence.arm} arm's engine ran with connector {found}, not {expected or 'none'}"
    if evidence.log_failures:
        return f"backend log: {evidence.log_failures[0]}"
    if evidence.arm != "none" and not evidence.tier_tokens and evidence.exceeded_pool:
        return (
            f"{NOT_ENGAGED}: the engine received 0 tokens from {evidence.arm} over a replay whose working set "
            f"({evidence.working_set_tokens} tokens) exceeded its KV pool ({evidence.kv_pool_tokens} tokens)"
        )
    return None


def labels(result: Result) -> list[str]:
    """Marks on a valid result that its figures mean less than they seem to."""
    evidence = result.slurmx.evidence if result.slurmx is not None else None
    if evidence is not None and evidence.arm != "none" and not evidence.tier_tokens and not evidence.exceeded_pool:
        return [NOT_EXERCISED]
    return []


def _output_tokens(result: Result) -> float:
    """Output tokens of the profiled requests (warmup excluded, so not the engine's own counter)."""
    throughput = result.request_metrics.throughput
    if throughput.output is not None and throughput.output.tokens_per_second > 0:
        return throughput.output.tokens_per_second
    mean_osl = result.request_metrics.tokens.output_actual.mean or 0.0
    return mean_osl * result.num_requests_successful
