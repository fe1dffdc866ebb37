"""The serving job body: preflight -> LMCache -> engine -> replay -> result.json, per server group.

Points of one array task share a serving config (they differ in concurrency), so the servers start
once; caches are reset between points so each concurrency starts cold.
"""

from __future__ import annotations

import os
import time
import urllib.request
from dataclasses import dataclass

from typing import Any

from slurmx.backends import ServerPorts
from slurmx.node.entry import PointFailed, StageRecorder
from slurmx.node.launch import LaunchPlan, Process, engine_port, launch_plan, replay_process
from slurmx.node.ports import free_ports
from slurmx.node.preflight import preflight
from slurmx.node.runtime import Runtime, runtime_for
from slurmx.node.supervisor import Managed, Supervisor, SupervisorError
from slurmx.node.trace import synthetic_trace, write_trace
from slurmx.recipes.resolve import ServingSpec
from slurmx.results import gate
from slurmx.results.aggregate import ArtifactError, build_result, write_result
from slurmx.results.tree import PointDir
from slurmx.slurm.ledger import PointRecord

REPLAY_GRACE_S = 900  # on top of the replay's own duration, for aiperf's start-up and drain


@dataclass
class Member:
    point: PointDir
    record: PointRecord
    recorder: StageRecorder

    @property
    def spec(self) -> ServingSpec:
        assert self.record.serving is not None, "point.json has no serving spec"
        return ServingSpec.model_validate(self.record.serving)


@dataclass
class Servers:
    plan: LaunchPlan
    ports: ServerPorts
    processes: list[Managed]
    spec: ServingSpec

    @property
    def engine_direct_url(self) -> str:
        """The engine itself, not a router in front of it: for its metrics and cache resets."""
        return f"http://127.0.0.1:{engine_port(self.spec, self.ports)}"


def scrape(url: str, timeout_s: float = 10.0) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - loopback only
            return str(response.read().decode("utf-8", "replace"))
    except OSError:
        return None


def post(url: str, timeout_s: float = 30.0) -> bool:
    request = urllib.request.Request(url, method="POST", data=b"")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - loopback only
            return bool(200 <= response.status < 300)
    except OSError:
        return False


def start_servers(first: Member, runtime: Runtime, supervisor: Supervisor) -> Servers:
    spec = first.spec
    problems = preflight(spec, runtime, dict(os.environ))
    if problems:
        raise PointFailed("preflight: " + "; ".join(problems))
    engine, lmc, lmc_http, master, behind = free_ports(5)
    ports = ServerPorts(engine=engine, lmcache=lmc, lmcache_http=lmc_http, mooncake_master=master,
                        engine_behind_router=behind)
    plan = launch_plan(spec, ports, runtime)
    base_env = dict(os.environ)
    started = []
    for process in plan.servers:
        first.recorder.stage("engine" if process.name in ("engine", "router") else "lmcache")
        managed = supervisor.start(process.name, process.argv, process.env, base_env=base_env)
        started.append(managed)
        if process.health_url:
            try:
                supervisor.wait_ready(managed, process.health_url, timeout_s=process.ready_timeout_s, interval_s=1.0)
            except SupervisorError as exc:
                raise PointFailed(f"{process.name} did not become ready: {exc}".splitlines()[0]) from exc
    return Servers(plan, ports, started, spec)


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
    """Cold caches for each concurrency on a shared server (vLLM dev mode; LMCache's own clear)."""
    engine_ok = post(f"{servers.engine_direct_url}/reset_prefix_cache?reset_external=true")
    if servers.plan.servers[0].name == "lmcache":
        post(f"http://127.0.0.1:{servers.ports.lmcache_http}/cache/clear")
    if not engine_ok:
        raise PointFailed("could not reset the engine's prefix cache between points (set VLLM_SERVER_DEV_MODE=1)")


def check_servers(servers: Servers, supervisor: Supervisor, context: str) -> None:
    for managed in servers.processes:
        code = supervisor.poll(managed)
        if code is not None:
            tail = managed.log_tail(5).strip().splitlines()
            raise PointFailed(f"{managed.name} exited with code {code} {context}" + (f": {tail[-1]}" if tail else ""))


def run_replay(member: Member, servers: Servers, runtime: Runtime) -> tuple[str | None, str | None, float, float]:
    spec = member.spec
    artifacts = member.point.aiperf
    artifacts.mkdir(parents=True, exist_ok=True)
    trace, turns = None, 0
    if spec.replay.kind == "synthetic":
        rows = synthetic_trace(spec.replay, spec.conc)
        trace, turns = member.point.path / "trace.jsonl", len(rows)
        write_trace(trace, rows)
    process: Process = replay_process(spec, servers.ports, runtime, artifacts, trace, turns)
    metrics_url = f"{servers.engine_direct_url}/metrics"
    before = scrape(metrics_url)
    started = time.time()
    with Supervisor(member.point.path, f"{member.record.point_id}-replay", grace_s=4.0) as replay_sup:
        managed = replay_sup.start("replay", process.argv, process.env, base_env=dict(os.environ))
        deadline = time.monotonic() + spec.duration_s + REPLAY_GRACE_S
        while replay_sup.poll(managed) is None:
            check_servers(servers, replay_sup, "during the replay")
            if time.monotonic() > deadline:
                raise PointFailed(f"the replay ran past {spec.duration_s + REPLAY_GRACE_S} s")
            time.sleep(1.0)
        code = replay_sup.poll(managed)
    ended = time.time()
    check_servers(servers, replay_sup, "during the replay")
    after = scrape(metrics_url)
    if code != 0:
        tail = (managed.log_tail(3).strip().splitlines() or ["no output"])[-1]
        raise PointFailed(f"aiperf exited with code {code}: {tail}")
    return before, after, started, ended


def aggregate(member: Member, before: str | None, after: str | None, started: float, ended: float, servers: Servers) -> None:
    member.recorder.stage("aggregate")
    record, state = member.record, member.recorder.state
    meta: dict[str, Any] = {
        "sweep_id": record.sweep_id,
        "config_key": record.config_key,
        "attempt": state.attempt,
        "slurm_job_id": state.job_id,
        "node": state.node,
        "started_at": started,
        "ended_at": ended,
    }
    engine_log = next((p.log_path for p in servers.processes if p.name == "engine"), None)
    try:
        result = build_result(record.row, member.point.aiperf, slurmx_meta=meta, engine_metrics_before=before,
                              engine_metrics_after=after, engine_log=engine_log)
    except ArtifactError as exc:
        raise PointFailed(f"replay artifacts unusable: {exc}") from exc
    reason = gate.check(result, max_error_rate=member.spec.replay.failed_request_threshold)
    if reason:
        raise PointFailed(f"invalid result: {reason}")
    write_result(member.point.result_json, result)


def run_group(members: list[Member], supervisor: Supervisor, outcomes: dict[str, str]) -> None:
    """Run every member on one set of servers; a member's failure does not stop the next one."""
    first = members[0]
    runtime = runtime_for(first.record.cluster_profile, first.record.row.get("image"))
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
            before, after, started, ended = run_replay(member, servers, runtime)
            aggregate(member, before, after, started, ended, servers)
            member.recorder.stage("done")
            outcomes[member.record.point_id] = "done"
        except (PointFailed, SupervisorError) as exc:
            reason = str(exc).splitlines()[0]
            member.recorder.stage("failed", reason)
            outcomes[member.record.point_id] = reason


