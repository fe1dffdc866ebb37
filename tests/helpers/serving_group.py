"""A local agentic key's no-offload points (conc 2 and 4) queued in a sweep, on a cluster profile whose engine and
aiperf are the real small stand-ins of tests/node (fake_engine.py, fake_aiperf.py): for tests that drive the job
body in-process, so that what they pin is seen by coverage (mutation testing) too."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurmx.inputs import load_inputs
from slurmx.node import serving_body
from slurmx.node.body import run_points
from slurmx.results.schema import Result
from slurmx.store.ledger import UntilCertified, queue_point
from slurmx.store.state import PointState, read_state
from slurmx.store.tree import PointDir, ResultsTree, SweepDir
from slurmx.submit.resolved import resolve_points

ROOT = Path(__file__).resolve().parents[2]
NODE_TESTS = ROOT / "tests" / "node"
KEY = "tiny-fp32-local-vllm-agentic-lmcache"
MULTINODE_KEY = "tiny-fp32-local-vllm-agentic-multinode"
VENV = "{{ kind: venv, engine-python: {bin}/python-fake, aiperf-bin: {bin}/aiperf-fake, model-root: {root}/models, hf-home: {root}/hf }}"
CLUSTERS = """\
hardware:
  cluster:local:
    available-cpu-dram-mib: 16_000
    gpus-per-node: 8
    slurm: {{ partition: local, gres-type: b300, features: [b300], mem: 6G, exclusive: false, time-limit-min: 30,
             share-server: true{slurm} }}
    runtime: {runtime}
"""
MULTINODE_CLUSTERS = """\
hardware:
  cluster:local-multinode:
    available-cpu-dram-mib: 16_000
    gpus-per-node: 1
    slurm: {{ partition: local, gres-type: b300, features: [b300], mem: 6G, exclusive: false, time-limit-min: 30,
             share-server: true, kill-wait-s: 15 }}
    node: {{ heartbeat-stale-s: 30 }}
    runtime: {runtime}
"""


@dataclass
class Group:
    root: Path
    bin: Path
    sweep: SweepDir
    ids: dict[int, str]  # conc -> point id

    def point(self, conc: int) -> PointDir:
        return self.sweep.point(self.ids[conc])

    def state(self, conc: int) -> PointState:
        state = read_state(self.point(conc).state_json)
        assert state is not None
        return state

    def stages(self, conc: int) -> list[str]:
        return [change.stage for change in self.state(conc).history]

    def result(self, conc: int) -> Result | None:
        path = self.point(conc).result_json
        return Result.model_validate_json(path.read_text()) if path.exists() else None

    def resets(self) -> list[str]:
        path = self.root / "resets"
        return path.read_text().splitlines() if path.exists() else []

    def startup_timeout(self, conc: int, seconds: int) -> None:
        """The point's servers' start-up bound (the recipe's startup-timeout-s), as point.json carries it to the node."""
        path = self.point(conc).point_json
        record = json.loads(path.read_text())
        key = next(k for k in record["serving"] if k.replace("-", "_") == "startup_timeout_s")
        record["serving"][key] = seconds
        path.write_text(json.dumps(record))

    def run(self, *concs: int) -> dict[str, str]:
        return run_points(self.sweep, [self.ids[c] for c in concs or (2, 4)])


def script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


# vLLM's stand-in; a recipe that starts vLLM as `python -c '<vllm's cli>' serve ...` (the multinode one) starts it too
# (`before`: shell lines run as vLLM starts, not for provisioning's `python -c` probes)
ENGINE = (
    'case "$1 $2" in "-c "*vllm.entrypoints*) shift 2;; -c*) exec "{python}" "{engine}" "$@";; esac\n'
    '{{before}}\nexec "{python}" "{engine}" "$@"'.format(python=sys.executable, engine=NODE_TESTS / "fake_engine.py")
)


def _stand_ins(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script(bin_dir / "python-fake", ENGINE.format(before=""))
    script(bin_dir / "aiperf-fake", f'exec "{sys.executable}" "{NODE_TESTS / "fake_aiperf.py"}" "$@"')
    (tmp_path / "models" / "tiny-llama").mkdir(parents=True)
    (tmp_path / "models" / "tiny-llama" / "config.json").write_text("{}")
    return bin_dir


def _on_the_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving_body, "READY_POLL_S", 0.05)  # the fake engine is up in a blink
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # the point's one GPU, as Slurm would set it
    monkeypatch.setenv("FAKE_ENGINE_DIR", str(tmp_path))
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT"):
        monkeypatch.delenv(name, raising=False)


def multinode_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Group, str]:
    """The local multinode key's point (one engine rank on each of two nodes, conc 2) queued in a sweep; its id."""
    bin_dir = _stand_ins(tmp_path)
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(MULTINODE_CLUSTERS.format(runtime=VENV.format(bin=bin_dir, root=tmp_path)))
    inputs = load_inputs([ROOT / "configs" / "local-multinode-master.yaml"], clusters, [MULTINODE_KEY])
    items = list(resolve_points(inputs.points, inputs))
    assert len(items) == 1
    sweep = ResultsTree(tmp_path / "results").sweep(MULTINODE_KEY, "s1")
    queue_point(sweep.point(items[0].point.point_id), items[0].record("s1"))
    _on_the_node(tmp_path, monkeypatch)
    group = Group(tmp_path, bin_dir, sweep, {2: items[0].point.point_id})
    # the recipe's 600 s bounds a wait that never ends in a broken build: 30 s, far above what the stand-ins need
    group.startup_timeout(2, 30)
    return group, items[0].point.point_id


def serving_group(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    slurm: str = "",
    runtime: str | None = None,
    until: UntilCertified | None = None,
) -> Group:
    """`slurm`: more `slurm:` fields (", max-requeues: 0"); `runtime`: the runtime profile in place of the venv one
    ({bin} and {root} are filled in); `until`: the points replayed until certified."""
    bin_dir = _stand_ins(tmp_path)
    text = CLUSTERS.format(slurm=slurm, runtime=(runtime or VENV).format(bin=bin_dir, root=tmp_path))
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(text)
    inputs = load_inputs([ROOT / "configs" / "local-master.yaml"], clusters, [KEY])
    items = [item for item in resolve_points(inputs.points, inputs) if item.point.backend_name == "none"]
    sweep = ResultsTree(tmp_path / "results").sweep(KEY, "s1")
    for item in items:
        queue_point(sweep.point(item.point.point_id), item.record("s1", until=until))
    _on_the_node(tmp_path, monkeypatch)
    ids = {int(item.point.conc or 0): item.point.point_id for item in items}
    assert sorted(ids) == [2, 4]
    return Group(tmp_path, bin_dir, sweep, ids)
