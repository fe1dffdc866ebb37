"""Arm evidence and the arm checks of the validity gate, on real artifacts of the local key at conc 4
(tests/data/aiperf/tier-overflow: the trace's working set overflows the engine's KV pool)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from slurmx.backends import mooncake
from slurmx.node.trace import working_set_tokens
from slurmx.results import gate
from slurmx.results.aggregate import RunMeta, build_result
from slurmx.results.evidence import ArmInputs, engine_connector
from slurmx.results.schema import Result
from tests.helpers.points import point_from_row

DATA = Path(__file__).resolve().parents[1] / "data" / "aiperf" / "tier-overflow"
WORKING_SET = 4763  # node/trace.py working_set_tokens of the captured trace at conc 4
META = RunMeta(sweep_id="sd08b9166e1", node="node01")


def _row(arm: str) -> dict[str, Any]:
    row: dict[str, Any] = {
        "image": "local-venv", "model": "local/tiny-llama", "model-prefix": "tiny", "precision": "fp32",
        "framework": "vllm", "runner": "cluster:local", "tp": 1, "pp": 1, "dcp-size": 1, "pcp-size": 1, "ep": 1,
        "dp-attn": False, "spec-decoding": "none", "conc": 4, "kv-offloading": "none", "total-cpu-dram-gb": 0,
        "duration": 3600, "exp-name": f"tiny_tp1_conc4_{arm}", "scenario-type": "agentic-coding",
        "point-id": "bfb19f72c017", "config-key": "tiny-fp32-local-vllm-agentic-lmcache",
    }  # fmt: skip
    if arm != "none":
        row |= {
            "kv-offloading": "dram",
            "total-cpu-dram-gb": 2,
            "kv-offload-backend": {"name": arm, "version": "0.5.6"},
        }
    return row


def engine_argv(arm_dir: Path) -> list[str]:
    """The engine argv the job body started, from its command file (its last line is the JSON record)."""
    record = json.loads((arm_dir / "engine.txt").read_text().splitlines()[-1])
    return [str(arg) for arg in record["argv"]]


def build(
    arm: str, *, argv: list[str] | None = None, lmcache_log: Path | None = None, working_set: int = WORKING_SET
) -> Result:
    arm_dir = DATA / arm
    logs = {"engine": arm_dir / "engine.log"}
    if arm != "none":
        logs["lmcache"] = lmcache_log or arm_dir / "lmcache.log"
    inputs = ArmInputs(
        engine_argv=argv if argv is not None else engine_argv(arm_dir), logs=logs, working_set_tokens=working_set
    )
    return build_result(point_from_row(_row(arm)), arm_dir, run=META, engine_logs=[arm_dir / "engine.log"], arm=inputs)


def test_working_set_of_the_captured_trace_overflows_the_pool() -> None:
    rows = [json.loads(line) for line in (DATA / "lmcache" / "trace.jsonl").read_text().splitlines()]
    assert working_set_tokens(rows, 4, shared_prefix_tokens=512, output_tokens=32) == WORKING_SET > 2176


def test_lmcache_arm_received_tokens_from_its_tier_consistent_with_lmcache_counters() -> None:
    result = build("lmcache")
    assert result.slurmx is not None and (ev := result.slurmx.evidence) is not None
    assert ev.engine_connector == ev.expected_connector == "LMCacheMPConnector"
    assert ev.kv_pool_tokens == 2176 and ev.exceeded_pool
    assert ev.tier_tokens is not None and ev.tier_tokens > 0
    # the engine cannot receive more than LMCache found for it, and LMCache did read chunks back
    assert ev.tier_side_hit_tokens is not None and 0 < ev.tier_tokens <= ev.tier_side_hit_tokens
    assert ev.tier["chunks_read"] > 0 and ev.tier["chunks_stored"] > 0
    assert ev.tier_hit_rate == pytest.approx(ev.tier_tokens / ev.prompt_tokens)
    assert gate.check(result) is None and gate.labels(result) == []


def test_none_arm_recomputes_what_the_tier_served() -> None:
    none, lmc = build("none"), build("lmcache")
    assert none.slurmx is not None and lmc.slurmx is not None
    n, m = none.slurmx.evidence, lmc.slurmx.evidence
    assert n is not None and m is not None and m.tier_tokens and m.computed_tokens is not None
    assert n.engine_connector is None and n.tier_tokens == 0
    # the same trace: the none arm computes the prefixes it evicted, the LMCache arm got them back
    assert n.computed_tokens is not None and n.computed_tokens > m.computed_tokens
    assert gate.check(none) is None


def test_mooncake_without_its_masters_counters_declares_them_absent_with_a_reason_not_zero() -> None:
    # an export without the master's metrics: the engine's real artifacts of the LMCache run stand in for its side
    arm_dir = DATA / "lmcache"
    inputs = ArmInputs(logs={"engine": arm_dir / "engine.log"}, working_set_tokens=WORKING_SET)
    point = point_from_row(_row("mooncake"))
    result = build_result(point, arm_dir, run=META, engine_logs=[arm_dir / "engine.log"], arm=inputs)
    assert result.slurmx is not None and (ev := result.slurmx.evidence) is not None
    assert ev.tier == {} and ev.tier_side_hit_tokens is None and ev.tier_side_hit_rate is None
    assert ev.tier_absent_reason is not None and mooncake.HIT_BLOCKS in ev.tier_absent_reason
    assert ev.tier_tokens is not None and ev.tier_tokens > 0  # the engine's side still counts
    lmc = build("lmcache").slurmx
    assert lmc is not None and lmc.evidence is not None and lmc.evidence.tier_absent_reason is None
    none = build("none").slurmx
    assert none is not None and none.evidence is not None and none.evidence.tier_absent_reason is None


def test_lmcache_arm_without_its_connector_is_an_arm_mismatch() -> None:
    argv = engine_argv(DATA / "lmcache")
    at = argv.index("--kv-transfer-config")
    stripped = argv[:at] + argv[at + 2 :]
    assert engine_connector(stripped) is None
    reason = gate.check(build("lmcache", argv=stripped))
    assert reason is not None and reason.startswith("arm mismatch") and "LMCacheMPConnector" in reason


def test_none_arm_carrying_a_connector_is_an_arm_mismatch() -> None:
    reason = gate.check(build("none", argv=engine_argv(DATA / "lmcache")))
    assert reason is not None and reason.startswith("arm mismatch") and "none" in reason


def test_no_tier_tokens_over_an_overflowing_working_set_is_not_engaged() -> None:
    result = build("none")  # figures of a run where the engine received nothing from any tier ...
    assert result.slurmx is not None and result.slurmx.evidence is not None
    claimed = result.slurmx.evidence.model_copy(update={"arm": "lmcache", "expected_connector": "LMCacheMPConnector",
                                                        "engine_connector": "LMCacheMPConnector"})  # fmt: skip
    reason = gate.check_arm(claimed)  # ... claimed by the LMCache arm
    assert reason is not None and reason.startswith(gate.NOT_ENGAGED) and "4763" in reason and "2176" in reason
    fits = claimed.model_copy(update={"working_set_tokens": 1000})
    assert gate.check_arm(fits) is None


def test_working_set_that_fits_is_labelled_not_exercised() -> None:
    result = build("none")
    assert result.slurmx is not None and result.slurmx.evidence is not None
    result.slurmx.evidence = result.slurmx.evidence.model_copy(
        update={"arm": "lmcache", "expected_connector": None, "engine_argv_seen": False, "working_set_tokens": 1000}
    )
    assert gate.check(result) is None and gate.labels(result) == [gate.NOT_EXERCISED]


def test_fallback_line_planted_in_the_lmcache_log_invalidates_the_point(tmp_path: Path) -> None:
    log = tmp_path / "lmcache.log"
    shutil.copy(DATA / "lmcache" / "lmcache.log", log)
    assert gate.check(build("lmcache", lmcache_log=log)) is None
    with log.open("a") as handle:
        handle.write(
            "[2026-11-30 22:13:01] LMCache WARNING: lmcache.cuda_ops compiled extension not found; "
            "CudaDeviceOps stays on the torch baseline for all ops. (device_ops.py:128:lmcache.v1)\n"
        )
    reason = gate.check(build("lmcache", lmcache_log=log))
    lines = len(log.read_text().splitlines())
    assert reason == f"backend log: LMCache fell back to torch ops (no compiled extension) (lmcache.log:{lines})"


def test_unknown_fields_load_round_trip_and_known_types_still_checked() -> None:
    data = build("lmcache").dump()
    data["power"] = {"avg_w": 812.5, "joules_per_token": 0.41}  # InferenceX's newer aggregates
    data["server_metrics"]["cache"]["future_rate"] = 0.5
    again = Result.model_validate_json(json.dumps(data))
    assert again.dump()["power"] == {"avg_w": 812.5, "joules_per_token": 0.41}
    assert again.dump()["server_metrics"]["cache"]["future_rate"] == 0.5
    assert again.inferencex()["power"]["avg_w"] == 812.5
    data["conc"] = "four"
    with pytest.raises(ValueError, match="conc"):
        Result.model_validate_json(json.dumps(data))
