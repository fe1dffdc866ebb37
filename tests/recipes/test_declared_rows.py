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
    LOOPBACK_URL_WHY,
    METRICS_URLS_WHY,
    PARALLEL_DEFAULT_WHY,
    ROUTER_ENV_WHY,
    VERSION_WHY,
    load_declared,
    own_choice,
    render_rows,
)
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


@pytest.mark.parametrize(
    ("diff", "why"),
    [
        (Difference("router", "env VLLM_RPC_TIMEOUT", "600000", None), ROUTER_ENV_WHY),
        (Difference("router", "--worker-urls", "http://localhost:8889", "http://127.0.0.1:8889"), LOOPBACK_URL_WHY),
        (Difference("replay", "--server-metrics", "http://localhost:8889/metrics", "http://127.0.0.1:8889/metrics"),
         LOOPBACK_URL_WHY),
        (Difference("replay", "env AIPERF_SERVER_METRICS_URLS", "http://localhost:8889/metrics", None), METRICS_URLS_WHY),
        (Difference("provision", "version vllm-router", None, "0.1.14"), VERSION_WHY),
        (Difference("engine", "--data-parallel-size", "1", None), PARALLEL_DEFAULT_WHY),
        (Difference("router", "--host", "0.0.0.0", "127.0.0.1"), own_choice(Difference("engine", "--host", "0.0.0.0", "127.0.0.1"))),
    ],
)  # fmt: skip
def test_slurmxs_constant_choices_are_recognised(diff: Difference, why: str) -> None:
    assert why is not None and own_choice(diff) == why


@pytest.mark.parametrize(
    "diff",
    [
        Difference("router", "env RUST_LOG", "debug", None),  # the router reads it
        Difference("router", "env X", "1", "2"),  # slurmx sets another value: not inheritance
        Difference("router", "--worker-urls", "http://localhost:8889", "http://127.0.0.1:9999"),
        Difference("engine", "--data-parallel-size", "2", None),
        Difference("replay", "env AIPERF_SERVER_METRICS_URLS", "http://lmcache:9000/metrics", None),
    ],
)  # fmt: skip
def test_differences_that_are_no_constant_choice_are_left_for_review(diff: Difference) -> None:
    assert own_choice(diff) is None


def test_an_engine_stack_setting_the_replay_inherits_upstream_is_recognised() -> None:
    from slurmx.upstream.declared import inherited_by_replay

    upstream = {("engine", "env PYTORCH_ALLOC_CONF"): "expandable_segments:True", ("engine", "env HF_HUB_CACHE"): "/c"}
    inherited = Difference("replay", "env PYTORCH_ALLOC_CONF", "expandable_segments:True", None)
    assert inherited_by_replay(inherited, upstream)
    assert not inherited_by_replay(Difference("replay", "env HF_HUB_CACHE", "/c", None), upstream)  # read
    assert not inherited_by_replay(Difference("replay", "env PYTORCH_ALLOC_CONF", "x", None), upstream)
