"""A stand-in for InferenceX's agentic trace, which is not available offline: sessions built from the statistics
InferenceX itself states for the corpus, clearly labelled as a stand-in wherever advise prints a figure from it.

The production replay (`benchmark_lib.sh` build_replay_cmd) reads an aiperf public dataset of Claude Code
sessions (resolve_trace_source: `semianalysisai/cc-traces-weka-062126` for dsv4/kimik3) that slurmx only ever
downloads on a cluster. What InferenceX states about it, and what the stand-in takes:

- contexts of 118k-230k tokens per multi-turn session (perf-changelog PR #2380: "agentic replays 118-230k-token
  multi-turn tool-calling traces"): each session's prompt grows from 118k to 230k tokens;
- a ~0.97 prefix-hit ceiling (PR #2279: "a ~0.97 theoretical ceiling"): each turn adds ~3 % of the context, so
  (230k - 118k) / (0.03 x 174k) ~ 21 turns of 5.6k new tokens;
- no prefix shared between sessions (the agentx scenario locks `--cache-bust first_turn_prefix`);
- a warmed cache: each lane starts mid-trajectory after warm-up requests (`--warmup-requests-per-lane`), so the
  first turn of each session is replayed but not counted.

Not stated anywhere, so assumed (and named in the output): 300 answer tokens a turn, 2 sessions per lane.
Tokens are modelled in units of `UNIT` tokens (every seed block size is a multiple of it), which keeps a
230k-token prompt at 900 units.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmx.advise.cache_model import Timing, Turn

UNIT = 256  # tokens per modelled unit: divides the seed models' block sizes (256, 1536)


@dataclass(frozen=True)
class StandIn:
    dataset: str
    first_context_tokens: int = 118_000
    last_context_tokens: int = 230_000
    hit_ceiling: float = 0.97
    answer_tokens: int = 300  # assumed
    sessions_per_lane: int = 2  # assumed

    @property
    def turns(self) -> int:
        mean = (self.first_context_tokens + self.last_context_tokens) / 2
        return round((self.last_context_tokens - self.first_context_tokens) / ((1 - self.hit_ceiling) * mean))

    @property
    def growth_tokens(self) -> int:
        """New tokens a turn (the previous answer and this turn's input)."""
        return (self.last_context_tokens - self.first_context_tokens) // (self.turns - 1)

    def label(self) -> str:
        return (
            f"STAND-IN for {self.dataset} (not available offline): {self.sessions_per_lane} sessions a lane, "
            f"{self.turns} turns each, contexts {self.first_context_tokens // 1000}k->{self.last_context_tokens // 1000}k "
            f"tokens (+{self.growth_tokens:,} a turn: PR #2380's 118-230k, PR #2279's ~{self.hit_ceiling:.2f} "
            f"ceiling), no shared prefix (--cache-bust first_turn_prefix), first turn warm-up; assumed: "
            f"{self.answer_tokens} answer tokens a turn"
        )

    def sessions(self, lanes: int) -> list[list[Turn]]:
        """Each session's prompts in units of UNIT tokens; every session's tokens its own."""
        growth = round(self.growth_tokens / UNIT)
        answer = max(1, round(self.answer_tokens / UNIT))
        first = round(self.first_context_tokens / UNIT)
        out: list[list[Turn]] = []
        for index in range(self.sessions_per_lane * lanes):
            base = (index + 1) << 32  # a session's unit ids: no other session's
            prompt = tuple(range(base, base + first))
            turns = []
            for turn in range(self.turns):
                if turn:
                    prompt += tuple(range(base + len(prompt), base + len(prompt) + growth))
                turns.append(Turn(index, prompt, answer, measured=turn > 0))
            out.append(turns)
        return out


# The production engine's step, in units: an answer (UNIT tokens decoded at ~30 ms a step) is one modelled step,
# and a prefill costs ~0.05 ms a token (~20k tokens/s); between turns ~2 s of tool time. Assumed, not measured:
# they only decide which sessions overlap.
PRODUCTION_TIMING = Timing(step_ms=UNIT * 30.0, prefill_ms_per_token=UNIT * 0.05, turn_gap_ms=2000.0)
