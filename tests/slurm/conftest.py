"""Fixtures for tests on the real local Slurm cluster (scripts/local-slurm.sh up)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmx.cli import main
from slurmx.slurm.commands import SlurmUnavailable, run_slurm
from tests.helpers.jobs import cancel_and_drain

CLUSTERS = """\
hardware:
  cluster:local:
    available-cpu-dram-mib: 16_000
    gpus-per-node: 8
    slurm:
      partition: local
      gres-type: b300
      features: [b300]
      mem: 1G
      exclusive: false
      time-limit-min: {time_limit}
      array-parallelism: 8
      signal-delay-s: 30
    runtime:
      kind: command
      command: ["bash", "-c", {command}]
  cluster:big:
    available-cpu-dram-mib: 16_000
    gpus-per-node: 16
    slurm: {{ partition: local, gres-type: b300, features: [b300], mem: 1G, exclusive: false, time-limit-min: 5 }}
    runtime: {{ kind: command, command: ["true"] }}
"""

# What each concurrency does: 1 succeeds, 2 fails, anything else runs until stopped.
BEHAVIOUR = (
    'case "$SLURMX_CONC" in 1) echo ok; exit 0;; 2) echo "boom: bad input" >&2; exit 3;; *) exec sleep 600;; esac'
)


def master(key: str, tp: int | dict[int, list[int]], concs: list[int], runner: str = "cluster:local") -> str:
    """One search-space entry per tensor-parallel size (`tp` as {tp: concs} mixes sizes in one key)."""
    by_tp = tp if isinstance(tp, dict) else {tp: concs}
    entries = "".join(
        f"      - {{ tp: {size}, kv-offloading: none, conc-list: {json.dumps(sizes)} }}\n"
        for size, sizes in by_tp.items()
    )
    return f"""\
{key}:
  image: local
  model: local/tiny-llama
  model-prefix: tiny
  runner: {runner}
  precision: fp32
  framework: vllm
  multinode: false
  scenarios:
    agentic-coding:
    - search-space:
{entries}"""


def slurm_ready(timeout_s: float = 30.0) -> str | None:
    """None when the local cluster has a node to run on, else why not, in one line (sinfo missing, failing,
    not answering within `timeout_s`, or no node up)."""
    try:
        proc = run_slurm(["sinfo", "-h", "-o", "%t"], timeout_s=timeout_s)
    except SlurmUnavailable as exc:
        return str(exc)
    if not any(state in proc.stdout for state in ("idle", "mix", "alloc")):
        return f"no node is up (sinfo: {' '.join(sorted(set(proc.stdout.split()))) or 'no nodes'})"
    return None


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    if (problem := slurm_ready()) is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the local Slurm cluster is not up (scripts/local-slurm.sh up): {problem}")
        pytest.skip(f"no local Slurm cluster (scripts/local-slurm.sh up): {problem}")


class SlurmEnv:
    """A configs dir and results tree in tmp, and helpers to run slurmx commands in-process."""

    def __init__(self, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.root = root
        self.capsys = capsys
        self.results = root / "results"
        self.configs = root / "configs"
        self.configs.mkdir()
        self.write_clusters(time_limit=5)

    def write_clusters(self, time_limit: int, command: str = BEHAVIOUR) -> None:
        (self.configs / "clusters.yaml").write_text(CLUSTERS.format(time_limit=time_limit, command=json.dumps(command)))

    def add_key(
        self, key: str, tp: int | dict[int, list[int]], concs: list[int], runner: str = "cluster:local"
    ) -> None:
        (self.configs / f"{key}-master.yaml").write_text(master(key, tp, concs, runner))

    def args(self, key: str | None = None) -> list[str]:
        config = [self.configs / f"{key}-master.yaml"] if key else sorted(self.configs.glob("*-master.yaml"))
        out: list[str] = []
        for path in config:
            out += ["--config", str(path)]
        return out + ["--clusters", str(self.configs / "clusters.yaml")]

    def slurmx(self, *argv: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main(list(argv))
        out, err = self.capsys.readouterr()
        return code, out, err

    def submit(self, key: str, *extra: str) -> list[dict[str, Any]]:
        code, out, err = self.slurmx("submit", key, "--json", "--results", str(self.results), *self.args(key), *extra)
        assert code == 0, err
        return json.loads(out)  # type: ignore[no-any-return]

    def status(self, target: str | None = None) -> list[dict[str, Any]]:
        """`slurmx status --json` from a fresh process, as a user in a new shell would run it."""
        argv = [sys.executable, "-m", "slurmx", "status", "--json", "--results", str(self.results)]
        proc = subprocess.run(argv + ([target] if target else []), capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)  # type: ignore[no-any-return]

    def wait_for(
        self, predicate: Callable[[dict[str, dict[str, Any]]], bool], target: str, timeout_s: float = 180
    ) -> dict[str, dict[str, Any]]:
        """Poll status until `predicate(by_conc)` holds; by_conc maps conc -> point status."""
        deadline = time.monotonic() + timeout_s
        last: dict[str, dict[str, Any]] = {}
        while time.monotonic() < deadline:
            last = {str(p["conc"]): p for p in self.status(target)}
            if predicate(last):
                return last
            time.sleep(2)
        raise AssertionError(f"timed out waiting; last status: {json.dumps(last, indent=1)}")


@pytest.fixture
def slurm_env(slurm_cluster: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[SlurmEnv]:
    env = SlurmEnv(tmp_path, capsys)
    yield env
    # Whatever the test did, leave no job of it behind for the next test.
    cancel_and_drain(env.results, lambda key: main(["cancel", key, "--results", str(env.results)]))
