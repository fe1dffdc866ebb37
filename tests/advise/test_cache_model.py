"""The prefix-cache model's rules on hand-made sessions: prefix-only reuse, LRU eviction, pinned blocks."""

from __future__ import annotations

from slurmx.advise.cache_model import Turn, replay

B = 4  # tokens a block


def one(session: int, prompt: list[int], out: int = 1) -> list[Turn]:
    return [Turn(session, tuple(prompt), out)]


def test_a_block_is_reused_only_when_every_earlier_block_matches() -> None:
    first = one(0, [1, 2, 3, 4, 5, 6, 7, 8, 9])
    same_second_block_other_first = one(1, [0, 2, 3, 4, 5, 6, 7, 8, 9])
    outcome = replay([first, same_second_block_other_first], 1, B, pool_blocks=8, tier_blocks=100)
    assert outcome.hit_tokens == 0
    shared_first = one(1, [1, 2, 3, 4, 0, 6, 7, 8, 9])
    assert replay([first, shared_first], 1, B, pool_blocks=8, tier_blocks=100).hit_tokens == B


def test_the_last_prompt_token_is_always_computed() -> None:
    twice = [Turn(0, (1, 2, 3, 4, 5, 6, 7, 8), 1), Turn(0, (1, 2, 3, 4, 5, 6, 7, 8), 1)]
    assert replay([twice], 1, B, pool_blocks=8, tier_blocks=100).hit_tokens == B  # not 8: one block recomputed


def test_evicted_prefixes_are_recomputed_and_a_tier_serves_them_while_they_fit() -> None:
    a, b = one(0, list(range(8))), one(1, list(range(100, 108)))
    a_again = one(2, list(range(8)) + [50])
    big = replay([a, b, a_again], 1, B, pool_blocks=8, tier_blocks=100)
    assert (big.hit_tokens, big.recomputed_tokens) == (8, 0)  # a's blocks survived b
    # 3 blocks: b takes the never-used one and a's last (a request's blocks are evicted tail first)
    small = replay([a, b, a_again], 1, B, pool_blocks=3, tier_blocks=100)
    assert (small.hit_tokens, small.recomputed_tokens, small.tier_tokens) == (4, 4, 4)
    tiny_tier = replay([a, b, a_again], 1, B, pool_blocks=3, tier_blocks=2)  # b's two blocks pushed a's out
    assert (tiny_tier.recomputed_tokens, tiny_tier.tier_tokens) == (4, 0)


def test_concurrent_sessions_share_blocks_and_the_working_set_counts_them_once() -> None:
    shared = list(range(8))
    sessions = [one(s, shared + [1000 * (s + 1) + i for i in range(4)], out=3) for s in range(2)]
    outcome = replay(sessions, 2, B, pool_blocks=16, tier_blocks=100)
    assert outcome.hit_tokens == 8  # the second session reuses the first's two shared blocks
    assert outcome.working_set_tokens == 8 + 2 * (4 + 3)
