"""Fixtures for end-to-end tests: the real local Slurm cluster running the real CPU stack."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmx.cli import main
from tests.helpers.jobs import cancel_and_drain
from tests.slurm.conftest import slurm_ready

ROOT = Path(__file__).resolve().parents[2]
STACK = Path(os.environ.get("SLURMX_STACK", "/opt/slurmx-stack"))
MULTINODE_RECIPE = "jobs/tiny_fp32_local_vllm_multinode.yaml"


def stack_ready() -> bool:
    return all(
        p.exists()
        for p in (
            STACK / "venvs/engine/bin/python", STACK / "venvs/aiperf/bin/aiperf", STACK / "models/tiny-llama",
            STACK / "shims/vllm-cpu-offload/sitecustomize.py",  # vLLM's own CPU offload on the CPU build
        )
    )  # fmt: skip


@pytest.fixture(scope="session")
def real_stack() -> None:
    problems = []
    if (down := slurm_ready()) is not None:
        problems.append(f"the local Slurm cluster is not up (scripts/local-slurm.sh up): {down}")
    if not stack_ready():
        problems.append(f"the CPU stack is not built in {STACK} (scripts/local-stack.sh)")
    if problems:
        if os.environ.get("CI"):
            pytest.fail("; ".join(problems))
        pytest.skip("; ".join(problems))


@pytest.fixture(scope="session")
def engine_python() -> Path:
    """The CPU stack's engine interpreter, for tests of the real engine environment without Slurm;
    required under CI like the rest of the stack."""
    if not stack_ready():
        problem = f"the CPU stack is not built in {STACK} (scripts/local-stack.sh)"
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)
    return STACK / "venvs/engine/bin/python"


def job_processes(job_id: str) -> list[tuple[int, str]]:
    """Processes whose env carries this job's marker (SLURMX_JOB_MARKER=<job id>-...), found via /proc."""
    found = []
    needle = f"SLURMX_JOB_MARKER={job_id}-".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            if any(item.startswith(needle) for item in environ.split(b"\0")):
                found.append((int(entry.name), (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]))
        except OSError:
            continue
    return found


def process_with_arg(job_id: str, arg: str) -> int | None:
    """A process of the job with `arg` anywhere in its argv (job_processes shows only the first 120 chars)."""
    for pid, _ in job_processes(job_id):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if arg.encode() in argv:
            return pid
    return None


def process_with(job_id: str, fragment: str) -> int | None:
    for pid, cmdline in job_processes(job_id):
        if fragment in cmdline:
            return pid
    return None


class StackEnv:
    """configs/jobs dirs in tmp (copies of the shipped ones, tweakable) and a results tree."""

    def __init__(self, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.root, self.capsys = root, capsys
        self.results = root / "results"
        self.configs = root / "configs"
        self.jobs = root / "jobs"
        self.configs.mkdir()
        self.jobs.mkdir()
        shutil.copy(ROOT / "configs/clusters.yaml", self.configs / "clusters.yaml")
        shutil.copy(ROOT / "jobs/tiny_fp32_local_vllm.yaml", self.jobs / "tiny_fp32_local_vllm.yaml")
        shutil.copy(ROOT / MULTINODE_RECIPE, self.jobs / Path(MULTINODE_RECIPE).name)

    def recipe(self, file: str = "tiny_fp32_local_vllm.yaml", **changes: Any) -> None:
        """Change a local recipe: keys are dotted paths, e.g. replay.sessions-per-conc=20."""
        path = self.jobs / file
        data = yaml.safe_load(path.read_text())
        for dotted, value in changes.items():
            node = data
            *parents, leaf = dotted.split(".")
            for part in parents:
                node = node[part]
            node[leaf] = value
        path.write_text(yaml.safe_dump(data, sort_keys=False))

    def key(self, name: str, arms: list[tuple[str, list[int]]]) -> None:
        entries = []
        for backend, concs in arms:
            if backend == "none":
                entries.append({"tp": 1, "kv-offloading": "none", "conc-list": concs})
            else:
                # the stack's LMCache is pinned; vllm-simple is vLLM's own and Mooncake's wheel the stack's
                pin = {"version": "0.5.6"} if backend == "lmcache" else {}
                entries.append(
                    {
                        "tp": 1,
                        "kv-offloading": "dram",
                        "kv-offload-backend": {"name": backend, **pin},
                        "conc-list": concs,
                    }
                )
        doc = {
            name: {
                "image": "local-venv",
                "model": "local/tiny-llama",
                "model-prefix": "tiny",
                "runner": "cluster:local",
                "precision": "fp32",
                "framework": "vllm",
                "multinode": False,
                "scenarios": {"agentic-coding": [{"dram-utilization": 1.0, "search-space": entries}]},
            }
        }
        (self.configs / f"{name}-master.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))

    def multinode_key(self, name: str, concs: list[int], workers: int = 2, tp: int = 1, arm: str = "none") -> None:
        """The local multinode key's shape (configs/local-multinode-master.yaml): one engine rank per node,
        or with tp=2 one rank over both nodes (a stand-in GPU each); arm "lmcache": a server per node, "mooncake": one
        master on the head."""
        worker = {"num-worker": workers, "tp": tp, "ep": 1, "dp-attn": False}
        entry: dict[str, Any] = {"kv-offloading": "none", "conc-list": concs, "prefill": worker}
        entry["decode"] = {**worker, "num-worker": 0}
        if arm != "none":
            pin = {"version": "0.5.6"} if arm == "lmcache" else {}  # mooncake: the local stack's own wheel
            entry |= {"kv-offloading": "dram", "kv-offload-backend": {"name": arm, **pin}}
        doc = {
            name: {
                "image": "local-venv",
                "model": "local/tiny-llama",
                "model-prefix": "tiny",
                "runner": "cluster:local-multinode",
                "precision": "fp32",
                "framework": "vllm",
                "multinode": True,
                "disagg": False,
                # an offload arm: the single-node local arm's 2 GB pool per node (the whole 16 GB node
                # budget plus the profile's 6G would not fit the fake nodes' RealMemory)
                "scenarios": {
                    "agentic-coding": [{"dram-utilization": 0.125 if arm != "none" else 1.0, "search-space": [entry]}]
                },
            }
        }
        (self.configs / f"{name}-master.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))

    def slurmx(self, *argv: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        old = os.environ.get("SLURMX_JOBS_DIR")
        os.environ["SLURMX_JOBS_DIR"] = str(self.jobs)
        try:
            code = main(list(argv))
        finally:
            if old is None:
                os.environ.pop("SLURMX_JOBS_DIR")
            else:
                os.environ["SLURMX_JOBS_DIR"] = old
        out, err = self.capsys.readouterr()
        return code, out, err

    def submit(self, key: str, *extra: str) -> dict[str, Any]:
        code, out, err = self.slurmx(
            "submit",
            key,
            *extra,
            "--json",
            "--results",
            str(self.results),
            "--config",
            str(self.configs / f"{key}-master.yaml"),
            "--clusters",
            str(self.configs / "clusters.yaml"),
        )
        assert code == 0, err
        return json.loads(out)[0]  # type: ignore[no-any-return]

    def status(self, key: str) -> list[dict[str, Any]]:
        proc = subprocess.run(
            [sys.executable, "-m", "slurmx", "status", key, "--json", "--results", str(self.results)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)  # type: ignore[no-any-return]

    def wait_for(
        self, key: str, predicate: Callable[[list[dict[str, Any]]], bool], timeout_s: float = 420
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        last: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            last = self.status(key)
            if predicate(last):
                return last
            time.sleep(1)
        raise AssertionError(f"timed out; last status: {json.dumps(last, indent=1)}")

    def wait_gone(self, job_id: str, timeout_s: float = 60) -> list[tuple[int, str]]:
        """Wait for every process of the job to end; return survivors (empty when all are gone)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            left = job_processes(job_id)
            if not left:
                return []
            time.sleep(0.5)
        return job_processes(job_id)


@pytest.fixture
def stack_env(real_stack: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[StackEnv]:
    env = StackEnv(tmp_path, capsys)
    yield env
    cancel_and_drain(env.results, lambda key: env.slurmx("cancel", key, "--results", str(env.results)))


def kill(pid: int, signum: int = signal.SIGKILL) -> None:
    os.kill(pid, signum)
