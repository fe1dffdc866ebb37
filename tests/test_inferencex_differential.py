"""Differential test: on random master configs, `slurmx plan --all --json` and InferenceX's own generator
(`full-sweep --no-evals`, run from the fixture copy of main 843c6254f) agree: identical rows in identical
order when InferenceX accepts, a refusal (exit 2) when it refuses; one mutation per invalid config.

SLURMX_DIFF_EXAMPLES sets how many configs of each kind (fixed seeds): 100 valid + 100 mutated by default,
the fast suite's share; scripts/test (README's test command, CI) runs 250 + 250.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, seed, settings

from slurmx.cli import main
from tests.conftest import FIXTURES
from tests.helpers import inferencex_configs as gen

UPSTREAM = FIXTURES / "upstream-code"
EXAMPLES = int(os.environ.get("SLURMX_DIFF_EXAMPLES", "100"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
# slurmx's answer on rows: InferenceX's fields only
SLURMX_ONLY = ("point-id", "config-key", "slurm-request", "recipe", "recipe-note")


class Oracle:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).parent / "helpers" / "inferencex_oracle.py"), str(UPSTREAM)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, configs: list[Path], runners: Path) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"configs": [str(c) for c in configs], "runners": str(runners)}) + "\n")
        self.proc.stdin.flush()
        answer: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return answer


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    if not UPSTREAM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"InferenceX's generator is missing at {UPSTREAM}")
        pytest.skip(f"InferenceX's generator not found at {UPSTREAM}")
    running = Oracle()
    yield running
    assert running.proc.stdin
    running.proc.stdin.close()
    running.proc.wait(timeout=30)


def slurmx_plan_all(configs: list[Path], runners: Path) -> tuple[int, list[dict[str, Any]], str]:
    out, err = io.StringIO(), io.StringIO()
    argv = ["plan", "--all", "--json", "--clusters", str(runners)]
    for config in configs:
        argv += ["--config", str(config)]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    rows = json.loads(out.getvalue()) if out.getvalue() else []
    return code, [{k: v for k, v in row.items() if k not in SLURMX_ONLY} for row in rows], err.getvalue()


def _write(tmp: Path, master: dict[str, Any], runners: dict[str, Any]) -> tuple[list[Path], Path]:
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    (tmp / "master.yaml").write_text(yaml.dump(master, Dumper=dumper, sort_keys=False))
    (tmp / "runners.yaml").write_text(yaml.dump(runners, Dumper=dumper, sort_keys=False))
    return [tmp / "master.yaml"], tmp / "runners.yaml"


@pytest.fixture
def workdir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    # No serving recipes: plan must not depend on jobs/ for rows.
    empty = tmp_path_factory.mktemp("jobs")
    monkeypatch.setenv("SLURMX_JOBS_DIR", str(empty))
    return tmp_path_factory.mktemp("diff")


@seed(20261130)
@SETTINGS
@given(master=gen.master(), runners=gen.runners())
def test_valid_configs_plan_row_for_row_as_inferencex(
    oracle: Oracle, workdir: Path, master: dict[str, Any], runners: dict[str, Any]
) -> None:
    configs, runners_path = _write(workdir, master, runners)
    expected = oracle.ask(configs, runners_path)
    assert "rows" in expected, f"InferenceX refused a config meant to be valid: {expected}"
    code, rows, err = slurmx_plan_all(configs, runners_path)
    assert code == 0, err
    assert len(rows) == len(expected["rows"])
    for index, (mine, theirs) in enumerate(zip(rows, expected["rows"])):
        assert mine == theirs, f"row {index} differs"


@seed(20261201)
@SETTINGS
@given(case=gen.mutated_master(), runners=gen.runners())
def test_mutated_configs_are_refused_or_accepted_as_by_inferencex(
    oracle: Oracle, workdir: Path, case: tuple[str, dict[str, Any]], runners: dict[str, Any]
) -> None:
    mutation, master = case
    configs, runners_path = _write(workdir, master, runners)
    expected = oracle.ask(configs, runners_path)
    code, rows, err = slurmx_plan_all(configs, runners_path)
    if "refused" in expected:
        assert code == 2, f"{mutation}: InferenceX refused ({expected['refused']}), slurmx planned"
        assert err.strip() and all(line.startswith("slurmx: ") for line in err.strip().splitlines())
    else:
        assert code == 0, f"{mutation}: InferenceX accepted, slurmx refused: {err}"
        assert rows == expected["rows"]
