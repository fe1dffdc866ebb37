"""The validity gate: InferenceX's rule first, then slurmx's stricter checks, each refusal named by its rule.

InferenceX's rule (utils/agentic/validation/validate_agentic_result.py, on aiperf's aggregate, and
benchmark_lib.sh's `validate_required_agentic_server_metrics`): the aggregate must be readable and say
how many requests succeeded; zero completed requests is invalid; errors / completed (completed =
aiperf's completed_request_count, else request_count + error_request_count: profiled requests only,
warmup never counts) above the threshold is invalid; the server-metrics export (JSON and CSV) must be
non-empty and hold a metric with the engine's required prefix.

Then slurmx's own (DESIGN.md, impossible-by-construction item 8): a partial or cancelled replay, one
aiperf marked incomplete, too few successful requests, zero output tokens, and an arm that did not do
what it claims (the wrong connector on the engine, a known fallback line in its backend's log, an
offload tier the engine never received a token from although the working set overflowed its KV pool).

A refused result is still written (with `slurmx.invalid_reason` and `slurmx.invalid_rule`) and shown; it
never enters a ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmx.results.schema import (
    DEFAULT_ERROR_THRESHOLD,
    AiperfCounts,
    ArmEvidence,
    MetricsExport,
    Result,
    SlurmxMeta,
)

INFERENCEX_AGGREGATE = "inferencex-aggregate"
INFERENCEX_ZERO_COMPLETED = "inferencex-zero-completed"
INFERENCEX_ERROR_RATE = "inferencex-error-rate"
INFERENCEX_SERVER_METRICS = "inferencex-server-metrics"
SLURMX_PARTIAL = "slurmx-partial-replay"
SLURMX_CANCELLED = "slurmx-cancelled"
SLURMX_INCOMPLETE = "slurmx-incomplete"
SLURMX_MIN_REQUESTS = "slurmx-min-requests"
SLURMX_ZERO_OUTPUT = "slurmx-zero-output"
SLURMX_ARM_MISMATCH = "slurmx-arm-mismatch"
SLURMX_BACKEND_LOG = "slurmx-backend-log"
SLURMX_NOT_ENGAGED = "slurmx-offload-not-engaged"
# every rule, in the order the gate applies them (README's table)
RULES = (
    INFERENCEX_AGGREGATE, INFERENCEX_ZERO_COMPLETED, INFERENCEX_ERROR_RATE, INFERENCEX_SERVER_METRICS,
    SLURMX_PARTIAL, SLURMX_CANCELLED, SLURMX_INCOMPLETE, SLURMX_MIN_REQUESTS, SLURMX_ZERO_OUTPUT,
    SLURMX_ARM_MISMATCH, SLURMX_BACKEND_LOG, SLURMX_NOT_ENGAGED,
)  # fmt: skip

NOT_ENGAGED = "offload tier not engaged"
NOT_EXERCISED = "offload not exercised"
ARM_MISMATCH = "arm mismatch"
PARTIAL = "partial replay"


@dataclass(frozen=True)
class Refusal:
    """Why a result is not a data point: the rule (one of RULES) and the one line the user sees."""

    rule: str
    reason: str


def threshold_of(result: Result) -> float:
    """The error threshold the node judged `result` with: a later judge (collect, compare) uses the same."""
    return result.slurmx.failed_request_threshold if result.slurmx is not None else DEFAULT_ERROR_THRESHOLD


def check(result: Result, *, max_error_rate: float = DEFAULT_ERROR_THRESHOLD, min_requests: int = 1) -> str | None:
    """The one-line reason `result` is not a valid data point, or None when it is."""
    refusal = judge(result, max_error_rate=max_error_rate, min_requests=min_requests)
    return refusal.reason if refusal is not None else None


def judge(result: Result, *, max_error_rate: float = DEFAULT_ERROR_THRESHOLD, min_requests: int = 1) -> Refusal | None:
    """The rule that refuses `result` and why, or None when it is a valid data point."""
    meta = result.slurmx
    refusal = inferencex_rule(result.counts, max_error_rate)
    if refusal is None and meta is not None and meta.metrics_export is not None:
        refusal = server_metrics_rule(meta.metrics_export)
    return refusal or _slurmx_rules(result, min_requests)


def inferencex_rule(counts: AiperfCounts, threshold: float) -> Refusal | None:
    """validate_agentic_result.py's verdict on aiperf's aggregate counts, with its messages and figures."""
    if counts.unreadable is not None:
        return Refusal(INFERENCEX_AGGREGATE, counts.unreadable)
    errors, completed = counts.figures()
    if completed is None:
        return Refusal(INFERENCEX_AGGREGATE, "request_count.avg is missing")
    if completed <= 0:
        return Refusal(INFERENCEX_ZERO_COMPLETED, "aiperf completed zero requests")
    rate = errors / completed
    if rate > threshold:
        return Refusal(
            INFERENCEX_ERROR_RATE,
            f"aiperf request error rate exceeded the benchmark limit: {errors:g}/{completed:g} = {rate:.3%} > "
            f"{threshold:.3%}",
        )
    return None


def server_metrics_rule(export: MetricsExport) -> Refusal | None:
    """benchmark_lib.sh's required-server-metrics check, for the engine's prefix (none: no check)."""
    if not export.required_prefix:
        return None
    if not (export.json_nonempty and export.csv_nonempty):
        return Refusal(INFERENCEX_SERVER_METRICS, "required AIPerf server metrics artifacts are missing or empty")
    if not export.prefix_found:
        return Refusal(
            INFERENCEX_SERVER_METRICS,
            f"server_metrics_export.json contains no metric with required prefix '{export.required_prefix}'",
        )
    return None


def partial(reason: str) -> Refusal:
    """A replay that ended early (time limit, cancel, a server crash): the node keeps what aiperf wrote."""
    return Refusal(SLURMX_PARTIAL, f"{PARTIAL}: {reason}".splitlines()[0])


def _slurmx_rules(result: Result, min_requests: int) -> Refusal | None:
    meta = result.slurmx
    reason = partial_reason(meta) if meta is not None else None
    if reason is not None:
        return partial(reason)  # only the node knew the replay ended early
    if meta is not None and meta.was_cancelled:
        return Refusal(SLURMX_CANCELLED, "the replay was cancelled before it finished (aiperf was_cancelled)")
    if meta is not None and meta.incomplete_reason:
        return Refusal(SLURMX_INCOMPLETE, f"aiperf marked the replay incomplete: {meta.incomplete_reason}")
    completed = result.num_requests_successful
    if completed < min_requests:
        return Refusal(SLURMX_MIN_REQUESTS, f"{completed} completed request(s), fewer than the minimum {min_requests}")
    if not _output_tokens(result):
        return Refusal(SLURMX_ZERO_OUTPUT, "zero output tokens: the engine answered nothing")
    if meta is not None and meta.evidence is not None:
        return arm_refusal(meta.evidence)
    return None


def partial_reason(meta: SlurmxMeta) -> str | None:
    """Why the replay ended early, or None: the recorded fact, else (a file written before it was recorded)
    the verdict that said so."""
    if meta.partial_reason is not None:
        return meta.partial_reason
    reason, prefix = meta.invalid_reason or "", f"{PARTIAL}: "
    legacy = meta.invalid_rule == SLURMX_PARTIAL or (meta.invalid_rule is None and reason.startswith(prefix))
    return reason.removeprefix(prefix) if legacy and reason else None


def check_arm(evidence: ArmEvidence) -> str | None:
    """The one-line reason the arm did not do what it claims, or None (see `arm_refusal`)."""
    refusal = arm_refusal(evidence)
    return refusal.reason if refusal is not None else None


def arm_refusal(evidence: ArmEvidence) -> Refusal | None:
    """The arm that ran is the arm claimed, its backend logged no known failure, and an offload tier
    served tokens whenever the working set overflowed the engine's KV pool."""
    expected, found = evidence.expected_connector, evidence.engine_connector
    if evidence.engine_argv_seen and expected != found and (evidence.arm == "none" or expected is not None):
        if found is None:
            why = f"the {evidence.arm} arm's engine ran without its connector {expected}"
        else:
            why = f"the {evidence.arm} arm's engine ran with connector {found}, not {expected or 'none'}"
        return Refusal(SLURMX_ARM_MISMATCH, f"{ARM_MISMATCH}: {why}")
    if evidence.log_failures:
        return Refusal(SLURMX_BACKEND_LOG, f"backend log: {evidence.log_failures[0]}")
    if evidence.arm != "none" and not evidence.tier_tokens and evidence.exceeded_pool:
        return Refusal(
            SLURMX_NOT_ENGAGED,
            f"{NOT_ENGAGED}: the engine received 0 tokens from {evidence.arm} over a replay whose working set "
            f"({evidence.working_set_tokens} tokens) exceeded its KV pool ({evidence.kv_pool_tokens} tokens)",
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


def judged(result: Result) -> Result:
    """`result` with the gate's verdict written in: the rule, the reason and the labels, judged with the
    threshold it records (the node's, and every later judge's: collect, compare, rebuild)."""
    meta = result.slurmx
    assert meta is not None, "a result slurmx judges carries its slurmx block"
    refusal = judge(result, max_error_rate=meta.failed_request_threshold)
    meta.invalid_rule = refusal.rule if refusal is not None else None
    meta.invalid_reason = refusal.reason if refusal is not None else None
    meta.labels = labels(result) if refusal is None else []
    return result
