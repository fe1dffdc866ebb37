"""A synthetic agentic trace in aiperf's mooncake_trace format, for the local stack.

Multi-turn sessions whose contexts grow turn by turn and whose first turns share a prefix, so
prefix caching and LMCache have real work. Rows of a session are per-turn deltas.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from slurmx.recipes.model import Replay
from slurmx.store import atomic


def synthetic_trace(replay: Replay, conc: int) -> list[dict[str, Any]]:
    """Deterministic for a given profile and concurrency (seeded by the profile's random seed)."""
    rng = random.Random(replay.random_seed * 1000 + conc)
    block = replay.block_tokens
    shared_blocks = replay.shared_prefix_tokens // block
    next_id = shared_blocks
    rows: list[dict[str, Any]] = []
    for session in range(replay.sessions_per_conc * conc):
        own_first = max(replay.first_turn_tokens - shared_blocks * block, 1)
        first_ids = list(range(shared_blocks)) + list(range(next_id, next_id + -(-own_first // block)))
        next_id = first_ids[-1] + 1
        rows.append(_row(session, shared_blocks * block + own_first, replay.output_tokens, first_ids))
        for _ in range(replay.turns - 1):
            delta = max(replay.turn_delta_tokens + rng.randint(-block // 4, block // 4), 1)
            ids = list(range(next_id, next_id + -(-delta // block)))
            next_id = ids[-1] + 1
            rows.append(_row(session, delta, replay.output_tokens, ids))
    return rows


def _row(session: int, input_length: int, output_length: int, hash_ids: list[int]) -> dict[str, Any]:
    return {
        "session_id": f"sess-{session}",
        "input_length": input_length,
        "output_length": output_length,
        "hash_ids": hash_ids,
        "delay": 0,
    }


def write_trace(path: Path, rows: list[dict[str, Any]]) -> None:
    atomic.write_text(path, "".join(atomic.dumps(row) + "\n" for row in rows))


def working_set_tokens(rows: list[dict[str, Any]], conc: int, shared_prefix_tokens: int, output_tokens: int) -> int:
    """KV tokens live at once when `conc` sessions run side by side: the shared prefix once, plus the
    `conc` largest session contexts without it (every turn's input delta and answer). More than the
    engine's KV pool means prefixes are evicted between a session's turns and must come back from
    an offload tier or be recomputed."""
    per_session: dict[str, int] = {}
    for row in rows:
        session = str(row["session_id"])
        per_session[session] = per_session.get(session, 0) + int(row["input_length"]) + output_tokens
    own = sorted((tokens - shared_prefix_tokens for tokens in per_session.values()), reverse=True)
    return shared_prefix_tokens + sum(own[:conc])
