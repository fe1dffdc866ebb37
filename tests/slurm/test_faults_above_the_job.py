"""Faults above one job, on the real local cluster: Slurm requeues (scontrol requeue, a node taken down),
a controller restart, accounting down, and a job cancelled in its first second. Each ends with the right
state, attempt and reason, the earlier attempt's files kept, and no process of the point left."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from slurmx.node.identity import MARKER_ENV
from slurmx.node.procscan import PROC
from slurmx.store.tree import ResultsTree
from tests.slurm.conftest import SlurmEnv

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[2]
RUN = Path("/var/lib/slurmx-local/run")


def marked_processes(job_id: str) -> list[int]:
    """Processes anywhere on this host whose slurmx marker names this job id."""
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                env = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(item.startswith(f"{MARKER_ENV}={job_id}-".encode()) for item in env):
                found.append(int(entry.name))
    return found


def point_dir(env: SlurmEnv, key: str, point_id: str) -> Path:
    sweep = next(ResultsTree(env.results).sweeps(key))
    return sweep.point(point_id).path


def test_scontrol_requeue_starts_a_new_attempt_and_keeps_the_old_one(slurm_env: SlurmEnv) -> None:
    slurm_env.add_key("requeue", tp=1, concs=[3])
    slurm_env.submit("requeue")
    first = slurm_env.wait_for(lambda s: (s["3"]["state"], s["3"]["stage"]) == ("running", "replay"), "requeue")["3"]
    job_id = first["job_id"]
    subprocess.run(["scontrol", "requeue", job_id], check=True, capture_output=True)
    again = slurm_env.wait_for(
        lambda s: s["3"]["attempt"] == 2 and (s["3"]["state"], s["3"]["stage"]) == ("running", "replay"),
        "requeue", timeout_s=240,
    )["3"]  # fmt: skip
    assert again["job_id"] == job_id  # the same Slurm job, run again
    assert len(again["requeues"]) == 1 and again["requeues"][0].startswith("attempt 1 requeued by Slurm (restart 1)")
    kept = point_dir(slurm_env, "requeue", again["point_id"]) / "attempts" / "1"
    assert (kept / "logs" / "command.log").exists() and (kept / "commands" / "command.txt").exists()
    slurm_env.slurmx("cancel", "requeue", "--results", str(slurm_env.results))
    slurm_env.wait_for(lambda s: s["3"]["state"] == "cancelled", "requeue")
    deadline = time.monotonic() + 30
    while marked_processes(job_id) and time.monotonic() < deadline:
        time.sleep(1)
    assert marked_processes(job_id) == []


def test_a_node_going_down_requeues_the_point_on_the_other_node(slurm_env: SlurmEnv) -> None:
    slurm_env.add_key("nodedown", tp=1, concs=[3])
    slurm_env.submit("nodedown")
    first = slurm_env.wait_for(lambda s: (s["3"]["state"], s["3"]["stage"]) == ("running", "replay"), "nodedown")["3"]
    node = first["node"]
    # DOWN kills and requeues the job; DRAIN keeps the node out (its slurmd would re-register it at once).
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=slurmx-fault-test"], check=True)
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=drain", "reason=slurmx-fault-test"], check=True)
    try:
        again = slurm_env.wait_for(
            lambda s: s["3"]["attempt"] == 2 and (s["3"]["state"], s["3"]["stage"]) == ("running", "replay"),
            "nodedown", timeout_s=300,
        )["3"]  # fmt: skip
        assert again["node"] != node and again["requeues"]
        assert (point_dir(slurm_env, "nodedown", again["point_id"]) / "attempts" / "1" / "logs").is_dir()
    finally:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False)
        slurm_env.slurmx("cancel", "nodedown", "--results", str(slurm_env.results))
    slurm_env.wait_for(lambda s: s["3"]["state"] == "cancelled", "nodedown")


def test_a_job_cancelled_in_its_first_second_reads_consistently(slurm_env: SlurmEnv) -> None:
    slurm_env.add_key("early", tp=1, concs=[3])
    report = slurm_env.submit("early")[0]
    subprocess.run(["scancel", report["array-job-id"]], check=True)
    point = slurm_env.wait_for(lambda s: s["3"]["state"] == "cancelled", "early")["3"]
    # Either the body took over and recorded the signal, or it never ran and status says so.
    assert point["reason"] in ("interrupted by SIGTERM", "the job ended (CANCELLED) before its body started"), point


def test_status_answers_while_the_controller_restarts_and_jobs_keep_running(slurm_env: SlurmEnv) -> None:
    slurm_env.add_key("ctld", tp=1, concs=[3])
    slurm_env.submit("ctld")
    before = slurm_env.wait_for(lambda s: (s["3"]["state"], s["3"]["stage"]) == ("running", "replay"), "ctld")["3"]
    pid = int((RUN / "slurmctld.pid").read_text())
    subprocess.run(["kill", str(pid)], check=True)
    try:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        during = slurm_env.status("ctld")[0]  # sacct answers from slurmdbd without the controller
        assert (during["state"], during["stage"]) == ("running", "replay")
        assert marked_processes(before["job_id"]), "the job's processes must keep running"
    finally:
        subprocess.run([str(ROOT / "scripts" / "local-slurm.sh"), "up"], check=True, capture_output=True)
    after = slurm_env.wait_for(lambda s: (s["3"]["state"], s["3"]["attempt"]) == ("running", 1), "ctld")["3"]
    assert after["job_id"] == before["job_id"]


def test_status_says_when_accounting_is_down(slurm_env: SlurmEnv) -> None:
    slurm_env.add_key("nodbd", tp=1, concs=[3])
    slurm_env.submit("nodbd")
    slurm_env.wait_for(lambda s: s["3"]["state"] == "running", "nodbd")
    pid = int((RUN / "slurmdbd.pid").read_text())
    subprocess.run(["kill", str(pid)], check=True)
    try:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        table = slurm_env.slurmx("status", "nodbd", "--results", str(slurm_env.results))
        assert table[0] == 0 and "states from squeue" in table[1]
        assert slurm_env.status("nodbd")[0]["state"] == "running"
    finally:
        subprocess.run([str(ROOT / "scripts" / "local-slurm.sh"), "up"], check=True, capture_output=True)
