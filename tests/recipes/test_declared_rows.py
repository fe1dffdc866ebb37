"""The declared rows `recipes import` writes: its own are marked `generated` and rewritten by the next import;
a person's are kept as written; slurmx's constant choices carry their reasons."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from slurmx.errors import ConfigError
from slurmx.upstream.declared import (
    ENGINE_METRICS_WHY,
    HASH_SEED_WHY,
    LAYOUT_WHY,
    load_declared,
    own_choice,
    render_rows,
)  # fmt: skip
from slurmx.upstream.facts import Difference

SEEDED = Difference("engine", "env PYTHONHASHSEED", None, "42")
REVIEWED = """differences:
- keys: [k]
  processes: [engine]
  item: --x
  upstream: '1'
  slurmx: '2'
  kind: deliberate
  why: a person's reason
"""


def test_a_seed_given_to_an_arm_that_set_none_is_declared_as_slurmxs_choice() -> None:
    assert own_choice(SEEDED) == HASH_SEED_WHY
    assert own_choice(Difference("engine", "env PYTHONHASHSEED", "0", "42")) is None  # a changed seed is no choice


def test_the_engines_own_metrics_named_to_aiperf_is_declared() -> None:
    assert own_choice(Difference("replay", "--server-metrics", "http://localhost:8888/metrics", None)) == (
        ENGINE_METRICS_WHY
    )
    assert own_choice(Difference("replay", "--server-metrics", "http://localhost:9999/metrics", None)) is None


def test_reimport_rewrites_generated_rows_and_keeps_reviewed_ones(tmp_path: Path) -> None:
    table = tmp_path / "t.yaml"
    table.write_text(REVIEWED)
    table.write_text(render_rows("k", [SEEDED], load_declared(table)))
    first = yaml.safe_load(table.read_text())["differences"]
    assert [(r["why"], r.get("generated")) for r in first] == [("a person's reason", None), (HASH_SEED_WHY, True)]
    layout = Difference("engine", "model", "$MODEL_PATH", "/models/m")
    table.write_text(render_rows("k", [layout], load_declared(table)))  # the seed row is gone, the person's stays
    second = yaml.safe_load(table.read_text())["differences"]
    assert [(r["why"], r.get("generated")) for r in second] == [("a person's reason", None), (LAYOUT_WHY, True)]


def test_generated_is_true_or_false(tmp_path: Path) -> None:
    table = tmp_path / "t.yaml"
    table.write_text(REVIEWED + "  generated: yes please\n")
    with pytest.raises(ConfigError, match="generated"):
        load_declared(table)
