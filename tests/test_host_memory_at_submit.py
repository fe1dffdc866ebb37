"""Submit refuses, before sbatch, a point whose host-memory need (its backend's pool plus preflight's
margin) no node that fits its request has; nodes as `scontrol show node` describes them."""

from __future__ import annotations

import dataclasses

import pytest

from slurmx.errors import UserError
from slurmx.inputs import load_inputs
from slurmx.slurm import cluster_check
from slurmx.slurm.cluster_check import NodeInfo
from slurmx.submit import stage as submit
from slurmx.submit.resolved import Resolved, resolve_points

KEY = "tiny-fp32-local-vllm-agentic-lmcache"


def lmcache_point() -> Resolved:
    """The key's first point that offloads to LMCache, on a profile that takes whole nodes (--mem=0)."""
    inputs = load_inputs(None, None, [KEY])
    item = next(r for r in resolve_points(inputs.points, inputs) if r.point.kv_offloading == "dram")
    return dataclasses.replace(item, request=item.request.model_copy(update={"mem": "0"}))


def node(name: str, mem_mb: int, item: Resolved) -> NodeInfo:
    r = item.request
    return NodeInfo(name, frozenset({r.partition}), {r.gres_type or "": r.gpus}, frozenset(r.features), mem_mb)


def test_the_need_is_the_pool_plus_the_margin() -> None:
    item = lmcache_point()
    assert item.serving is not None
    pool = item.serving.backend.host_memory_bytes()
    need_mb, what = submit.host_memory_need_mb(item)
    assert pool > 0 and need_mb == (pool + max(10**9, pool // 20)) // 2**20
    assert what.startswith("lmcache pool ")


def test_a_node_big_enough_passes_and_too_small_ones_are_refused_with_the_figures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    item = lmcache_point()
    need_mb, _ = submit.host_memory_need_mb(item)
    monkeypatch.setattr(cluster_check, "query_partitions", lambda: {item.request.partition})
    monkeypatch.setattr(cluster_check, "query_kill_wait_s", lambda: 15)  # the local profile's kill-wait-s
    monkeypatch.setattr(
        cluster_check, "query_nodes", lambda: [node("small1", need_mb - 1, item), node("big1", need_mb, item)]
    )
    submit.check_cluster([item], load_inputs(None, None, [KEY]))  # big1 holds it
    monkeypatch.setattr(
        cluster_check, "query_nodes", lambda: [node("small1", need_mb - 1, item), node("small2", 512, item)]
    )
    with pytest.raises(UserError) as caught:
        submit.check_cluster([item], load_inputs(None, None, [KEY]))
    assert f"host memory: the point needs {need_mb} MB (lmcache pool " in str(caught.value)
    assert f"the largest node that fits its request (small1) has RealMemory={need_mb - 1} MB" in str(caught.value)
    assert str(caught.value).startswith(f"{KEY} point {item.point.point_id}")


def test_a_point_without_a_pool_asks_nothing_more() -> None:
    item = lmcache_point()
    assert cluster_check.why_memory_short(item.request, 0, "", [node("tiny", 1, item)]) is None


def test_a_profile_kill_wait_longer_than_the_clusters_is_refused_naming_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Slurm SIGKILLs a cancelled job KillWait seconds after SIGTERM; a serving point's body plans its
    replay's graceful stop within the profile's kill-wait-s, so a longer one is refused at submit."""
    inputs = load_inputs(None, None, [KEY])
    item = lmcache_point()
    submit.check_kill_wait([item], inputs, 15)  # the profile says 15: fits
    submit.check_kill_wait([item], inputs, None)  # a cluster that does not say: nothing to check
    with pytest.raises(UserError) as caught:
        submit.check_kill_wait([item], inputs, 14)
    line = inputs.clusters.lines[item.point.runner]
    assert str(caught.value) == (
        f"{inputs.clusters.path}:{line}: hardware.cluster:local.slurm.kill-wait-s: 15 s (30 when unset) is longer "
        "than this cluster's KillWait of 14 s (scontrol show config): Slurm would SIGKILL a cancelled point's "
        "teardown; set kill-wait-s: 14"
    )
    command = dataclasses.replace(item, serving=None)  # no replay to stop: not refused
    submit.check_kill_wait([command], inputs, 4)
