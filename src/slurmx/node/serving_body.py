"""The serving job body: preflight -> backend servers -> engine -> replay -> result.json, per server group.

Points of one array task share a serving config (they differ in concurrency), so the servers start
once; caches are reset between points so each concurrency starts cold.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import dataclass

from slurmx import backends, engines
from slurmx.node import loopback
from slurmx.node.launch import (
    ENGINE,
    ROUTER,
    LaunchPlan,
    choose_ports,
    engine_direct_url,
    launch_plan,
    ports_needed,
    replay_process,
)
from slurmx.node.ports import free_ports
from slurmx.node.preflight import preflight
from slurmx.node.recorder import PointFailed, StageRecorder
from slurmx.node.supervisor import Managed, Supervisor, SupervisorError
from slurmx.node.trace import synthetic_trace, write_trace
from slurmx.process import Process, ServerPorts
from slurmx.recipes.spec import ServingSpec
from slurmx.results import gate
from slurmx.results.aggregate import ArtifactError, ReplayWindow, RunMeta, build_result, write_result
from slurmx.runtimes import Runtime, runtime_for
from slurmx.store.ledger import PointRecord
from slurmx.store.tree import PointDir

REPLAY_GRACE_S = 900  # on top of the replay's own duration, for aiperf's start-up and drain
READY_POLL_S = 1.0  # between health probes of a starting server


@dataclass
class Member:
    point: PointDir
    record: PointRecord
    recorder: StageRecorder

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

    @property
    def engine_direct_url(self) -> str:
        return engine_direct_url(self.spec, self.ports)


def start_servers(first: Member, runtime: Runtime, supervisor: Supervisor) -> Servers:
    spec = first.spec
    problems = preflight(spec, runtime, dict(os.environ))
    if problems:
        raise PointFailed("preflight: " + "; ".join(problems))
    ports = choose_ports(spec, free_ports(ports_needed(spec)))
    plan = launch_plan(spec, ports, runtime)
    base_env = dict(os.environ)
    checks = [
        (check, supervisor.start(check.name, check.argv, check.env, base_env=base_env))
        for check in backends.get(spec.backend.name).engine_checks(spec.backend, runtime)
    ]
    started = []
    for process in plan.servers:
        if process.name == ENGINE:
            _await_checks(checks, supervisor)
        first.recorder.stage("engine" if process.name in (ENGINE, ROUTER) else "lmcache")
        managed = supervisor.start(process.name, process.argv, process.env, base_env=base_env)
        started.append(managed)
        if process.health_url:
            try:
                supervisor.wait_ready(
                    managed, process.health_url, timeout_s=process.ready_timeout_s, interval_s=READY_POLL_S
                )
            except SupervisorError as exc:
                raise PointFailed(f"{process.name} did not become ready: {exc}".splitlines()[0]) from exc
    return Servers(plan, ports, started, spec)


def _await_checks(checks: list[tuple[Process, Managed]], supervisor: Supervisor) -> None:
    """Each engine check must have exited 0 (they started with the backend's servers)."""
    for check, managed in checks:
        try:
            code = supervisor.wait(managed, timeout_s=check.ready_timeout_s)
        except subprocess.TimeoutExpired:
            raise PointFailed(f"preflight: {check.name} took over {check.ready_timeout_s:.0f} s") from None
        if code != 0:
            last = (managed.log_tail(3).strip().splitlines() or [f"exit {code}"])[-1]
            raise PointFailed(f"preflight: {check.name} ({shlex.join(check.argv)}) failed: {last}")


def _link_server_logs(owner: PointDir, member: PointDir) -> None:
    """Points that reuse a server see its logs and commands in their own directories."""
    for sub in ("logs", "commands"):
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
    path = engines.get(spec.engine).cache_reset_path()
    engine_ok = path is None or loopback.post_ok(f"{servers.engine_direct_url}{path}")
    for url in backends.get(spec.backend.name).cache_reset_urls(spec.backend, servers.ports):
        loopback.post_ok(url)
    if not engine_ok:
        raise PointFailed("could not reset the engine's prefix cache between points (set VLLM_SERVER_DEV_MODE=1)")


def check_servers(servers: Servers, supervisor: Supervisor, context: str) -> None:
    for managed in servers.processes:
        code = supervisor.poll(managed)
        if code is not None:
            tail = managed.log_tail(5).strip().splitlines()
            raise PointFailed(f"{managed.name} exited with code {code} {context}" + (f": {tail[-1]}" if tail else ""))


def run_replay(member: Member, servers: Servers, runtime: Runtime) -> ReplayWindow:
    spec = member.spec
    artifacts = member.point.aiperf
    artifacts.mkdir(parents=True, exist_ok=True)
    trace, turns = None, 0
    if spec.replay.kind == "synthetic":
        rows = synthetic_trace(spec.replay, spec.conc)
        trace, turns = member.point.path / "trace.jsonl", len(rows)
        write_trace(trace, rows)
    process = replay_process(spec, servers.ports, runtime, artifacts, trace, turns)
    metrics_url = servers.engine_direct_url + engines.get(spec.engine).metrics_path
    before = loopback.get_text(metrics_url)
    started = time.time()
    with Supervisor(member.point.path, f"{member.record.point_id}-replay", grace_s=4.0) as replay_sup:
        managed = replay_sup.start("replay", process.argv, process.env, base_env=dict(os.environ))
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
    ended = time.time()
    check_servers(servers, replay_sup, "during the replay")
    after = loopback.get_text(metrics_url)
    if code != 0:
        tail = (managed.log_tail(3).strip().splitlines() or ["no output"])[-1]
        raise PointFailed(f"aiperf exited with code {code}: {tail}")
    return ReplayWindow(started_at=started, ended_at=ended, engine_metrics_before=before, engine_metrics_after=after)


def aggregate(member: Member, window: ReplayWindow, servers: Servers) -> None:
    member.recorder.stage("aggregate")
    engine_log = next((p.log_path for p in servers.processes if p.name == "engine"), None)
    try:
        state = member.recorder.state
        run = RunMeta(
            sweep_id=member.record.sweep_id, attempt=state.attempt, slurm_job_id=state.job_id, node=state.node
        )
        result = build_result(member.record.point, member.point.aiperf, run=run, window=window, engine_log=engine_log)
    except ArtifactError as exc:
        raise PointFailed(f"replay artifacts unusable: {exc}") from exc
    reason = gate.check(result, max_error_rate=member.spec.replay.failed_request_threshold)
    if reason:
        raise PointFailed(f"invalid result: {reason}")
    write_result(member.point.result_json, result)


def run_group(members: list[Member], supervisor: Supervisor, outcomes: dict[str, str]) -> None:
    """Run every member on one set of servers; a member's failure does not stop the next one."""
    first = members[0]
    runtime = runtime_for(first.record.cluster_profile, first.record.point.image)
    try:
        servers = start_servers(first, runtime, supervisor)
    except PointFailed as exc:
        for member in members:
            member.recorder.stage("failed", str(exc) if member is first else f"not run: {exc}")
            outcomes[member.record.point_id] = str(exc)
        return
    for index, member in enumerate(members):
        try:
            if index:
                member.recorder.started()
                _link_server_logs(first.point, member.point)
                check_servers(servers, supervisor, "before this point")
                reset_caches(servers)
            member.recorder.stage("replay")
            window = run_replay(member, servers, runtime)
            aggregate(member, window, servers)
            member.recorder.stage("done")
            outcomes[member.record.point_id] = "done"
        except (PointFailed, SupervisorError) as exc:
            reason = str(exc).splitlines()[0]
            member.recorder.stage("failed", reason)
            outcomes[member.record.point_id] = reason
