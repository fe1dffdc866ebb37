"""A point that failed for a node's reason is retried away from that node, up to the profile's limit,
and the cluster check counts excluded nodes out."""

from __future__ import annotations

from pathlib import Path

from slurmx.inputs import load_inputs
from slurmx.slurm.accounting import JobInfo
from slurmx.slurm.cluster_check import NodeInfo, why_unrunnable
from slurmx.slurm.sbatch import ArrayPlan, render_sbatch
from slurmx.store.state import PointState
from slurmx.submit.decide import away_from_bad_nodes
from slurmx.submit.resolved import Resolved, resolve_points

KEY = "tiny-fp32-local-vllm-agentic-lmcache"


def _item() -> Resolved:
    inputs = load_inputs(None, None, [KEY])
    return resolve_points(inputs.points, inputs)[0]


def _failed(reason: str, node: str = "node01", before: list[str] | None = None) -> PointState:
    state = PointState(point_id="p", node=node, failed_nodes=before or [])
    return state.advance("failed", reason)


def test_a_preflight_failure_excludes_its_node() -> None:
    item, refusal = away_from_bad_nodes(_item(), _failed("preflight: GPUs: the point needs 1, ..."), None)
    assert refusal is None and item.request.exclude == ("node01",)
    assert "--exclude node01" in item.request.summary()


def test_a_group_member_not_run_for_a_preflight_failure_excludes_it_too() -> None:
    item, _ = away_from_bad_nodes(_item(), _failed("not run: preflight: host memory: ..."), None)
    assert item.request.exclude == ("node01",)


def test_a_node_failure_from_slurm_excludes_the_node_slurm_names() -> None:
    job = JobInfo("12_0", "NODE_FAIL", "node02", None, None, None)
    item, _ = away_from_bad_nodes(_item(), _failed("stage replay", node="node02", before=["node01"]), job)
    assert item.request.exclude == ("node01", "node02")


def test_a_point_failure_of_its_own_keeps_every_node() -> None:
    job = JobInfo("12_0", "FAILED", "node01", None, None, None)
    item, refusal = away_from_bad_nodes(_item(), _failed("aiperf exited with code 1: boom"), job)
    assert refusal is None and item.request.exclude == ()


def test_the_profile_bounds_how_many_nodes_a_point_may_fail_on() -> None:
    base = _item()
    assert base.profile.slurm is not None and base.profile.slurm.max_node_failures == 3
    _, refusal = away_from_bad_nodes(base, _failed("preflight: x", node="n3", before=["n1", "n2"]), None)
    assert refusal == "failed on 3 node(s) (n1,n2,n3), max-node-failures is 3: not resubmitted"


def test_excluded_nodes_reach_sbatch_and_the_cluster_check() -> None:
    request = _item().request.model_copy(update={"exclude": ("node01",)})
    script = render_sbatch(ArrayPlan(folder=Path("/tmp/x"), request=request, job_name="j",
                                     groups=[["p"]], array_parallelism=1, signal_delay_s=60))  # fmt: skip
    assert "#SBATCH --exclude=node01" in script
    node = NodeInfo("node01", frozenset({"local"}), {"b300": 8}, frozenset({"b300"}), 16000)
    other = NodeInfo("node02", frozenset({"local"}), {"b300": 8}, frozenset({"b300"}), 16000)
    assert why_unrunnable(request, {"local"}, [node, other]) is None
    assert (
        why_unrunnable(request, {"local"}, [node])
        == "every node of partition 'local' is excluded (node01 failed this point)"
    )
