"""ATOM's engine module and the in-process LMCache arm it plugs in: the argv InferenceX's ATOM scripts start, its
parallel flags, the pool each rank gets from the point's budget (flags and env, read back on import), and what an
in-process arm does not start."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmx import backends, engines
from slurmx.backends.base import ArmCapture, ArmProblem
from slurmx.backends.lmcache import LMCacheArm
from slurmx.engines import KvOffload
from slurmx.errors import UserError
from slurmx.process import ServerPorts
from slurmx.results.server_metrics import kv_pool_tokens
from slurmx.upstream.derive import parse_flags
from tests.helpers.points import point_from_row

ATOM = engines.get("atom")
LMCACHE = backends.get("lmcache")
ROW = {"image": "rocm/atom-dev:x", "model": "org/m", "model-prefix": "m", "precision": "fp4", "framework": "atom",
       "runner": "cluster:mi355x-amds", "conc": 8, "tp": 8, "kv-offloading": "dram",
       "kv-offload-backend": {"name": "lmcache", "version": "0.4.5"}, "total-cpu-dram-gb": 257}  # fmt: skip


@pytest.mark.parametrize(
    ("row", "flags"),
    [
        ({}, ["--tensor-parallel-size", "8"]),
        ({"dp-attn": True}, ["--tensor-parallel-size", "8", "--enable-dp-attention"]),
        (
            {"dp-attn": True, "ep": 8},
            ["--tensor-parallel-size", "8", "--enable-dp-attention", "--enable-expert-parallel"],
        ),
    ],
)
def test_parallel_flags_are_the_glm_scripts(row: dict[str, object], flags: list[str]) -> None:
    assert ATOM.parallel_flags(point_from_row({**ROW, **row})) == flags
    assert {f for f in flags if f.startswith("--")} <= ATOM.computed_flags  # a recipe may not set them


def test_the_argv_is_the_openai_server_with_model_and_server_port() -> None:
    head = ["python", "-m", "atom.entrypoints.openai_server"]
    argv = ATOM.argv(head, "/models/m", ATOM.model_flag, "org/m", 8888, ["--tensor-parallel-size", "8"])
    assert argv == [*head, "--model", "/models/m", "--served-model-name", "org/m", "--host", "127.0.0.1",
                    "--server-port", "8888", "--tensor-parallel-size", "8"]  # fmt: skip
    # dsv4_fp4_mi355x_atom_mtp.sh starts the same server unbuffered
    assert {"python -m atom.entrypoints.openai_server", "python3 -u -m atom.entrypoints.openai_server"} <= set(
        ATOM.upstream_programs
    )


def _arm(**knobs: object) -> LMCacheArm:
    arm = LMCacheArm.model_validate({"in-process": True, "l1-fraction": 1.0, "chunk-size": 256, **knobs})
    assert isinstance(arm, LMCacheArm)
    return arm


@pytest.mark.parametrize(("servers", "tp", "per_rank_gb"), [("per-rank", 8, 257 // 8), ("one", 4, 257)])
def test_each_rank_holds_its_pool_sized_from_the_budget(servers: str, tp: int, per_rank_gb: int) -> None:
    """kimik3: TOTAL_CPU_DRAM_GB / TP a rank; glm5.2: TOTAL_CPU_DRAM_GB in every rank (TP pools of it pinned)."""
    spec = LMCACHE.spec(_arm(servers=servers), point_from_row({**ROW, "tp": tp}))
    ports = ServerPorts(engine=8888)
    assert LMCACHE.servers(spec, ports, None, {}) == []  # type: ignore[arg-type]  # no server, no runtime needed
    assert LMCACHE.ports_of(spec) == () and LMCACHE.server_names(spec) == () and LMCACHE.metrics_urls(spec, ports) == []
    assert LMCACHE.distribution_of(spec) is None  # the image's LMCache, as the scripts leave it
    assert spec.host_memory_bytes() == per_rank_gb * tp * 10**9
    offload = LMCACHE.offload(spec, ports, ATOM.name)
    assert offload is not None
    flags, env = ATOM.offload_args(offload)
    assert flags == ["--kv-transfer-config", '{"kv_connector":"lmcache_offload","kv_role":"offload"}']
    assert env == {
        "LMCACHE_LOCAL_CPU": "True",
        "LMCACHE_MAX_LOCAL_CPU_SIZE": str(per_rank_gb),
        "LMCACHE_CHUNK_SIZE": "256",
    }
    assert ATOM.connector_of(["--tensor-parallel-size", "8", *flags]) == "lmcache_offload"


def test_import_reads_the_pool_back_from_the_engines_env() -> None:
    """ATOM's flag reads back as the engine-neutral connector; the knobs from the env over budgets one GB apart."""
    assert ATOM.offload_in(parse_flags(["--kv-transfer-config", '{"kv_connector":"lmcache_offload","kv_role":"offload"}'])[1]) == {
        "kv_connector": "lmcache-in-process", "kv_role": "offload"
    }  # fmt: skip
    points = [point_from_row({**ROW, "total-cpu-dram-gb": b}) for b in range(249, 258)]
    for servers, size in (("per-rank", lambda b: b // 8), ("one", lambda b: b)):
        seen = [ArmCapture(engine_env={"LMCACHE_LOCAL_CPU": "True", "LMCACHE_MAX_LOCAL_CPU_SIZE": str(size(p.total_cpu_dram_gb)),
                                       "LMCACHE_CHUNK_SIZE": "256"}) for p in points]  # fmt: skip
        knobs = LMCACHE.knobs_from_connector([{"kv_connector": "lmcache-in-process"}] * len(points), points, seen)
        expected = {"in-process": True, "l1-fraction": 1.0, "chunk-size": 256}
        assert knobs == (expected | {"servers": "per-rank"} if servers == "per-rank" else expected)
    with pytest.raises(ValueError, match="LMCACHE_MAX_LOCAL_CPU_SIZE"):
        LMCACHE.knobs_from_connector([{"kv_connector": "lmcache-in-process"}], points[:1],
                                     [ArmCapture(engine_env={"LMCACHE_LOCAL_CPU": "True"})])  # fmt: skip


def test_an_in_process_arm_has_no_server_knobs_and_a_server_arm_needs_its_transfer_mode() -> None:
    problems = LMCACHE.check_arm(_arm(**{"transfer-mode": "lmcache_driven"}), {}, {}, 128)
    assert [p.field for p in problems] == [("in-process",)]
    problems = LMCACHE.check_arm(_arm(env={"LMCACHE_CHUNK_SIZE": "512"}), {}, {}, 128)
    assert [p.field for p in problems] == [("env", "LMCACHE_CHUNK_SIZE")]  # the backend builds it from chunk-size
    server = LMCacheArm.model_validate({"l1-fraction": 0.5, "chunk-size": 256})
    assert [p.field for p in LMCACHE.check_arm(server, {}, {}, 128)] == [("transfer-mode",)]
    with pytest.raises(ArmProblem, match="rounds to 0 GB"):
        LMCACHE.spec(_arm(**{"l1-fraction": 0.01}), point_from_row({**ROW, "total-cpu-dram-gb": 50}))


def test_atom_loads_no_other_connector() -> None:
    with pytest.raises(UserError, match="ATOM loads no LMCacheMPConnector"):
        ATOM.offload_args(KvOffload("LMCacheMPConnector", {}))


def test_readiness_metrics_and_no_tool_call_flag() -> None:
    assert (ATOM.health_path, ATOM.metrics_path, ATOM.metrics.required_prefix) == ("/health", "/metrics", "atom:")
    assert ATOM.tool_call_flags == ()  # ATOM reads the tool-call format off the chat template


def test_no_log_line_is_read_as_atoms_kv_pool(tmp_path: Path) -> None:
    """slurmx knows no ATOM line with its pool in tokens: none is taken for one (vLLM's and SGLang's included)."""
    log = tmp_path / "engine.log"
    log.write_text("GPU KV cache size: 1,000 tokens\n[DP0 TP0] KV Cache is allocated. #tokens: 1000\n")
    assert kv_pool_tokens([log], ATOM.kv_pool_log) is None
