"""The evidence that a point's arm did what it claims: the connector in the engine argv that ran, the
tokens the engine received from the external tier, the tier's own counters, the working set against
the engine's KV pool, and known fallback lines in the backend's logs.

The backend module says which counters are its tier's and which log lines mean it degraded
(`Backend.tier_reading`, `Backend.log_patterns`); this module only gathers them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slurmx import backends, engines
from slurmx.engines import Engine
from slurmx.results.schema import ArmEvidence, ServerMetrics


@dataclass(frozen=True)
class ArmInputs:
    """What the job body knows about how the arm ran (none of it is in aiperf's artifacts)."""

    engine_argv: list[str] | None = None
    logs: dict[str, Path] = field(default_factory=dict)  # process name -> its log
    working_set_tokens: int | None = None
    block_tokens: int | None = None  # the engine's KV block size, for a tier that counts blocks


def engine_connector(argv: list[str], engine: Engine | None = None) -> str | None:
    """The connector an engine argv carries, as `engine` reads it back (`Engine.connector_of`; None: as any
    registered engine reads it), or None."""
    readers = [engine] if engine is not None else list(engines.REGISTRY.values())
    return next((found for reader in readers if (found := reader.connector_of(argv)) is not None), None)


def log_failures(arm: str, logs: Mapping[str, Path], fatal_only: bool = False) -> list[str]:
    """One entry per known failure line of the arm's backend found in its logs: "reason (file:line)"
    (`fatal_only`: only the lines that fail a point as soon as its server is ready)."""
    found = []
    for pattern in backends.get(arm).log_patterns:
        if fatal_only and not pattern.fatal:
            continue
        # the log of the process the pattern names, or of each of its servers (lmcache.0, lmcache.1, ...)
        paths = [path for name, path in logs.items() if name.partition(".")[0] == pattern.log]
        for path in (p for p in paths if p.is_file()):
            regex = re.compile(pattern.regex)
            with path.open(encoding="utf-8", errors="replace") as handle:
                hit = next((n for n, line in enumerate(handle, 1) if regex.search(line)), None)
            if hit is not None:
                found.append(f"{pattern.reason} ({path.name}:{hit})")
                break
    return found


def build_evidence(
    arm: str,
    server: ServerMetrics,
    deltas: Mapping[str, float],
    gauges: Mapping[str, float],
    inputs: ArmInputs,
    engine: Engine | None = None,
) -> ArmEvidence:
    backend = backends.get(arm)
    by_source = server.tokens.prompt_by_source
    tiered = engine is not None and engine.metrics.tier_label  # raw is then cached tokens by tier (SGLang's)
    prompt = sum(by_source.raw.values()) if by_source.raw and not tiered else server.tokens.prompt_total
    tier_tokens = by_source.cpu_or_external_cache_hit
    if tier_tokens is None:  # an engine without prompt tokens by source: its external prefix-cache hits
        tier_tokens = server.cache.external_prefix_cache_hits
    reading = backend.tier_reading(deltas, gauges)
    tier_hits = reading.hit_tokens
    if tier_hits is None and reading.hit_blocks is not None and inputs.block_tokens:
        tier_hits = reading.hit_blocks * inputs.block_tokens
    return ArmEvidence(
        arm=arm,
        expected_connector=backend.connector,
        engine_argv_seen=inputs.engine_argv is not None,
        engine_connector=engine_connector(inputs.engine_argv, engine) if inputs.engine_argv is not None else None,
        prompt_tokens=prompt,
        local_hit_tokens=by_source.gpu_cache_hit,
        tier_tokens=tier_tokens,
        computed_tokens=by_source.computed,
        tier_hit_rate=_share(tier_tokens, prompt),
        tier=reading.counters,
        tier_side_hit_tokens=tier_hits,
        tier_side_hit_rate=_share(tier_hits, prompt),
        tier_absent_reason=reading.absent,
        kv_pool_tokens=server.kv_cache.gpu_total_tokens,
        working_set_tokens=inputs.working_set_tokens,
        log_failures=log_failures(arm, inputs.logs),
    )


def _share(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole else None
