"""Which points share one server (profile `share-server`): only those whose engine would start with the
same argv and env; a recipe whose flags follow concurrency gives each concurrency its own server."""

from __future__ import annotations

from slurmx.inputs import load_inputs
from slurmx.submit.arrays import shared_servers
from slurmx.submit.resolved import resolve_points


def _groups(key: str) -> list[list[tuple[str, int]]]:
    inputs = load_inputs(None, None, [key])
    resolved = resolve_points(inputs.key_points(key), inputs)
    return [[(p.backend_name, p.conc) for p in group] for group in shared_servers(resolved)]


def test_points_whose_engine_argv_is_the_same_share_a_server() -> None:
    assert _groups("tiny-fp32-local-vllm-agentic-lmcache") == [
        [("none", 2), ("none", 4)],
        [("lmcache", 2), ("lmcache", 4)],
        [("vllm-simple", 2), ("vllm-simple", 4)],
        [("mooncake", 2), ("mooncake", 4)],
    ]


def test_max_num_seqs_per_conc_gives_each_concurrency_its_own_server() -> None:
    # Kimi-K3's recipe sets --max-num-seqs 2 x conc (and capture sizes from it): conc 8's server is not conc 4's
    groups = _groups("kimik3-fp4-b300-vllm-agentic-dspark-lmcache")
    assert all(len(group) == 1 for group in groups) and len(groups) == 4
