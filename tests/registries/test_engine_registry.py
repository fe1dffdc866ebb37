"""A serving engine added from this test module alone, through the registry: a point whose framework names
it plans, renders with the engine's own argv and offload flags, round-trips point.json, and its artifacts
(metrics under the engine's own names, its own KV-pool log line) build a result.json."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from slurmx import engines
from slurmx.cli import main
from slurmx.engines.base import EngineMetrics, Frontend, KvOffload, KvPoolLog, NodePart, RecipeProblem, RecipeSizing
from slurmx.flags import Flags, render_flags
from slurmx.inputs import load_inputs
from slurmx.plan import Point
from slurmx.recipes.spec import ServingSpec
from slurmx.results.aggregate import RunMeta, build_result, write_result
from slurmx.results.evidence import ArmInputs
from slurmx.results.schema import Result
from slurmx.store.ledger import PointRecord
from slurmx.submit.resolved import resolve_points
from tests.helpers.points import point_from_row

ROOT = Path(__file__).resolve().parents[2]
NAME = "toyserve"  # a framework slurmx ships no engine module for
DATA = ROOT / "tests" / "data" / "aiperf" / "tier-overflow" / "none"  # artifacts of a real replay


class ToyEngine:
    name = NAME
    computed_flags = frozenset({"--port", "--tp", "--batch"})
    metrics_path = "/stats"
    health_path = "/alive"
    frontend: Frontend | None = None
    spec_methods = frozenset({"none"})
    distributions: tuple[str, ...] = ("toyserve",)
    upstream_programs: Mapping[str, str] = MappingProxyType({"toyserve": "engine"})
    metrics = EngineMetrics(
        prefix="toy:", prefix_queries="toy:lookups", prefix_hits="toy:hits", external_queries="toy:ext_lookups",
        external_hits="toy:ext_hits", prompt_tokens="toy:prompt", generation_tokens="toy:generated",
        requests_done="toy:done", rank_label="replica", cached_by_source="toy:cached_by_tier",
        prompt_by_source="toy:prompt_by_origin", gpu_usage=("toy:kv_use",), cpu_usage="toy:cpu_kv_use",
        offload={},
    )  # fmt: skip
    kv_pool_log = KvPoolLog(marker="pool holds", size=r"pool holds (?P<tokens>\d+) tokens", rank=r"\[(?P<tag>r\d+)\]")
    reserved_kv_blocks = 0
    lru_prefix_cache = False
    image_dirs: tuple[str, ...] = ()
    script_suffix = ""
    hash_env = frozenset({"TOY_HASH_SEED"})
    tool_call_flags: tuple[str, ...] = ("--tools",)
    loads_connectors = True
    revision_flag = "--revision"
    model_flag: str | None = None
    draft_at: tuple[str, str] | None = None

    def parallel_flags(self, point: Point) -> list[str]:
        return ["--tp", str(point.tp)]

    def ready_timeout_s(self, env: Mapping[str, str]) -> int:
        return 0

    def block_size(self, flags: Flags) -> int:
        return 16

    def rank_gpus(self, flags: Flags) -> tuple[int, int]:
        return 1, 1

    def kv_pool_tokens(self, argv: list[str], block_size: int) -> int | None:
        return None

    def files(self, flags: list[str], run_dir: Path) -> tuple[list[str], dict[str, str]]:
        return flags, {}

    def inline_files(self, flags: Flags, files: Mapping[str, str]) -> Flags:
        return flags

    def offload_args(self, offload: KvOffload) -> tuple[list[str], dict[str, str]]:
        plugin = f"{offload.connector}@{offload.module}" if offload.module else offload.connector
        return ["--kv-plugin", plugin], {"TOY_KV_SETTINGS": json.dumps(dict(offload.settings), sort_keys=True)}

    def offload_in(self, flags: Flags) -> dict[str, Any] | None:
        return None

    def connector_of(self, argv: list[str]) -> str | None:
        for flag, value in zip(argv, argv[1:], strict=False):
            if flag == "--kv-plugin":
                return value.split("@")[0]
        return None

    def argv(
        self, head: list[str], model: str, model_flag: str | None, served_model_name: str, port: int,
        flags: list[str],
    ) -> list[str]:  # fmt: skip
        return [*head, "--weights", model, "--name", served_model_name, "--port", str(port), *flags]

    def computed_for(self, sizing: RecipeSizing) -> frozenset[str]:
        return self.computed_flags

    def version_of(self, versions: dict[str, str]) -> str | None:
        return versions.get("toyserve")

    def recipe_problems(self, flags: Flags, sizing: RecipeSizing) -> list[RecipeProblem]:
        return [RecipeProblem(("engine", "flags", "--page"), "--page is the block size")] if "--page" in flags else []

    def sized_flags(self, flags: Flags, sizing: RecipeSizing, conc: int, draft_path: str) -> tuple[Flags, list[str]]:
        return flags, ["--batch", str(2 * conc)]

    def rank_span_problem(self, rank_gpus: int, gpus_per_node: int) -> str | None:
        return "toyserve ranks never span nodes"

    def binds_numa(self, flags: list[str]) -> str | None:
        return None

    def node_flags(self, part: NodePart, nodes: int, ranks_per_node: int) -> list[str]:
        return []

    def node_env(self, part: NodePart) -> dict[str, str]:
        return {}

    def port_env(self, port: int) -> dict[str, str]:
        return {}

    def deployment_env(self, run_dir: Path) -> dict[str, str]:
        return {}

    def local_rendezvous_flags(self, argv: list[str], port: int) -> list[str]:
        return []

    def cache_reset_path(self) -> str | None:
        return None

    def cache_reset_hint(self) -> str:
        return ""


@pytest.fixture
def toy_engine() -> Iterator[ToyEngine]:
    engine = ToyEngine()
    engines.register(engine)
    yield engine
    del engines.REGISTRY[NAME]


KEY = "toy-fp4-b300-toyserve-agentic"
MASTER = {
    KEY: {
        "image": "toy/serve:1", "model": "toy/Toy-1", "model-prefix": "toy", "runner": "cluster:b300-nv",
        "precision": "fp4", "framework": NAME, "multinode": False,
        "scenarios": {"agentic-coding": [{"dram-utilization": 0.5, "search-space": [
            {"tp": 4, "kv-offloading": "dram", "kv-offload-backend": {"name": "lmcache"}, "conc-list": [8]},
        ]}]},
    },
    f"{KEY}-simple": {
        "image": "toy/serve:1", "model": "toy/Toy-1", "model-prefix": "toy", "runner": "cluster:b300-nv",
        "precision": "fp4", "framework": NAME, "multinode": False,
        "scenarios": {"agentic-coding": [{"dram-utilization": 0.5, "search-space": [
            {"tp": 4, "kv-offloading": "dram", "kv-offload-backend": {"name": "vllm-simple"}, "conc-list": [8]},
        ]}]},
    },
}  # fmt: skip
RECIPE: dict[str, Any] = {
    "recipe": "toy-serve",
    "match": {
        "model": "toy/Toy-1",
        "model-prefix": "toy",
        "precision": "fp4",
        "framework": NAME,
        "runner": "cluster:b300-nv",
        "image": "toy/serve:1",
    },  # fmt: skip
    "env-policy": {"PYTHONHASHSEED": "0", "TOY_HASH_SEED": "1"},
    "engine": {"launcher": ["toyserve"], "block-size": 64, "flags": {"--tools": True}},
    "arms": {
        "none": {},
        "lmcache": {"l1-fraction": 0.5, "chunk-size": 256, "transfer-mode": "engine_driven"},
        "vllm-simple": {},
    },
    "replay": {"kind": "production"},
}


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "toy.yaml").write_text(yaml.safe_dump(RECIPE, sort_keys=False))
    (tmp_path / "toy-master.yaml").write_text(yaml.safe_dump(MASTER, sort_keys=False))
    monkeypatch.setenv("SLURMX_JOBS_DIR", str(tmp_path / "jobs"))
    return ["--config", str(tmp_path / "toy-master.yaml"), "--clusters", str(ROOT / "configs" / "clusters.yaml")]


def test_a_registered_engine_plans_and_renders(
    toy_engine: ToyEngine, workspace: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", KEY, *workspace]) == 0
    assert "toy-serve" in capsys.readouterr().out  # the recipe that serves the engine's point
    assert main(["render", KEY, *workspace]) == 0
    rendered = capsys.readouterr().out
    # the engine's own argv and sizing; LMCache's connector module is the one for this engine
    assert (
        "toyserve --weights /models/toy/Toy-1 --name toy/Toy-1 --port 8888 --tools --tp 4 --batch 16 "
        "--kv-plugin LMCacheMPConnector@lmcache.integration.toyserve.lmcache_mp_connector\n" in rendered
    )
    assert """TOY_KV_SETTINGS='{"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": 20888}'""" in rendered
    assert "python3 -c 'import lmcache.integration.toyserve.lmcache_mp_connector'" in rendered  # provisioning
    assert "--kv-transfer-config" not in rendered


def test_a_backend_refuses_an_engine_it_cannot_serve(
    toy_engine: ToyEngine, workspace: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", f"{KEY}-simple", *workspace]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"engine {NAME} has none" in err, err


def test_its_point_round_trips_through_point_json(toy_engine: ToyEngine, workspace: list[str]) -> None:
    inputs = load_inputs([Path(workspace[1])], Path(workspace[3]), [KEY])
    (item,) = resolve_points(inputs.points, inputs)
    back = PointRecord.model_validate_json(item.record("s1").model_dump_json())
    assert isinstance(back.serving, ServingSpec) and back.serving.engine == NAME
    assert back.serving.health_path == "/alive"  # the engine's readiness path: the recipe names none
    assert back.serving.engine_flags == [*render_flags({"--tools": True}), "--tp", "4", "--batch", "16"]
    assert back == PointRecord.model_validate_json(back.model_dump_json())


def _as_toy(text: str) -> str:
    """The captured vLLM export under the toy engine's names and rank label."""
    return text.replace('"vllm:', '"toy:').replace('"engine":', '"replica":')


def test_its_artifacts_build_a_result(toy_engine: ToyEngine, tmp_path: Path) -> None:
    shutil.copy(DATA / "profile_export.jsonl", tmp_path / "profile_export.jsonl")
    shutil.copy(DATA / "profile_export_aiperf.json", tmp_path / "profile_export_aiperf.json")
    export = json.loads((DATA / "server_metrics_export.json").read_text())
    metrics = export["metrics"]
    renamed = {
        "toy:hits": metrics["vllm:prefix_cache_hits"], "toy:lookups": metrics["vllm:prefix_cache_queries"],
        "toy:prompt": metrics["vllm:prompt_tokens"], "toy:done": metrics["vllm:request_success"],
    }  # fmt: skip
    (tmp_path / "server_metrics_export.json").write_text(_as_toy(json.dumps({"metrics": renamed})))
    log = tmp_path / "engine.log"
    log.write_text("[r0] pool holds 1000 tokens\n[r1] pool holds 24 tokens\n[r0] pool holds 2000 tokens\n")
    row = {
        "image": "toy/serve:1", "model": "toy/Toy-1", "model-prefix": "toy", "precision": "fp4", "framework": NAME,
        "runner": "cluster:b300-nv", "tp": 4, "conc": 4, "exp-name": "toy_tp4_conc4", "point-id": "0123456789ab",
    }  # fmt: skip
    argv = ["toyserve", "--weights", "m", "--kv-plugin", "PoolConnector@pool.mod"]
    result = build_result(
        point_from_row(row), tmp_path, run=RunMeta(sweep_id="s1"), engine_logs=[log], arm=ArmInputs(engine_argv=argv)
    )
    hits = metrics["vllm:prefix_cache_hits"]["series"][0]["stats"]["total"]
    queries = metrics["vllm:prefix_cache_queries"]["series"][0]["stats"]["total"]
    server = result.server_metrics
    assert server.adapter == "toy" and server.cache.prefix_cache_hits == hits
    assert server.cache.gpu_cache_hit_rate == pytest.approx(hits / queries)
    assert result.kv_cache_pool_tokens == 2024  # last line per rank, summed over ranks
    assert result.slurmx is not None and result.slurmx.evidence is not None
    assert result.slurmx.evidence.engine_connector == "PoolConnector"  # read back by the engine's connector_of
    write_result(tmp_path / "result.json", result)
    assert Result.model_validate_json((tmp_path / "result.json").read_text()) == result
