"""`slurmx advise` as a user runs it: the whole process from a fresh working directory, on the project's local
master config, against the measured figures of tests/data/advise/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.advise.test_prediction_error import DONE_WHEN, POINTS, measured
from tests.conftest import ROOT

KEY = "tiny-fp32-local-vllm-agentic-lmcache"
CONFIG = [
    "--config",
    str(ROOT / "configs" / "local-master.yaml"),
    "--clusters",
    str(ROOT / "configs" / "clusters.yaml"),
]


def slurmx(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SLURMX_JOBS_DIR", "SLURMX_RESULTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "slurmx", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_json_predicts_every_point_within_five_points_of_the_measurement(tmp_path: Path) -> None:
    proc = slurmx(["advise", KEY, *CONFIG, "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows: list[dict[str, Any]] = json.loads(proc.stdout)
    by_id = {row["point-id"]: row for row in rows}
    assert set(by_id) == {p["point-id"] for p in POINTS}  # the same point ids as the measured sweep
    for point in POINTS:
        row = by_id[point["point-id"]]
        assert (row["arm"], row["conc"]) == (point["arm"], point["conc"])
        assert row["kv-pool-tokens"] == point["repeats"][0]["kv_pool_tokens"]  # from the recipe, as the log said
        assert abs(row["gpu-hit-rate"] - measured(point, "local_hit_tokens")) <= DONE_WHEN
        assert row["trace-working-set-tokens"] == point["repeats"][0]["working_set_tokens"]
        assert row["working-set-tokens"] <= row["trace-working-set-tokens"]
        assert row["verdict"] == ("an offload arm would help" if point["arm"] == "none" else "helps")
        assert "5%" in row["rule"]
    assert not list(tmp_path.iterdir())  # advise writes nothing


def test_table_names_the_rule_the_checks_and_the_geometry_sources(tmp_path: Path) -> None:
    proc = slurmx(["advise", KEY, *CONFIG], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"{KEY}: 8 points" in proc.stdout
    assert "rule: an offload arm helps when its tier could serve >= 5% of the prompt tokens" in proc.stdout
    assert "ok: chunk-size 256 is a multiple of the engine's block size (128)" in proc.stdout
    assert "ok: DRAM budget 2 GB <= InferenceX's cap of 2,861,022 MiB (3,000 GB)" in proc.stdout
    # the local key: 59.6 % at conc 2, 35.5 % at conc 4 (docs/advise.md), and both arms' tiers serve >= 5 %
    assert "TP1: predicted GPU hit % by conc 2: 59.6, 4: 35.5;" in proc.stdout
    assert "offload arm helps at conc: 2, 4" in proc.stdout


def test_bad_input_is_one_line_and_exit_two(tmp_path: Path) -> None:
    unknown = slurmx(["advise", "no-such-key", *CONFIG], tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.count("slurmx: error:") == 1 and "no-such-key" in unknown.stderr
    bad_pool = slurmx(["advise", KEY, *CONFIG, "--kv-pool-tokens", "0"], tmp_path)
    assert bad_pool.returncode == 2
    assert bad_pool.stderr.strip() == "slurmx: error: --kv-pool-tokens: 0 is not a positive token count"
