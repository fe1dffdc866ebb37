"""A KV-offload backend added from this test module alone, through the registry: the point that names it
plans, renders with its server and connector, and its recipe arm is validated by its own rules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import Field

from slurmx import backends
from slurmx.backends.base import GB, Arm, ArmProblem, BackendSpec, BaseBackend
from slurmx.cli import main
from slurmx.engines.base import KvOffload
from slurmx.errors import ConfigError
from slurmx.flags import Flags
from slurmx.plan import Point
from slurmx.process import Process, ServerPorts, loopback
from slurmx.recipes.load import load_recipe
from slurmx.recipes.spec import ServingSpec
from slurmx.runtimes import Runtime
from slurmx.store.ledger import PointRecord

ROOT = Path(__file__).resolve().parents[2]
NAME = "toy-pool"  # a backend name slurmx ships no module for (InferenceX's "hicache" has one now)


class PoolArm(Arm):
    pool_fraction: float = Field(gt=0, le=1)
    page_tokens: int = Field(gt=0)


class PoolSpec(BackendSpec):
    pool_gb: int
    page_tokens: int

    def host_memory_bytes(self) -> int:
        return self.pool_gb * GB


class PoolBackend(BaseBackend[PoolSpec]):
    name = NAME
    arm_model = PoolArm
    spec_model = PoolSpec
    port_names = ("pool",)

    def check_arm(self, arm: Arm, engine_flags: Flags, env: dict[str, str], block_size: int) -> list[ArmProblem]:
        assert isinstance(arm, PoolArm)
        if arm.page_tokens % block_size:
            return [ArmProblem(("page-tokens",), f"page-tokens {arm.page_tokens} is not a multiple of {block_size}")]
        return []

    def spec(self, arm: Arm, point: Point) -> PoolSpec:
        assert isinstance(arm, PoolArm)
        return PoolSpec(
            name=NAME, pool_gb=int(point.total_cpu_dram_gb * arm.pool_fraction), page_tokens=arm.page_tokens
        )

    def servers(self, spec: PoolSpec, ports: ServerPorts, runtime: Runtime, env: dict[str, str]) -> list[Process]:
        argv = ["pool-server", "--port", str(ports["pool"]), "--size-gb", str(spec.pool_gb)]
        return [Process("pool", runtime.wrap(argv, "pool"), {}, loopback(ports["pool"], "/ready"))]

    def offload(self, spec: PoolSpec, ports: ServerPorts, engine: str) -> KvOffload | None:
        return KvOffload("PoolConnector", {"port": ports["pool"]})


@pytest.fixture
def pool_backend() -> Iterator[PoolBackend]:
    backend = PoolBackend()
    backends.register(backend)
    yield backend
    del backends.REGISTRY[NAME]


MASTER = {
    "toy-fp4-b300-vllm-agentic-pool": {
        "image": "vllm/vllm-openai:v0.32.0", "model": "toy/Toy-1", "model-prefix": "toy", "runner": "cluster:b300-nv",
        "precision": "fp4", "framework": "vllm", "multinode": False,
        "scenarios": {"agentic-coding": [{"dram-utilization": 0.5, "search-space": [
            {"tp": 4, "kv-offloading": "dram", "kv-offload-backend": {"name": NAME}, "conc-list": [8]},
        ]}]},
    }
}  # fmt: skip
RECIPE: dict[str, Any] = {
    "recipe": "toy-pool",
    "match": {
        "model": "toy/Toy-1",
        "model-prefix": "toy",
        "precision": "fp4",
        "framework": "vllm",
        "runner": "cluster:b300-nv",
        "image": "vllm/vllm-openai:v0.32.0",
    },  # fmt: skip
    "env-policy": {"PYTHONHASHSEED": "0"},
    "engine": {
        "launcher": ["vllm", "serve"],
        "block-size": 64,
        "flags": {"--enable-auto-tool-choice": True, "--tool-call-parser": "hermes"},
    },  # fmt: skip
    "arms": {"none": {}, NAME: {"pool-fraction": 0.5, "page-tokens": 128}},
    "replay": {"kind": "production"},
}


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "toy.yaml").write_text(yaml.safe_dump(RECIPE, sort_keys=False))
    (tmp_path / "toy-master.yaml").write_text(yaml.safe_dump(MASTER, sort_keys=False))
    monkeypatch.setenv("SLURMX_JOBS_DIR", str(tmp_path / "jobs"))
    return ["--config", str(tmp_path / "toy-master.yaml"), "--clusters", str(ROOT / "configs" / "clusters.yaml")]


def test_a_registered_backend_plans_and_renders(
    pool_backend: PoolBackend, workspace: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    key = "toy-fp4-b300-vllm-agentic-pool"
    assert main(["plan", key, *workspace]) == 0
    out = capsys.readouterr().out
    assert NAME in out and "toy-pool" in out  # the backend column and the recipe that serves it
    assert main(["render", key, *workspace]) == 0
    rendered = capsys.readouterr().out
    # budget: 2_861_022 MiB cap x 0.5 x 4/8 GPUs -> 749 GB; the pool takes half of it
    assert "--job-name=slurmx-pool" in rendered and "pool-server --port 23888 --size-gb 374" in rendered
    assert (
        '--kv-transfer-config \'{"kv_connector":"PoolConnector","kv_role":"kv_both","kv_connector_extra_config":{"port":23888}}\''
        in rendered
    )
    assert "#SBATCH --gres=gpu:4" in rendered  # b300-nv asks plain gpu:<n> (launch_b300-nv.sh)


def test_its_spec_round_trips_through_point_json(pool_backend: PoolBackend, workspace: list[str]) -> None:
    from slurmx.inputs import load_inputs
    from slurmx.submit.resolved import resolve_points

    inputs = load_inputs([Path(workspace[1])], Path(workspace[3]), ["toy-fp4-b300-vllm-agentic-pool"])
    (item,) = resolve_points(inputs.points, inputs)
    record = item.record("s1")
    back = PointRecord.model_validate_json(record.model_dump_json())
    assert isinstance(back.serving, ServingSpec) and isinstance(back.serving.backend, PoolSpec)
    assert back.serving.backend == PoolSpec(name=NAME, pool_gb=374, page_tokens=128)


def test_its_arm_is_validated_by_its_own_model_and_rules(pool_backend: PoolBackend, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    for arm, field, says in (
        ({"pool-fraction": 2.0, "page-tokens": 128}, f"arms.{NAME}.pool-fraction", "less than or equal to 1"),
        ({"pool-fraction": 0.5, "page-tokns": 128}, f"arms.{NAME}.page-tokns", "did you mean 'page-tokens'"),
        ({"pool-fraction": 0.5, "page-tokens": 100}, f"arms.{NAME}.page-tokens", "not a multiple of 64"),
    ):
        path.write_text(yaml.safe_dump({**RECIPE, "arms": {"none": {}, NAME: arm}}, sort_keys=False))
        with pytest.raises(ConfigError) as caught:
            load_recipe(path)
        assert caught.value.field == field and says in caught.value.message, caught.value
        assert caught.value.line is not None


def test_without_the_module_the_same_point_is_refused_clearly(
    workspace: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert NAME not in backends.REGISTRY
    assert main(["render", "toy-fp4-b300-vllm-agentic-pool", *workspace]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no KV-offload backend {NAME!r} in slurmx" in err
