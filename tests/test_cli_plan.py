"""`slurmx plan` on the shipped configs: the seed keys' points, budgets and Slurm requests."""

from __future__ import annotations

import json

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
    assert rows[0]["kv-offload-backend"] == {"name": "lmcache", "version": "0.5.4rc4"}
    assert rows[0]["slurm-request"] == "b300 gpu:b300:8 -C b300 mem=0 excl 480m"


def test_dsv4_seed_key_has_ten_points_at_2399_gb(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _plan_json(capsys, "dsv4-fp4-b200-vllm-agentic-lmcache")
    assert len(rows) == 10
    assert {r["total-cpu-dram-gb"] for r in rows} == {2399}
    assert len({r["point-id"] for r in rows}) == 10


def test_plan_all_covers_every_shipped_key(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _plan_json(capsys, "--all")
    keys = {r["config-key"] for r in rows}
    assert {"kimik3-fp4-b300-vllm-agentic-dspark-lmcache", "dsv4-fp4-b200-vllm-agentic-lmcache"} <= keys


def test_plan_table_names_points_and_budget(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "dsv4-fp4-b200-vllm-agentic-lmcache"]) == 0
    out = capsys.readouterr().out
    assert "DEP8" in out and "2399" in out and "gpu:b200:8" in out


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
