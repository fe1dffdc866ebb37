"""The serving job body: preflight -> backend servers -> engine -> replay -> result.json, per server group.

Points of one array task share a serving config (they differ in concurrency), so the servers start
once; caches are reset between points so each concurrency starts cold.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from slurmx.node import lock as run_lock
from slurmx.node import loopback, numa, provision, telemetry
from slurmx.node.identity import job_marker
from slurmx.node.launch import (
    ENGINE,
    ROUTER,
    LaunchPlan,
    NodePart,
    choose_ports,
    engine_direct_url,
    launch_plan,
    placed,
    ports_needed,
    replay_process,
    write_files,
)
from slurmx.node.multinode import Rendezvous, node_address, this_task
from slurmx.node.ports import free_ports
from slurmx.node.preflight import preflight
from slurmx.node.recorder import PointFailed, StageRecorder
from slurmx.node.supervisor import JOB_TEARDOWN_GRACE_S, JobInterrupted, Managed, Supervisor, SupervisorError
from slurmx.node.trace import synthetic_trace, working_set_tokens, write_trace
from slurmx.process import Process, ServerPorts
from slurmx.recipes.spec import ServingSpec
from slurmx.results.aggregate import ArtifactError, ReplayWindow, RunFacts, RunMeta, build_result, write_result
from slurmx.results.certify import Policy, StopReason, stop_reason
from slurmx.results.evidence import ArmInputs, log_failures
from slurmx.results.requests import certification, certified_by_percentile
from slurmx.results.rounds import read_artifacts
from slurmx.results.schema import Result
from slurmx.runtimes import Runtime
from slurmx.store.ledger import PointRecord, UntilCertified
from slurmx.store.lockfile import NodeLock, ProvisionStep
from slurmx.store.tree import COMMANDS, LOGS, TEARDOWN_REPLAY_JSON, PointDir

REPLAY_GRACE_S = 900  # on top of the replay's own duration, for aiperf's start-up and drain
# A replay ended early (cancel, time limit, a server's crash) gets its stop signal (aiperf: SIGINT, on
# which it cancels what is in flight, flushes its records and writes its aggregates) and this long to
# exit before SIGKILL; whatever it wrote becomes the partial result. After scancel's SIGTERM, Slurm
# SIGKILLs the whole job KillWait seconds later, so on a signal the wait is also bounded by the
# profile's kill-wait-s less what the body needs afterwards: the partial result and the point's state,
# then the servers' teardown (their grace, their SIGKILL and teardown.json).
REPLAY_STOP_GRACE_S = 20.0
RESULT_RESERVE_S = 2.0
SERVERS_TEARDOWN_RESERVE_S = JOB_TEARDOWN_GRACE_S + 1.0
READY_POLL_S = 1.0  # between health probes of a starting server
PEER_REPORT_WAIT_S = 5.0  # when the head's engine dies, how long a failing node gets to say why (the cause)


@dataclass
class Member:
    point: PointDir
    record: PointRecord
    recorder: StageRecorder
    replay: Process | None = None  # the replay that ran (for the lock)
    working_set_tokens: int | None = None
    stopped_by: Literal["certified", "budget"] | None = None  # what ended a point replayed until certified

    @property
    def spec(self) -> ServingSpec:
        assert self.record.serving is not None, "point.json has no serving spec"
        return self.record.serving


@dataclass
class Servers:
    plan: LaunchPlan
    ports: ServerPorts
    processes: list[Managed]
    spec: ServingSpec
    lock: NodeLock  # lock.json's part shared by the group's points
    telemetry_dir: Path | None = None  # the GPU sampler's files, for the whole group
    peers: Rendezvous | None = None  # a multinode point's other nodes

    @property
    def engine_direct_url(self) -> str:
        return engine_direct_url(self.spec, self.ports)


@dataclass
class Prepared:
    """A node made ready for its servers: provisioning under way (what the servers need answered), its ports
    chosen, what it starts and where (NUMA)."""

    provisioning: provision.Provisioning
    ports: ServerPorts
    plan: LaunchPlan
    numa_prefix: list[str]
    numa_record: dict[str, Any]


def prepare_node(
    first: Member,
    runtime: Runtime,
    supervisor: Supervisor,
    part: NodePart | None,
    run_dir: Path,
    head_ports: Mapping[str, int] | None = None,
) -> Prepared:
    """Preflight, provisioning, ports, the launch plan and the NUMA placement of this node's servers: the same
    steps on the head and on every other node of a multinode point (`run_dir`: this node's directory of the
    point, where the files its servers read are written; `head_ports`: the backend ports the head published for
    the servers it runs for every node's ranks)."""
    spec = first.spec
    node_profile = first.record.cluster_profile.node
    problems = preflight(
        spec, runtime, dict(os.environ), remove_shm=bool(node_profile and node_profile.clean_shm),
        gpus_absent=node_profile.gpu_checks_absent if node_profile else None,
    )  # fmt: skip
    if problems:
        raise PointFailed("preflight: " + "; ".join(problems))
    provisioning = provision.start(spec, runtime, supervisor)  # its other checks answer beside the servers' start
    ports = choose_ports(spec, free_ports(ports_needed(spec)))
    if head_ports:
        ports = replace(ports, named={**ports.named, **head_ports})
    plan = launch_plan(spec, ports, runtime, provisioning.provisioned.env, part, run_dir)
    for process in plan.servers:
        write_files(process)
    numa_prefix, numa_record = numa.placement(
        node_profile.numa_policy if node_profile else "none", dict(os.environ), in_container=not runtime.tools_on_host
    )
    return Prepared(provisioning, ports, plan, numa_prefix, numa_record)


def start_servers(first: Member, runtime: Runtime, supervisor: Supervisor, peers: Rendezvous | None = None) -> Servers:
    """`peers`: a multinode point's other nodes; this node is the head and tells them where it listens."""
    spec = first.spec
    part = None
    if peers is not None:
        task = this_task()
        rpc_port, master_port = free_ports(2)
        address = node_address(task.name)
        part = NodePart(0, address, rpc_port, master_port, address)
    prepared = prepare_node(first, runtime, supervisor, part, first.point.path)
    if peers is not None and part is not None:  # where it listens, its ports chosen: the backend's shared servers' too
        shared = prepared.ports.named if spec.implementation.backend.head_servers else {}
        peers.publish_head(this_task().name, part, shared)
    ports, plan = prepared.ports, prepared.plan
    numa_prefix, numa_record = prepared.numa_prefix, prepared.numa_record
    base_env = dict(os.environ)
    telemetry_dir = first.point.telemetry  # sampled for the whole group; torn down with the rest
    node_profile = first.record.cluster_profile.node
    absent = node_profile.gpu_checks_absent if node_profile else None
    sampler = telemetry.telemetry_argv(sys.executable, telemetry_dir, absent=absent)
    supervisor.start("telemetry", sampler, {}, base_env=base_env)
    started = []
    try:
        for process in plan.servers:
            first.recorder.stage("engine" if process.name in (ENGINE, ROUTER) else "lmcache")
            argv = placed(process, runtime, numa_prefix).argv
            managed = supervisor.start(process.name, argv, process.env, base_env=base_env)
            started.append(managed)
            if process.health_url:
                try:
                    supervisor.wait_ready(
                        managed,
                        process.health_url,
                        timeout_s=process.ready_timeout_s,
                        interval_s=READY_POLL_S,
                        abort=peers.failed_peer if peers is not None else None,
                    )
                except SupervisorError as exc:
                    if peers is not None and (failed := peers.failed_peer()) is not None:
                        raise PointFailed(failed) from exc
                    raise PointFailed(f"{process.name} did not become ready: {exc}".splitlines()[0]) from exc
            if fatal := log_failures(spec.backend.name, {process.name: managed.log_path}, fatal_only=True):
                raise PointFailed(fatal[0])
    except PointFailed:
        prepared.provisioning.finish()  # a failed check (a connector that does not import) is the cause
        raise
    provisioned = prepared.provisioning.finish()
    if peers is not None:  # the head answers once every rank registered; each node also says it runs
        others = this_task().count - 1
        if (why := peers.await_peers(others, "running", spec.startup_timeout_s)) is not None:
            raise PointFailed(f"multinode deployment not ready: {why}")
    lock = what_ran(first, runtime, supervisor).model_copy(
        update={
            "numa": numa_record,
            "provision": [ProvisionStep(**step) for step in provisioned.record],
            "aiperf_revision": provisioned.aiperf_revision,
            "model_revision": provisioned.model_revision,
        }  # fmt: skip
    )
    return Servers(plan, ports, started, spec, lock, telemetry_dir, peers)


def what_ran(first: Member, runtime: Runtime, supervisor: Supervisor) -> NodeLock:
    """The lock's shared part: versions read by each environment's own interpreter, GPUs, node."""
    spec = first.spec
    implemented = spec.implementation
    pinned = implemented.backend.distribution_of(spec.backend)
    distributions = run_lock.engine_distributions(implemented.engine, pinned)
    engine = run_lock.probe_versions(supervisor, runtime, "versions-engine", runtime.engine_python, distributions)
    aiperf_python = run_lock.interpreter_of(runtime.aiperf_bin) if runtime.tools_on_host else runtime.aiperf_python
    aiperf = run_lock.probe_versions(
        supervisor, runtime, "versions-aiperf", aiperf_python, run_lock.AIPERF_DISTRIBUTIONS
    )
    return run_lock.node_lock(first.record.point.image, runtime, engine, aiperf, run_lock.gpu_models(supervisor))


def _link_server_logs(owner: PointDir, member: PointDir) -> None:
    """Points that reuse a server see its logs and commands in their own directories."""
    for sub in (LOGS, COMMANDS):
        (member.path / sub).mkdir(parents=True, exist_ok=True)
        for source in (owner.path / sub).glob("*"):
            if source.name.startswith("replay"):
                continue
            target = member.path / sub / source.name
            if not target.exists():
                target.symlink_to(os.path.relpath(source, target.parent))


def reset_caches(servers: Servers) -> None:
    """Cold caches for each concurrency on a shared server: the engine's prefix cache, then the tier's."""
    spec = servers.spec
    implemented = spec.implementation
    path = implemented.engine.cache_reset_path()
    engine_ok = path is None or loopback.post_ok(f"{servers.engine_direct_url}{path}")
    tier_failed = [url for url in implemented.backend.cache_reset_urls(spec.backend, servers.ports)
                   if not loopback.post_ok(url)]  # fmt: skip
    if not engine_ok:
        hint = implemented.engine.cache_reset_hint()
        raise PointFailed(f"could not reset the engine's prefix cache between points ({hint})")
    if tier_failed:  # a tier still holding the last point's KV would serve this one hits it never stored
        raise PointFailed(f"could not reset the KV tier's cache between points (POST {', '.join(tier_failed)})")


def check_servers(servers: Servers, supervisor: Supervisor, context: str) -> None:
    """Every server still up, on this node and (multinode) on the others; else the point fails with the cause."""
    if servers.peers is not None and (failed := servers.peers.failed_peer()) is not None:
        raise PointFailed(f"{failed} {context}")
    for managed in servers.processes:
        code = supervisor.poll(managed)
        if code is not None:
            if servers.peers is not None and (failed := _peer_cause(servers.peers)) is not None:
                raise PointFailed(f"{failed} {context}")
            tail = managed.log_tail(5).strip().splitlines()
            raise PointFailed(f"{managed.name} exited with code {code} {context}" + (f": {tail[-1]}" if tail else ""))


def replay_stop_grace(member: Member) -> float:
    """How long teardown waits for the replay's graceful stop (see REPLAY_STOP_GRACE_S)."""
    slurm = member.record.cluster_profile.slurm
    after = RESULT_RESERVE_S + SERVERS_TEARDOWN_RESERVE_S
    kill_wait = slurm.kill_wait_s if slurm is not None else REPLAY_STOP_GRACE_S + after
    return max(0.5, min(REPLAY_STOP_GRACE_S, kill_wait - after))


def _peer_cause(peers: Rendezvous) -> str | None:
    """A rank dying on another node takes the head's engine with it: give that node a moment to say so."""
    deadline = time.monotonic() + PEER_REPORT_WAIT_S
    while time.monotonic() < deadline:
        if (failed := peers.failed_peer()) is not None:
            return failed
        time.sleep(0.5)
    return None


@dataclass(frozen=True)
class _Opened:
    """A point's replay as it began: when, and the engine's and the tier's /metrics right before it."""

    started: float
    before: str | None
    tier_before: list[str | None]


def run_replay(member: Member, servers: Servers, runtime: Runtime, supervisor: Supervisor) -> ReplayWindow:
    """The point's replay into aiperf/, or (`--until-certified`) its rounds into aiperf/round-<k>/."""
    trace, turns = _prepare_trace(member)
    opened = _open(member, servers)
    until = member.record.until_certified
    if until is None:
        return _replay_once(member, servers, runtime, member.point.aiperf, (trace, turns), opened)
    max_s, k, round_s = until.max_point_minutes * 60.0, 0, 0.0
    while True:
        k += 1
        if k > 1:  # each round a full cold replay: caches reset as between points
            check_servers(servers, supervisor, "before this round")
            reset_caches(servers)
        began = time.time()
        window = _replay_once(member, servers, runtime, member.point.aiperf_round(k), (trace, turns), opened)
        round_s = max(round_s, time.time() - began)
        elapsed = time.time() - opened.started
        try:
            records = read_artifacts(member.point.aiperf, member.spec.implementation.engine.metrics).records
        except ArtifactError as exc:
            raise PointFailed(f"replay artifacts unusable: {exc}") from exc
        certified = certified_by_percentile(certification(records, policy_of(until)))
        reason = rounds_stop(certified, until, elapsed, round_s, max_s)
        if reason != "continue":
            member.stopped_by = reason
            return window


def policy_of(until: UntilCertified | None) -> Policy | None:
    """The rule a point run until certified is certified by (its width, when `--rel-width` gave one), for the
    stop and for its result alike; None: the default."""
    return Policy(rel_width=until.rel_width) if until is not None and until.rel_width is not None else None


def rounds_stop(
    certified: dict[str, bool], until: UntilCertified, elapsed_s: float, round_s: float, max_s: float
) -> StopReason:
    """certify.stop_reason, and a budget stop when one more round (as long as the longest so far) would overrun
    it: the job's time limit was checked against the budget, not against the budget plus a round."""
    reason = stop_reason(certified, until.percentiles, elapsed_s, max_s=max_s, min_duration_s=until.min_duration_s)
    return "budget" if reason == "continue" and elapsed_s + round_s > max_s else reason


def _prepare_trace(member: Member) -> tuple[Path | None, int]:
    """The synthetic trace the replay reads (every round replays the same one) and its working set."""
    spec = member.spec
    if spec.replay.kind != "synthetic":
        return None, 0
    rows = synthetic_trace(spec.replay, spec.conc)
    write_trace(member.point.trace_jsonl, rows)
    member.working_set_tokens = working_set_tokens(
        rows, spec.conc, spec.replay.shared_prefix_tokens, spec.replay.output_tokens
    )
    return member.point.trace_jsonl, len(rows)


def _open(member: Member, servers: Servers) -> _Opened:
    spec = member.spec
    metrics_url = servers.engine_direct_url + spec.implementation.engine.metrics_path
    tier_urls = spec.implementation.backend.metrics_urls(spec.backend, servers.ports)
    before = loopback.get_text(metrics_url)
    tier_before = [loopback.get_text(url) for url in tier_urls]
    return _Opened(time.time(), before, tier_before)  # the replay starts once every scrape is in


def _replay_once(
    member: Member,
    servers: Servers,
    runtime: Runtime,
    artifacts: Path,
    trace: tuple[Path | None, int],
    opened: _Opened,
) -> ReplayWindow:
    """One aiperf run into `artifacts`; its window spans from the point's first replay (`opened`) to this one's end."""
    spec = member.spec
    artifacts.mkdir(parents=True, exist_ok=True)
    process = replay_process(spec, servers.ports, runtime, artifacts, *trace)
    member.replay = process
    metrics_url = servers.engine_direct_url + spec.implementation.engine.metrics_path
    tier_urls = spec.implementation.backend.metrics_urls(spec.backend, servers.ports)
    started, before = opened.started, opened.before
    try:
        with Supervisor(
            member.point.path,
            f"{job_marker()}-{member.point.member_id}-replay",  # the job's prefix: a sweep by job id finds aiperf too
            grace_s=REPLAY_STOP_GRACE_S,  # a server's crash, the replay's deadline
            signal_grace_s=replay_stop_grace(member),  # cancel, time limit: within Slurm's KillWait
            report_name=TEARDOWN_REPLAY_JSON,
        ) as replay_sup:
            managed = replay_sup.start(
                "replay", process.argv, process.env, base_env=dict(os.environ), stop_signal=process.stop_signal
            )
            deadline = time.monotonic() + spec.duration_s + REPLAY_GRACE_S
            while True:
                check_servers(servers, replay_sup, "during the replay")
                if time.monotonic() > deadline:
                    raise PointFailed(f"the replay ran past {spec.duration_s + REPLAY_GRACE_S} s")
                try:  # returns as soon as aiperf exits; a server dying is noticed within a second
                    code = replay_sup.wait(managed, timeout_s=1.0)
                    break
                except subprocess.TimeoutExpired:
                    continue
    except PointFailed as exc:
        keep_partial(member, servers, ReplayWindow(started, time.time(), before), str(exc))
        raise
    except JobInterrupted as exc:
        # the replay has stopped (the handler tore it down); write what it measured, then the reason,
        # before the servers' teardown: Slurm's SIGKILL may end the job during it
        why = _interrupted(exc.signum)
        keep_partial(member, servers, ReplayWindow(started, time.time(), before), why, interrupted=True)
        member.recorder.ended_by(signal.Signals(exc.signum).name, why)
        raise
    ended = time.time()
    try:
        check_servers(servers, replay_sup, "during the replay")
    except PointFailed as exc:
        keep_partial(member, servers, ReplayWindow(started, ended, before), str(exc))
        raise
    after = loopback.get_text(metrics_url)
    tier = tuple(zip(opened.tier_before, [loopback.get_text(url) for url in tier_urls], strict=True))
    if code != 0:
        tail = (managed.log_tail(3).strip().splitlines() or ["no output"])[-1]
        raise PointFailed(f"aiperf exited with code {code}: {tail}")
    return ReplayWindow(
        started_at=started, ended_at=ended, engine_metrics_before=before, engine_metrics_after=after, tier_metrics=tier
    )


def _interrupted(signum: int) -> str:
    return "time limit near (SIGUSR2)" if signum == signal.SIGUSR2 else f"interrupted by {signal.Signals(signum).name}"


def _build(
    member: Member, window: ReplayWindow, servers: Servers, *, interrupted: bool = False, partial: str | None = None
) -> Result:
    """The point's result, finished and judged, and its lock.json (the lock first: a result never lacks its lock).

    `interrupted`: a signal ended the job; its sampler got the signal too, so no sample is awaited.
    `partial`: why the replay ended early, when it did."""
    engine = next((p for p in servers.processes if p.name == "engine"), None)
    state = member.recorder.state
    nodes = (state.node or "", *servers.peers.peers()) if servers.peers is not None else ()
    run = RunMeta(
        sweep_id=member.record.sweep_id, attempt=state.attempt, slurm_job_id=state.job_id, node=state.node, nodes=nodes
    )
    arm = ArmInputs(
        engine_argv=engine.argv if engine else None,  # the argv that ran, as the supervisor started it
        logs={p.name: p.log_path for p in servers.processes},
        working_set_tokens=member.working_set_tokens,
        block_tokens=member.spec.block_size,
    )
    planned = servers.plan.servers if servers.plan is not None else []
    processes = [*planned, *([member.replay] if member.replay else [])]
    run_lock.write_lock(member.point.lock_json, member.record.point_id, servers.lock, processes)
    if servers.telemetry_dir is not None and window.ended_at is not None and not interrupted:
        telemetry.await_sample_after(servers.telemetry_dir, window.ended_at)
    versions = servers.lock.versions.engine
    implemented = member.spec.implementation
    # the installed build of the arm's pin: its distribution, not the backend's name (Mooncake's is
    # mooncake-transfer-engine, or the arm's CUDA 13 wheel)
    pinned = implemented.backend.distribution_of(member.spec.backend)
    facts = RunFacts(
        failed_request_threshold=member.spec.replay.failed_request_threshold,
        engine_version=implemented.engine.version_of(versions),
        backend_version=versions.get(pinned) if pinned else None,
        image_digest=servers.lock.image_digest,
        # the repeat is part of the result's identity; the point id stays the point's
        repeat=member.point.repeat,
        repeats=member.record.repeats,
        repeat_mode=member.record.repeat_mode,
        partial_reason=partial,
        stopped_by=member.stopped_by,
    )
    return build_result(
        member.record.point,
        member.point.aiperf,
        run=run,
        window=window,
        engine_logs=[
            *([engine.log_path] if engine else []),
            *(servers.peers.node_logs(ENGINE) if servers.peers is not None else []),
        ],
        arm=arm,
        telemetry_dir=servers.telemetry_dir,
        facts=facts,
        policy=policy_of(member.record.until_certified),
    )


def keep_partial(
    member: Member, servers: Servers, window: ReplayWindow, reason: str, *, interrupted: bool = False
) -> None:
    """A replay ended early (time limit, cancel, a server crash): keep what aiperf wrote, marked invalid."""
    try:
        result = _build(member, window, servers, interrupted=interrupted, partial=reason)
    except ArtifactError:
        return  # aiperf wrote no records: nothing to keep
    write_result(member.point.result_json, result)


def aggregate(member: Member, window: ReplayWindow, servers: Servers) -> None:
    """result.json, valid or not: an invalid point keeps its figures and its reason (collect shows it)."""
    member.recorder.stage("aggregate")
    try:
        result = _build(member, window, servers)
    except ArtifactError as exc:
        raise PointFailed(f"replay artifacts unusable: {exc}") from exc
    assert result.slurmx is not None
    write_result(member.point.result_json, result)
    if result.slurmx.invalid_reason:
        raise PointFailed(f"invalid result: {result.slurmx.invalid_reason}")


def run_group(
    members: list[Member],
    runtime: Runtime,
    supervisor: Supervisor,
    outcomes: dict[str, str],
    peers: Rendezvous | None = None,
) -> None:
    """Run every member on one set of servers, started by `runtime` (the body resolved it once for the task);
    a member's failure does not stop the next one."""
    first = members[0]
    try:
        servers = start_servers(first, runtime, supervisor, peers)
    except PointFailed as exc:
        for member in members:
            member.recorder.stage("failed", str(exc) if member is first else f"not run: {exc}")
            outcomes[member.point.member_id] = str(exc)
        return
    for index, member in enumerate(members):
        try:
            if index:
                member.recorder.started()
                _link_server_logs(first.point, member.point)
                check_servers(servers, supervisor, "before this point")
                reset_caches(servers)
            member.recorder.stage("replay")
            window = run_replay(member, servers, runtime, supervisor)
            aggregate(member, window, servers)
            member.recorder.stage("done")
            outcomes[member.point.member_id] = "done"
        except (PointFailed, SupervisorError) as exc:
            reason = str(exc).splitlines()[0]
            member.recorder.stage("failed", reason)
            outcomes[member.point.member_id] = reason
