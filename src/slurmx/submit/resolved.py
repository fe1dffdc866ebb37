"""A point made ready to submit: its Slurm request and serving spec, resolved before anything is written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slurmx import backends, engines
from slurmx.backends import Backend
from slurmx.config.clusters import ClusterProfile
from slurmx.config.srt import named_recipe
from slurmx.engines import Engine
from slurmx.errors import UserError
from slurmx.inputs import Inputs
from slurmx.node.preflight import memory_margin_bytes
from slurmx.plan import Point, node_layout, server_gpus
from slurmx.recipes.resolve import implementation, resolve
from slurmx.recipes.spec import Implementation, ServingSpec
from slurmx.recipes.srt import SrtRefused, checkout_recipe, srt_serving
from slurmx.runtimes import Runtime, runtime_for
from slurmx.slurm.request import SlurmRequest, slurm_request
from slurmx.submit.disagg import WHY_NOT_SUBMITTED

if TYPE_CHECKING:
    from slurmx.store.ledger import PointRecord, RepeatMode, UntilCertified


@dataclass(frozen=True)
class Resolved:
    point: Point
    profile: ClusterProfile
    request: SlurmRequest
    serving: ServingSpec | None  # None when the runtime serves nothing (kind command)
    runtime: Runtime  # how the point's processes start on its nodes (the profile's runtime for its image)

    @property
    def repeat_mode(self) -> RepeatMode:
        """Repeats share the point's server when the profile shares servers, else each is its own task."""
        return (
            "shared-server" if self.profile.slurm is not None and self.profile.slurm.share_server else "separate-tasks"
        )

    def record(self, sweep_id: str, repeats: int = 1, until: UntilCertified | None = None) -> PointRecord:
        from slurmx.store.ledger import PointRecord  # the ledger's models load for submit only: plan writes none

        return PointRecord(
            point=self.point,
            sweep_id=sweep_id,
            cluster_profile=self.profile,
            slurm_request=self.request,
            serving=self.serving,
            repeats=repeats,
            repeat_mode=self.repeat_mode,
            until_certified=until,
        )


def host_memory_need_mb(serving: ServingSpec | None) -> tuple[int, str]:
    """The host DRAM a point pins (its backend's pool) plus the margin preflight asks for, in MB, and
    how that figure is made."""
    pool = serving.backend.host_memory_bytes() if serving is not None else 0
    if serving is None or not pool:
        return 0, ""
    margin = memory_margin_bytes(pool)
    mib = 2**20
    return (pool + margin) // mib, f"{serving.backend.name} pool {pool // mib} MB + margin {margin // mib} MB"


def point_request(point: Point, profile: ClusterProfile, serving: ServingSpec | None) -> SlurmRequest:
    """The point's Slurm request: the profile's, on one node or every node its workers need (GRES per
    node), with the memory the point needs on each, its NUMA options and the recipe's time limit if it has one."""
    assert profile.slurm is not None
    layout = node_layout(point, profile.gpus_per_node)
    # what the point's engine was resolved onto (an srt-slurm recipe's own resources); the plan's layout else
    gpus, nodes = (serving.gpus, serving.nodes) if serving is not None else (layout.gpus_per_node, layout.nodes)
    return slurm_request(
        profile.slurm,
        gpus,
        nodes,
        host_need_mb=host_memory_need_mb(serving)[0],
        numa_policy=profile.node.numa_policy if profile.node else "none",
        time_limit_min=serving.time_limit_min if serving else None,
    )


def why_not_runnable(
    point: Point, profile: ClusterProfile, engine: Engine | None = None, backend: Backend[Any] | None = None
) -> str | None:
    """Why slurmx cannot start this planned point's processes on this hardware, or None. Plan still shows
    its request; render lists it with this reason; submit refuses it."""
    layout = node_layout(point, profile.gpus_per_node)
    if point.multinode and layout.ranks_per_node == 0 and not point.disagg and point.prefill is not None:
        worker = point.prefill
        worker_gpus = server_gpus(worker.tp, worker.pp, worker.pcp_size)
        engine = engine or engines.get(point.engine)
        backend = backend or backends.get(point.backend_name)
        # named by the row's srt-slurm recipe, where it names one; one behind a frontend of its own is served from that
        # recipe, which may fix the pool's size (recipes/srt.py:check_pool)
        if backend.rank_span_refusal is not None and engine.frontend is None:
            named = named_recipe(worker.additional_settings)
            where = f"{named}: " if named else ""
            return f"{where}kv-offload-backend {backend.name} over {layout.nodes} nodes: {backend.rank_span_refusal}"
        return engine.rank_span_problem(worker_gpus, profile.gpus_per_node)
    return None


def check_numa_bind(
    point: Point, profile: ClusterProfile, serving: ServingSpec | None, inputs: Inputs, engine: Engine
) -> None:
    """An engine that binds its workers to their GPUs' NUMA nodes next to a pool the profile leaves unplaced
    (numa-policy none) leaves the pool wherever it is first touched. Refused, naming the profile's field."""
    if serving is None or not serving.backend.host_memory_bytes():
        return
    flag = engine.binds_numa(serving.engine_flags)
    policy = profile.node.numa_policy if profile.node else "none"
    if flag is not None and policy == "none":
        line = inputs.clusters.lines.get(point.runner)
        raise UserError(
            f"{inputs.clusters.path}:{line}: hardware.{point.runner}.node.numa-policy: none, but recipe "
            f"{serving.recipe_file} runs {engine.name} with {flag} (workers on their GPUs' NUMA nodes) next to a "
            f"{serving.backend.name} pool nothing places: set numa-policy bind or interleave, or remove "
            f"{flag} in the arm"
        )


def is_disaggregated(p: Point) -> bool:
    """Prefill and decode workers of their own (Dynamo, SGLang disaggregation)."""
    return p.multinode and (p.disagg or (p.decode is not None and p.decode.num_worker > 0))


def why_not_submittable(p: Point) -> str | None:
    """What slurmx cannot run of this point yet (it still plans and renders it), or None."""
    if is_disaggregated(p):
        return f"disaggregated multinode points cannot be submitted yet: {WHY_NOT_SUBMITTED}"
    if p.scenario != "agentic-coding":
        return f"{p.scenario} points cannot be submitted yet (agentic-coding only)"
    return None


def check_submittable(points: list[Point]) -> None:
    for p in points:
        why = why_not_submittable(p)
        if why is not None:
            raise UserError(f"{p.config_key}: {why}")


def resolve_points(points: list[Point], inputs: Inputs) -> list[Resolved]:
    """Every point's request and serving spec; any problem is raised before a file is written."""
    check_submittable(points)
    resolved, refused = resolve_runnable(points, inputs)
    for point, why in refused:
        raise UserError(f"{point.config_key}: {point.exp_name} has {why}")
    return resolved


def serve(point: Point, inputs: Inputs, gpus_per_node: int, parts: Implementation) -> ServingSpec:
    """The point's serving spec on nodes of `gpus_per_node` GPUs: from its recipe in jobs/, or for an engine behind
    a frontend of its own (Dynamo's aggregated worker) from the srt-slurm recipe its row names (recipes/srt.py), whose
    own resources then give its nodes, GPUs and time limit. Submit and plan both ask this (plan shows what submit
    asks)."""
    layout = node_layout(point, gpus_per_node)
    if parts.engine.frontend is not None:
        dram = inputs.submittable_profile(point).available_cpu_dram_mib
        return srt_serving(inputs.inferencex, point, layout, parts, dram)
    return resolve(point, inputs.recipes(), layout, parts)


def serving_of(point: Point, inputs: Inputs, profile: ClusterProfile, parts: Implementation) -> ServingSpec | None:
    """What `serve` gives the point on its profile's nodes, None where the profile's runtime serves nothing."""
    return serve(point, inputs, profile.gpus_per_node, parts) if runtime_for(profile, point.image).serves else None


def resolve_runnable(points: list[Point], inputs: Inputs) -> tuple[list[Resolved], list[tuple[Point, str]]]:
    """The points slurmx can start, resolved, and the others with the reason (`why_not_runnable`)."""
    for point in points:  # a row naming an srt-slurm recipe the checkout lacks: that, before anything else
        if point.multinode and not point.disagg and inputs.inferencex is not None:
            try:
                checkout_recipe(inputs.inferencex, point)
            except SrtRefused as missing:
                raise UserError(str(missing)) from None
    implemented = [implementation(point) for point in points]  # every point's engine and backend, once
    out = []
    refused = []
    for point, parts in zip(points, implemented, strict=True):
        profile = inputs.submittable_profile(point)
        assert profile.slurm is not None
        why = why_not_runnable(point, profile, parts.engine, parts.backend)
        if why is not None:
            refused.append((point, why))
            continue
        runtime = runtime_for(profile, point.image)
        try:
            serving = serving_of(point, inputs, profile, parts)
        except SrtRefused as why:
            refused.append((point, str(why)))
            continue
        check_numa_bind(point, profile, serving, inputs, parts.engine)
        out.append(Resolved(point, profile, point_request(point, profile, serving), serving, runtime))
    return out, refused
