"""On the real local cluster: the memory and NUMA request of a submitted LMCache point, as `scontrol show
job` shows it, is the one derived from the point (profile memory + pool + margin, the profile's NUMA
policy and sockets); a point whose need no node holds is refused at submit with the figures, and nothing
is queued. The fake nodes advertise two sockets (scripts/local-slurm.sh). The engine environment is
/bin/false, so the job fails at provisioning: no engine starts, only the request is looked at."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from slurmx.inputs import load_inputs
from slurmx.slurm.request import mem_mb
from slurmx.submit.resolved import host_memory_need_mb, resolve_points
from tests.slurm.conftest import SlurmEnv

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
KEY = "tiny-fp32-local-vllm-agentic-lmcache"

CLUSTERS = """\
hardware:
  cluster:local:
    available-cpu-dram-mib: 16_000
    gpus-per-node: 8
    slurm:
      partition: local
      gres-type: b300
      features: [b300]
      mem: {mem}
      exclusive: false
      time-limit-min: 5
      signal-delay-s: 30
      kill-wait-s: 15
      sockets-per-node: 2
    node:
      numa-policy: bind
    runtime:
      kind: venv
      engine-python: /bin/false
      aiperf-bin: /bin/false
      model-root: /nonexistent
"""


def _setup(env: SlurmEnv, mem: str) -> int:
    """The local key with its LMCache arm only; returns the point's host-memory need in MB."""
    master = (ROOT / "configs" / "local-master.yaml").read_text()
    arms = (line for line in master.splitlines() if "kv-offloading:" not in line or "name: lmcache" in line)
    master = "\n".join(arms) + "\n"
    (env.configs / f"{KEY}-master.yaml").write_text(master)
    (env.configs / "clusters.yaml").write_text(CLUSTERS.format(mem=mem))
    inputs = load_inputs([env.configs / f"{KEY}-master.yaml"], env.configs / "clusters.yaml", [KEY])
    needs = {host_memory_need_mb(r.serving)[0] for r in resolve_points(inputs.points, inputs)}
    assert len(needs) == 1 and min(needs) > 0
    return needs.pop()


def _scontrol(job_id: str) -> str:
    return subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True).stdout


def _batch_script(job_id: str) -> str:
    return subprocess.run(
        ["scontrol", "write", "batch_script", job_id, "-"], capture_output=True, text=True, check=True
    ).stdout


def _queued(name: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True, check=True).stdout
    return out.split()


def test_scontrol_shows_the_memory_and_numa_request_derived_from_the_point(slurm_env: SlurmEnv) -> None:
    need_mb = _setup(slurm_env, "1G")
    report = slurm_env.submit(KEY)[0]
    assert report["sbatch-calls"] == 1
    array = report["array-job-id"]
    try:
        text = _scontrol(f"{array}_0")
        print(text)  # the evidence, in the test's output
        assert re.search(rf"MinMemoryNode={1024 + need_mb}M\b", text), text
        assert "GresEnforceBind=Yes" in text, text
        assert re.search(r"Socks/Node=2\b", text), text
        assert re.search(r"TresPerNode=(gres:)?gpu:b300:1\b", text), text
        script = _batch_script(f"{array}_0")
        assert "#SBATCH --gres-flags=enforce-binding" in script
        assert "#SBATCH --sockets-per-node=2" in script
        assert f"#SBATCH --mem={1024 + need_mb}M" in script
        srun = next(line for line in script.splitlines() if line.startswith("srun "))
        assert "--mem-bind=local" in srun
    finally:
        slurm_env.slurmx("cancel", KEY, "--results", str(slurm_env.results))


def test_a_point_no_node_can_hold_is_refused_at_submit_and_nothing_is_queued(slurm_env: SlurmEnv) -> None:
    need_mb = _setup(slurm_env, "15G")
    asked = mem_mb("15G") + need_mb
    real = {
        int(m.group(1))
        for m in re.finditer(
            r"RealMemory=(\d+)",
            subprocess.run(["scontrol", "show", "node", "--oneliner"], capture_output=True, text=True).stdout,
        )
    }
    assert real and asked > max(real)  # 15 GiB + the pool is more than any node has
    code, _, err = slurm_env.slurmx("submit", KEY, "--json", "--results", str(slurm_env.results), *slurm_env.args(KEY))
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert f"host memory: the point needs {asked} MB (--mem={asked}M = profile mem 15360 MB + lmcache pool " in err
    assert f"has RealMemory={max(real)} MB" in err
    assert _queued(f"slurmx:{KEY}") == []
    assert not any(slurm_env.results.rglob("sweep.json"))  # no ledger either
