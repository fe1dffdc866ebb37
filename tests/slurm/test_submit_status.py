"""submit, status, cancel and logs against the real local Slurm cluster."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slurmx.slurm import cluster_check
from slurmx.store.ledger import read_sweep
from slurmx.store.tree import ResultsTree
from tests.slurm.conftest import SlurmEnv

pytestmark = pytest.mark.slurm


def _scontrol(job_id: str) -> str:
    return subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True).stdout


def test_array_request_reaches_slurm_as_asked(slurm_env: SlurmEnv) -> None:
    slurm_env.add_key("req", tp=4, concs=[3, 4])
    report = slurm_env.submit("req")[0]
    assert report["sbatch-calls"] == 1
    array = report["array-job-id"]
    try:
        text = _scontrol(f"{array}_0") if "ArrayTaskId" in _scontrol(f"{array}_0") else _scontrol(array)
        assert re.search(r"TresPerNode=(gres:)?gpu:b300:4", text), text
        assert "Features=b300" in text
        assert re.search(r"MinMemoryNode=1G", text), text
        assert "TimeLimit=00:05:00" in text
        assert "JobName=slurmx:req" in text
        assert "Partition=local" in text
    finally:
        slurm_env.slurmx("cancel", "req", "--results", str(slurm_env.results))


def test_states_from_a_fresh_process_and_safe_resubmit(slurm_env: SlurmEnv) -> None:
    # Eight GPUs per point and two nodes: two points run at once, the rest wait (nodes full).
    slurm_env.add_key("states", tp=8, concs=[1, 2, 3, 4, 5])
    slurm_env.submit("states")
    status = slurm_env.wait_for(
        lambda s: (
            s["1"]["state"] == "completed"
            and s["2"]["state"] == "failed"
            and (s["3"]["state"], s["3"]["stage"]) == ("running", "replay")
            and (s["4"]["state"], s["4"]["stage"]) == ("running", "replay")
            and s["5"]["state"] == "pending"
        ),
        "states",
    )
    failed = status["2"]
    assert "command exited with code 3" in (failed["reason"] or "")
    assert any("boom: bad input" in line for line in failed["log_tail"])
    assert status["3"]["stage"] == "replay" and status["3"]["node"] in ("node01", "node02")
    assert status["1"]["attempt"] == 1

    # Safe twice: done, failed and active points are all skipped.
    again = slurm_env.submit("states")[0]
    actions = {p["point-id"]: (p["action"], p["why"]) for p in again["points"]}
    assert all(action == "skip" for action, _ in actions.values()), actions
    assert again["sbatch-calls"] == 0

    # Cancel one point; the pending one then runs.
    code, out, _ = slurm_env.slurmx("cancel", status["3"]["point_id"], "--results", str(slurm_env.results))
    assert code == 0 and "cancelled 1 job" in out
    status = slurm_env.wait_for(
        lambda s: s["3"]["stage"] == "cancelled" and s["3"]["state"] == "cancelled" and s["5"]["state"] == "running",
        "states",
    )
    assert "SIGTERM" in (status["3"]["reason"] or "")

    for conc in ("4", "5"):
        slurm_env.slurmx("cancel", status[conc]["point_id"], "--results", str(slurm_env.results))
    # Point 5 may be cancelled while its job is still starting up, before the body can record it.
    status = slurm_env.wait_for(lambda s: s["4"]["state"] == "cancelled" and s["5"]["state"] == "cancelled", "states")

    # --only-failed reruns the failed and cancelled points, as attempt 2; the done one stays done.
    rerun = slurm_env.submit("states", "--only-failed")[0]
    submitted = {p["point-id"] for p in rerun["points"] if p["action"] == "submit"}
    assert submitted == {status[c]["point_id"] for c in ("2", "3", "4", "5")}
    status = slurm_env.wait_for(
        lambda s: s["2"]["attempt"] == 2 and s["2"]["state"] == "failed" and s["3"]["state"] == "running", "states"
    )
    assert status["1"]["state"] == "completed" and status["1"]["attempt"] == 1

    code, _, _ = slurm_env.slurmx("cancel", "states", "--results", str(slurm_env.results))
    assert code == 0
    status = slurm_env.wait_for(
        lambda s: all(p["state"] in ("completed", "failed", "cancelled") for p in s.values()), "states"
    )
    assert {status[c]["state"] for c in ("3", "4", "5")} == {"cancelled"}

    code, out, _ = slurm_env.slurmx("logs", status["2"]["point_id"], "--results", str(slurm_env.results))
    assert code == 0 and "boom: bad input" in out


def test_time_limit_is_reported_as_timeout(slurm_env: SlurmEnv) -> None:
    # Two minutes with SIGUSR2 30 s before the end (a 1-minute limit could signal the job as it starts).
    slurm_env.write_clusters(time_limit=2)
    slurm_env.add_key("slow", tp=1, concs=[7])
    slurm_env.submit("slow")
    status = slurm_env.wait_for(
        lambda s: s["7"]["state"] == "timeout" and s["7"]["stage"] == "cancelled", "slow", timeout_s=300
    )
    # SIGUSR2 normally; Slurm's own SIGTERM at the limit if its once-a-minute check comes late.
    assert status["7"]["reason"] in ("time limit near (SIGUSR2)", "interrupted by SIGTERM")


def test_two_concurrent_submits_make_one_set_of_jobs(slurm_env: SlurmEnv) -> None:
    slurm_env.add_key("twice", tp=1, concs=[3, 4])
    argv = [
        sys.executable,
        "-m",
        "slurmx",
        "submit",
        "twice",
        "--json",
        "--results",
        str(slurm_env.results),
        *slurm_env.args("twice"),
    ]
    outputs: list[str] = []

    def submit() -> None:
        proc = subprocess.run(argv, capture_output=True, text=True, check=True)
        outputs.append(proc.stdout)

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        reports = [json.loads(o)[0] for o in outputs]
        assert sorted(r["sbatch-calls"] for r in reports) == [0, 1]
        sweep = next(ResultsTree(slurm_env.results).sweeps("twice"))
        assert [s.array_job_id is not None for s in read_sweep(sweep).submissions] == [True]
    finally:
        slurm_env.slurmx("cancel", "twice", "--results", str(slurm_env.results))


def test_gres_count_no_node_has_is_refused_before_sbatch(slurm_env: SlurmEnv) -> None:
    slurm_env.add_key("huge", tp=16, concs=[1], runner="cluster:big")
    code, out, err = slurm_env.slurmx("submit", "huge", "--results", str(slurm_env.results), *slurm_env.args("huge"))
    assert code == 2
    assert "can never run here: no node in partition 'local' has gpu:b300:16 (at most 8)" in err
    assert err.count("\n") == 1
    assert not list(Path(slurm_env.results).rglob("sweep.json"))


def test_dry_run_prints_sbatch_and_submits_nothing(slurm_env: SlurmEnv) -> None:
    slurm_env.add_key("dry", tp=2, concs=[1, 2])
    code, out, _ = slurm_env.slurmx(
        "submit", "dry", "--dry-run", "--results", str(slurm_env.results), *slurm_env.args("dry")
    )
    assert code == 0
    assert "#SBATCH --gres=gpu:b300:2" in out
    assert re.search(r"#SBATCH --array=0-1%\d+", out)
    assert "would submit" in out
    assert not Path(slurm_env.results).exists() or not list(Path(slurm_env.results).rglob("state.json"))


def test_status_falls_back_to_squeue_when_accounting_is_down(slurm_env: SlurmEnv, tmp_path: Path) -> None:
    slurm_env.add_key("noacct", tp=1, concs=[3])
    slurm_env.submit("noacct")
    # An sacct that fails the way it does when slurmdbd is unreachable.
    shim = tmp_path / "bin"
    shim.mkdir()
    sacct = shim / "sacct"
    sacct.write_text(
        "#!/bin/sh\necho 'sacct: error: Problem talking to the database: Connection refused' >&2\nexit 1\n"
    )
    sacct.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}
    argv = [sys.executable, "-m", "slurmx", "status", "noacct", "--results", str(slurm_env.results)]
    deadline = time.monotonic() + 60
    while True:
        proc = subprocess.run([*argv, "--json"], capture_output=True, text=True, check=True, env=env)
        point = json.loads(proc.stdout)[0]
        if (point["state"], point["stage"]) == ("running", "replay") or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert point["state"] == "running" and point["stage"] == "replay"
    table = subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout
    assert "states from squeue" in table


def test_a_key_mixing_gpu_counts_gets_one_array_per_request(slurm_env: SlurmEnv) -> None:
    # Concurrency 1 succeeds at once; 3 and 4 keep running until cancelled, so scontrol still knows them.
    slurm_env.add_key("mixed", tp={1: [1, 3], 2: [4]}, concs=[])
    code, dry, _ = slurm_env.slurmx(
        "submit", "mixed", "--dry-run", "--results", str(slurm_env.results), *slurm_env.args("mixed")
    )
    assert code == 0
    assert dry.count("#SBATCH --gres=gpu:b300:1") == 1 and dry.count("#SBATCH --gres=gpu:b300:2") == 1
    assert re.search(r"#SBATCH --array=0-1%\d+", dry) and re.search(r"#SBATCH --array=0-0%\d+", dry)
    code, rendered, _ = slurm_env.slurmx(
        "render", "mixed", "--results", str(slurm_env.results), *slurm_env.args("mixed")
    )
    assert code == 0
    scripts = [block for block in rendered.split("# sbatch script")[1:]]
    assert [re.findall(r"#SBATCH --(?:gres|array)=\S+", s) for s in scripts] == [
        re.findall(r"#SBATCH --(?:gres|array)=\S+", s) for s in dry.split("sbatch script for mixed")[1:]
    ]

    report = slurm_env.submit("mixed")[0]
    try:
        assert report["sbatch-calls"] == 2
        gres = {}
        for array in report["arrays"]:
            text = _scontrol(array["array-job-id"])
            asked = re.search(r"TresPerNode=(?:gres:)?gpu:b300:(\d+)", text)
            assert asked, text
            gres[array["tasks"]] = int(asked.group(1))
        assert gres == {2: 1, 1: 2}  # two 1-GPU points in one array, the 2-GPU point in another
        # Slurm says running a moment before the body records its first stage: wait for both.
        slurm_env.wait_for(
            lambda s: (
                s["1"]["state"] == "completed"
                and s["4"]["state"] == "running"
                and s["4"]["stage"] in ("replay", "preflight")
            ),
            "mixed",
        )
        sweep = next(ResultsTree(slurm_env.results).sweeps("mixed"))
        assert [s.request for s in read_sweep(sweep).submissions] == [
            "local gpu:b300:1 -C b300 mem=1G 5m",
            "local gpu:b300:2 -C b300 mem=1G 5m",
        ]
    finally:
        slurm_env.slurmx("cancel", "mixed", "--results", str(slurm_env.results))


def test_the_clusters_kill_wait_is_read_from_scontrol(slurm_env: SlurmEnv) -> None:
    """Submit compares a serving profile's kill-wait-s with this (tests/test_host_memory_at_submit.py)."""
    assert cluster_check.query_kill_wait_s() == 15  # scripts/local-slurm.sh's KillWait
