"""`slurmx plan` on the shipped configs: the seed keys' points, budgets and Slurm requests."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from slurmx.cli import main


def _plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    assert main(["plan", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_kimik3_seed_key_has_four_points_at_1889_gb(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _plan_json(capsys, "kimik3-fp4-b300-vllm-agentic-dspark-lmcache")
    assert [r["conc"] for r in rows] == [4, 8, 10, 16]
    assert {r["total-cpu-dram-gb"] for r in rows} == {1889}
    assert len({r["point-id"] for r in rows}) == 4
    assert [r["kv-offload-backend"] for r in rows] == [{"name": "lmcache", "version": "0.5.4rc4"}] * 4
    # launch_b300-nv.sh's salloc: partition batch_1, plain gpu:<n> GRES, no constraint
    assert [r["slurm-request"] for r in rows] == ["batch_1 gpu:8 mem=0 excl enforce-binding mem-bind=local 480m"] * 4


def test_dsv4_seed_key_has_ten_points_at_2399_gb(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _plan_json(capsys, "dsv4-fp4-b200-vllm-agentic-lmcache")
    assert len(rows) == 10
    assert {r["total-cpu-dram-gb"] for r in rows} == {2399}
    assert len({r["point-id"] for r in rows}) == 10


def test_plan_all_covers_every_shipped_key(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _plan_json(capsys, "--all")
    per_key = Counter(str(r["config-key"]) for r in rows)
    assert per_key == {
        "kimik3-fp4-b300-vllm-agentic-dspark-lmcache": 4,
        "dsv4-fp4-b200-vllm-agentic-lmcache": 10,
        "tiny-fp32-local-vllm-agentic-lmcache": 8,
        "tiny-fp32-local-vllm-agentic-multinode": 1,
        "kimik3-fp4-h200-vllm-agentic": 35,
        "dsv4-fp4-gb300-dynamo-vllm-agentic": 3,
    }


# The whole table of the dsv4 seed key, cell for cell (point ids are recorded values too).
DSV4_TABLE = [
    (point_id, parallelism, "none", "lmcache", conc, "2399", "dsv4-fp4-b200-vllm", "gpu-2 gpu:8 mem=0 excl enforce-binding mem-bind=local 480m")
    for point_id, parallelism, conc in [
        ("4fa3f71f3b51", "TP8", "8"), ("a640cd11ecbd", "TP8", "10"), ("cbc8b88decb9", "TP8", "16"),
        ("4632bc06314f", "DEP8", "16"), ("58d5e1c75015", "DEP8", "38"), ("3bbdc73d14e5", "DEP8", "44"),
        ("f35a39572e9a", "DEP8", "56"), ("aaaaa0f47f60", "DEP8", "64"), ("69015ceeac91", "DEP8", "66"),
        ("f68d1d5b0184", "DEP8", "68"),
    ]
]  # fmt: skip


def test_plan_table_names_points_and_budget(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "dsv4-fp4-b200-vllm-agentic-lmcache"]) == 0
    out = capsys.readouterr().out
    title = out.splitlines()[0].strip()
    assert title.startswith("dsv4-fp4-b200-vllm-agentic-lmcache: 10 points (") and "nvidia-master.yaml:" in title
    header = [line for line in out.splitlines() if line.startswith("┃")]
    assert [c.strip() for c in header[0].strip("┃").split("┃")] == [
        "point id", "parallelism", "spec", "backend", "conc", "DRAM GB", "recipe", "Slurm request"]  # fmt: skip
    cells = [tuple(c.strip() for c in line.strip("│").split("│")) for line in out.splitlines() if line.startswith("│")]
    assert cells == DSV4_TABLE


def test_plan_without_key_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan"]) == 2
    assert "name at least one config key" in capsys.readouterr().err


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for command in ("plan", "submit", "status", "cancel", "logs", "collect", "render"):
        assert f"    {command} " in out


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["plam"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'plam'" in capsys.readouterr().err
