"""A model of an engine's GPU prefix cache under an aiperf multi-turn replay: what `slurmx advise` predicts.

Blocks of `block_tokens` are keyed by their whole prefix (a block is reusable only if every earlier block
of the prompt matches too), live in a pool of `pool_blocks` blocks, and are evicted least recently freed
first; the blocks of running requests are pinned. Requests are scheduled as a continuous-batching engine
does: waiting ones first come first served while their blocks fit, a running one that needs a block when
none is free preempts the latest scheduled (its blocks freed, recomputed when it runs again). Sessions
replay as aiperf does at a concurrency: `conc` sessions at once, each turn sent when the previous answer
is in, a finished session's slot taking the next session. Time advances by engine steps whose length
grows with the prefill tokens they compute, so who overlaps whom follows the work, not a fixed order.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

# The engine step's cost: a fixed part and one per prefill token, in ms. Measured on the local stack's
# CPU engine (aiperf's profile_export.jsonl of the local key): a 1208-token prefill's TTFT is ~270 ms,
# a decode step ~5 ms. Only their ratio matters: it decides which requests overlap.
STEP_MS = 5.0
PREFILL_MS_PER_TOKEN = 0.2
# aiperf's gap between an answer and the session's next request (measured: 10-20 ms on the local stack)
TURN_GAP_MS = 15.0


@dataclass(frozen=True)
class Turn:
    """One request: its whole prompt as token identities (equal tokens at equal positions share blocks)."""

    session: int
    prompt: tuple[int, ...]
    output_tokens: int
    measured: bool = True  # False: a warm-up turn, replayed (it fills the cache) but not counted


@dataclass(frozen=True)
class CacheOutcome:
    """What the replay did to the cache, per request and in all."""

    prompt_tokens: int
    hit_tokens: int  # prompt tokens served by the GPU prefix cache (first scheduling, as the engine counts)
    # prompt tokens that missed the GPU pool though an earlier request had computed them: what an offload
    # tier holding every computed block could have served (bounded by its size in `tier_tokens`)
    recomputed_tokens: int
    tier_tokens: int  # of those, what a tier of `tier_blocks` (LRU over stored blocks) still held
    # most distinct context tokens of the sessions in progress at once (prefix blocks they share counted
    # once): what the pool must hold for no session to lose its prefix between turns
    working_set_tokens: int
    preemptions: int


@dataclass(frozen=True)
class Timing:
    """An engine step's cost in ms: a fixed part and one per prefill token; and the gap before a session's
    next turn. Only their ratios matter: they decide which requests overlap."""

    step_ms: float = STEP_MS
    prefill_ms_per_token: float = PREFILL_MS_PER_TOKEN
    turn_gap_ms: float = TURN_GAP_MS


@dataclass
class _Request:
    turn: Turn
    arrival_ms: float
    tokens: int  # prompt plus generated so far
    keys: list[int]  # the prompt's full blocks' keys (computed once: prompts can be long)
    generated: int = 0
    blocks: list[int] = field(default_factory=list)
    scheduled: bool = False
    prefilled: bool = False


class _Pool:
    """The block pool: free blocks in eviction order (those with a key still hit), keys -> block."""

    def __init__(self, blocks: int) -> None:
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(blocks))
        self.key_of: dict[int, int] = {}
        self.block_of: dict[int, int] = {}
        self.refs: dict[int, int] = {}

    def hit(self, keys: Sequence[int]) -> list[int]:
        found = []
        for key in keys:
            block = self.block_of.get(key)
            if block is None:
                break
            found.append(block)
        return found

    def take(self, blocks: list[int]) -> None:
        for block in blocks:
            self.free.pop(block, None)
            self.refs[block] = self.refs.get(block, 0) + 1

    def new(self, count: int) -> list[int] | None:
        if count > len(self.free):
            return None
        fresh = []
        for _ in range(count):
            block, _ = self.free.popitem(last=False)
            key = self.key_of.pop(block, None)
            if key is not None:  # evicted: its prefix must be computed again (or come from a tier)
                del self.block_of[key]
            self.refs[block] = 1
            fresh.append(block)
        return fresh

    def register(self, block: int, key: int) -> None:
        if key not in self.block_of and block not in self.key_of:
            self.block_of[key] = block
            self.key_of[block] = key

    def release(self, blocks: list[int]) -> None:
        # the engine frees a request's blocks tail first: its last blocks are evicted before its first
        for block in reversed(blocks):
            self.refs[block] -= 1
            if self.refs[block] == 0:
                del self.refs[block]
                self.free[block] = None


def block_keys(prompt: tuple[int, ...], block_tokens: int) -> list[int]:
    """Each full block's key, chained as the engine chains them: the parent's key with the block's tokens, so
    equal keys mean equal prefixes up to the block's end."""
    keys: list[int] = []
    parent = 0
    for start in range(0, len(prompt) - block_tokens + 1, block_tokens):
        parent = hash((parent, prompt[start : start + block_tokens]))
        keys.append(parent)
    return keys


def replay(
    sessions: Sequence[Sequence[Turn]],
    conc: int,
    block_tokens: int,
    pool_blocks: int,
    tier_blocks: int,
    timing: Timing = Timing(),
) -> CacheOutcome:
    pool = _Pool(pool_blocks)
    tier: OrderedDict[int, None] = OrderedDict()  # every computed full block, LRU, bounded
    computed_keys: set[int] = set()
    context: dict[int, tuple[list[int], int]] = {}  # session in progress -> its context's full blocks, tokens
    shared_blocks = 0  # distinct full blocks of `context`, recounted only when a context's blocks change
    contexts_changed = False
    pending = [list(turns) for turns in sessions]
    next_session = 0
    waiting: list[_Request] = []
    running: list[_Request] = []
    arrivals: list[tuple[float, int]] = []  # (time, session) of the next turn to send
    for _ in range(min(conc, len(pending))):
        arrivals.append((0.0, next_session))
        next_session += 1
    now = 0.0
    prompt_tokens = hit_tokens = recomputed = tier_served = peak = preemptions = 0

    while arrivals or waiting or running:
        for time, session in sorted(arrivals):
            if time <= now:
                turn = pending[session].pop(0)
                waiting.append(_Request(turn, time, len(turn.prompt), block_keys(turn.prompt, block_tokens)))
        arrivals = [(t, s) for t, s in arrivals if t > now]
        if not waiting and not running:
            now = min(t for t, _ in arrivals)
            continue

        # decodes first: a request that needs a block when none is free preempts the latest scheduled
        for request in list(running):
            if request not in running or not request.prefilled:
                continue
            if request.tokens % block_tokens == 0:
                while (block := pool.new(1)) is None:
                    victim = running.pop()
                    pool.release(victim.blocks)
                    victim.blocks, victim.prefilled = [], False
                    victim.tokens = len(victim.turn.prompt) + victim.generated
                    waiting.insert(0, victim)
                    preemptions += 1
                    if victim is request:
                        break
                if request not in running:
                    continue
                request.blocks.extend(block or [])

        prefill_tokens = 0
        while waiting:
            request = waiting[0]
            keys = request.keys
            # the last prompt token is always computed (its logits are needed): a full hit stops a block short
            hits = pool.hit(keys[: (request.tokens - 1) // block_tokens])
            needed = -(-request.tokens // block_tokens) - len(hits)
            evictable_hits = sum(1 for b in hits if b in pool.free)
            if needed > len(pool.free) - evictable_hits:
                break  # first come first served: the head waits for blocks, and so does everyone behind it
            waiting.pop(0)
            pool.take(hits)
            fresh = pool.new(needed) or []
            request.blocks = hits + fresh
            for index, key in enumerate(keys[len(hits) :], start=len(hits)):
                pool.register(request.blocks[index], key)
            if not request.scheduled:
                request.scheduled = True
                missed = keys[len(hits) : (request.tokens - 1) // block_tokens]
                again = [key for key in missed if key in computed_keys]
                if request.turn.measured:
                    prompt_tokens += len(request.turn.prompt)
                    hit_tokens += len(hits) * block_tokens
                    recomputed += len(again) * block_tokens
                    tier_served += sum(1 for key in again if key in tier) * block_tokens
                for key in keys[len(hits) :]:
                    computed_keys.add(key)
                    tier[key] = None
                    tier.move_to_end(key)
                for key in keys[: len(hits)]:
                    if key in tier:
                        tier.move_to_end(key)
                while len(tier) > tier_blocks:
                    tier.popitem(last=False)
            prefill_tokens += request.tokens - len(hits) * block_tokens
            request.prefilled = True
            running.append(request)

        for request in running:
            session = request.turn.session
            contexts_changed |= context.get(session, ([], 0))[0] is not request.keys
            context[session] = (request.keys, request.tokens + 1)
        if contexts_changed:
            shared_blocks = len({key for keys, _ in context.values() for key in keys})
            contexts_changed = False
        tails = sum(tokens - len(keys) * block_tokens for keys, tokens in context.values())
        peak = max(peak, shared_blocks * block_tokens + tails)
        now += timing.step_ms + timing.prefill_ms_per_token * prefill_tokens
        for request in list(running):
            request.generated += 1
            request.tokens += 1
            if request.generated >= request.turn.output_tokens:
                running.remove(request)
                pool.release(request.blocks)
                session = request.turn.session
                if pending[session]:
                    arrivals.append((now + timing.turn_gap_ms, session))
                    continue
                del context[session]
                contexts_changed = True
                if next_session < len(pending):
                    arrivals.append((now + timing.turn_gap_ms, next_session))
                    next_session += 1
    return CacheOutcome(prompt_tokens, hit_tokens, recomputed, tier_served, peak, preemptions)
