"""A mooncake_trace's rows (per-turn deltas) -> each session's whole prompts, as aiperf sends them.

aiperf turns each hash id into a block of text and sends a session's turn with its whole history: every
earlier turn's input and answer, then this turn's delta, wrapped in the chat template. Equal hash ids at
equal positions give equal tokens, so prefix blocks match where the trace says they do; answers are the
engine's own output, different in every session.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slurmx.advise.cache_model import Turn

# Tokens the chat template adds to each turn (role markers, BOS). Measured: aiperf's input_sequence_length of
# the local key's 1200-token first turns is 1208 (tiny-llama's template). The figure only moves block
# boundaries; 0 or 16 changes the local key's predicted hit rate by under 3.5 points (docs/advise.md).
CHAT_TOKENS_PER_TURN = 8
_ANSWER_BASE = 1 << 40  # answer tokens: ids no hash id's text reaches
_TEMPLATE_BASE = -1  # template tokens: the same ids in every turn (negative: no hash id's text)


def sessions(rows: Sequence[Mapping[str, Any]], block_tokens: int) -> list[list[Turn]]:
    """Sessions in the trace's order (aiperf starts them so), each a list of its turns' whole prompts."""
    by_session: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_session.setdefault(str(row["session_id"]), []).append(row)
    template = tuple(_TEMPLATE_BASE - i for i in range(CHAT_TOKENS_PER_TURN))
    out: list[list[Turn]] = []
    for index, turns in enumerate(by_session.values()):
        prompt: tuple[int, ...] = ()
        session: list[Turn] = []
        for row in turns:
            if session:  # the previous answer, as the engine wrote it
                start = _ANSWER_BASE * (index + 1) + len(prompt)
                prompt += tuple(range(start, start + session[-1].output_tokens))
            text = [h * block_tokens + i for h in row["hash_ids"] for i in range(block_tokens)]
            prompt += template + tuple(text[: int(row["input_length"])])
            session.append(Turn(index, prompt, int(row["output_length"])))
        out.append(session)
    return out
