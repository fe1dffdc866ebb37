"""The synthetic trace and its working set, on profiles small enough to work out by hand."""

from __future__ import annotations

import json
from pathlib import Path

from slurmx.node import trace
from slurmx.recipes.model import Replay


def replay(**fields: object) -> Replay:
    base: dict[str, object] = {"kind": "synthetic", "sessions_per_conc": 1, "turns": 2, "first_turn_tokens": 300,
                               "turn_delta_tokens": 100, "shared_prefix_tokens": 256, "output_tokens": 16,
                               "block_tokens": 128}  # fmt: skip
    return Replay(**{**base, **fields})  # type: ignore[arg-type]  # the fields above, as a recipe gives them


def test_sessions_share_the_prefix_blocks_and_nothing_else() -> None:
    rows = trace.synthetic_trace(replay(), conc=2)
    assert [r["session_id"] for r in rows] == ["sess-0", "sess-0", "sess-1", "sess-1"]
    # 256 shared tokens = blocks 0 and 1; 300 - 256 = 44 own tokens = one more block
    first_0, delta_0, first_1, delta_1 = rows
    assert first_0 == {"session_id": "sess-0", "input_length": 300, "output_length": 16, "hash_ids": [0, 1, 2],
                       "delay": 0}  # fmt: skip
    assert first_1["input_length"] == 300 and first_1["hash_ids"][:2] == [0, 1]
    for delta in (delta_0, delta_1):
        # 100 tokens give or take a quarter block (32): one or two blocks of 128
        assert 68 <= delta["input_length"] <= 132 and delta["output_length"] == 16 and delta["delay"] == 0
        assert len(delta["hash_ids"]) == -(-delta["input_length"] // 128)
    own = [i for r in rows for i in r["hash_ids"] if i > 1]
    assert own == list(range(2, 2 + len(own)))  # every other block once, in order


def test_a_first_turn_shorter_than_the_prefix_still_has_a_token_of_its_own() -> None:
    (row,) = trace.synthetic_trace(replay(first_turn_tokens=100, turns=1), conc=1)
    assert row["input_length"] == 256 + 1 and row["hash_ids"] == [0, 1, 2]


def test_the_seed_and_the_concurrency_change_the_deltas() -> None:
    many = replay(turns=40)
    assert trace.synthetic_trace(many, 1) == trace.synthetic_trace(many, 1)
    deltas = {
        tuple(r["input_length"] for r in trace.synthetic_trace(replay(turns=40, random_seed=s), 1)) for s in (1, 2)
    }
    assert len(deltas) == 2
    assert len({r["input_length"] for r in trace.synthetic_trace(many, 1)[1:]}) > 1  # not one fixed delta


def test_the_working_set_of_a_trace_by_hand() -> None:
    rows = [
        {"session_id": "a", "input_length": 300},
        {"session_id": "a", "input_length": 80},
        {"session_id": "b", "input_length": 300},
    ]
    # a: 300 + 16 + 80 + 16 = 412 tokens, 156 without the 256 shared; b: 316, 60 without them
    assert trace.working_set_tokens(rows, 1, 256, 16) == 256 + 156
    assert trace.working_set_tokens(rows, 2, 256, 16) == 256 + 156 + 60
    assert trace.working_set_tokens(rows, 5, 256, 16) == 256 + 156 + 60


def test_the_trace_file_is_one_json_row_a_line(tmp_path: Path) -> None:
    rows = trace.synthetic_trace(replay(), conc=1)
    path = tmp_path / "trace.jsonl"
    trace.write_trace(path, rows)
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == rows and path.read_text().endswith("}\n")
