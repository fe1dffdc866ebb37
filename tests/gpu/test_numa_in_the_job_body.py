"""The job body applies the profile's NUMA policy to the backend's server (not the engine): the
placement shows in commands/, the process runs pinned, and the lock records policy and topology.
Real processes stand in for LMCache and vLLM (they only report where they run)."""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from slurmx.config.clusters import NodeProfile
from slurmx.inputs import load_inputs
from slurmx.node import numa, serving_body
from slurmx.node.launch import ENGINE, LaunchPlan
from slurmx.node.recorder import StageRecorder
from slurmx.node.supervisor import Supervisor
from slurmx.process import Process
from slurmx.runtimes import runtime_for
from slurmx.store.ledger import queue_point
from slurmx.store.lockfile import NodeLock
from slurmx.store.tree import ResultsTree
from slurmx.submit.resolved import resolve_points

# one string, one write: print(a, b) unbuffered (PYTHONUNBUFFERED=1, as .ci/run exports) writes "cpus" and the
# list separately, and a reader between the two saw "cpus" alone
REPORT = "import os, time; print(f'cpus {sorted(os.sched_getaffinity(0))}', flush=True); time.sleep(60)"
REPORTED = re.compile(r"^cpus \[[0-9, ]*\]$", re.M)


def start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str, *, numactl: bool = False
) -> tuple[Path, dict[str, Any]]:
    """Start the stand-ins through the job body; `numactl` False: PATH without it (the fallback launcher)."""
    key = "tiny-fp32-local-vllm-agentic-lmcache"
    inputs = load_inputs(None, None, [key])
    item = resolve_points(inputs.points, inputs)[0]
    point = ResultsTree(tmp_path).sweep(key, "s1").point(item.point.point_id)
    record = item.record("s1")
    profile = record.cluster_profile.model_copy(update={"node": NodeProfile(numa_policy=policy)})  # type: ignore[arg-type]
    record = record.model_copy(update={"cluster_profile": profile})
    queue_point(point, record)
    member = serving_body.Member(point, record, StageRecorder(point))
    plan = LaunchPlan(
        [Process("lmcache", [sys.executable, "-c", REPORT], {}), Process(ENGINE, [sys.executable, "-c", REPORT], {})]
    )
    monkeypatch.setattr(serving_body, "preflight", lambda *a, **k: [])
    monkeypatch.setattr(  # placement needs no install
        serving_body.provision, "start", lambda spec, _, sup: serving_body.provision.Provisioning(spec, sup)
    )
    monkeypatch.setattr(serving_body, "launch_plan", lambda *a: plan)
    stub_lock = NodeLock(image=record.point.image, runtime="venv", node="node01", slurmx_version="test")
    monkeypatch.setattr(serving_body, "what_ran", lambda *a: stub_lock)
    dirs = os.environ["PATH"].split(os.pathsep)
    if not numactl:  # the same host without numactl: every PATH entry that holds one is left out
        dirs = [d for d in dirs if not (Path(d) / "numactl").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path), *dirs]))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2] / "src"))
    runtime = runtime_for(record.cluster_profile, record.point.image)
    with Supervisor(point.path, f"t15-numa-{os.getpid()}") as sup:
        servers = serving_body.start_servers(member, runtime, sup)
        deadline = time.monotonic() + 60
        logs: dict[str, str] = {}
        while time.monotonic() < deadline:  # until both stand-ins have written their whole line
            logs = {name: (point.path / "logs" / f"{name}.log").read_text() for name in ("lmcache", ENGINE)}
            if all(REPORTED.search(text) for text in logs.values()):
                break
            time.sleep(0.1)
    return point.path, {"lock": servers.lock.model_dump(mode="json"), "logs": logs}  # as lock.json holds it


def test_bind_policy_places_the_lmcache_server_and_records_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, seen = start(tmp_path, monkeypatch, "bind")
    nodes = numa.read_numa_nodes()
    cpus = ",".join(nodes[n] for n in sorted(nodes))
    assert f"-m slurmx.node.numa --cpus {cpus} --" in (path / "commands" / "lmcache.txt").read_text()
    assert "slurmx.node.numa" not in (path / "commands" / "engine.txt").read_text()
    assert f"cpus {sorted(numa.parse_cpu_list(cpus))}" in seen["logs"]["lmcache"]
    record = seen["lock"]["numa"]
    assert record["policy"] == "bind" and record["nodes"] == sorted(nodes)
    assert record["topology"]["numa_nodes"] == {str(n): c for n, c in nodes.items()}


def test_with_numactl_the_server_starts_under_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = shutil.which("numactl")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("numactl is not installed (scripts/test installs it)")
        pytest.skip("numactl is not installed (apt-get install numactl)")
    path, seen = start(tmp_path, monkeypatch, "bind", numactl=True)
    nodes = ",".join(str(n) for n in sorted(numa.read_numa_nodes()))
    assert f"{found} --cpunodebind={nodes} --membind={nodes} " in (path / "commands" / "lmcache.txt").read_text()
    assert "numactl" not in (path / "commands" / "engine.txt").read_text()
    assert "cpus " in seen["logs"]["lmcache"]  # it ran, under numactl
    assert seen["lock"]["numa"]["tool"] == "numactl"


def test_no_policy_leaves_the_command_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, seen = start(tmp_path, monkeypatch, "none")
    assert "slurmx.node.numa" not in (path / "commands" / "lmcache.txt").read_text()
    assert seen["lock"]["numa"]["policy"] == "none" and seen["lock"]["numa"]["prefix"] == []
