"""The commands as users run them: the whole `slurmx` process from a fresh working directory, on InferenceX's
own configs and checkouts, with and without the project's recipes visible.

`plan` is expansion only: a recipe that nearly matches a key, or a recipe file that does not load, never fails
it (information at most). Recipe matching belongs to `render` and `submit`, and their errors to the key.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slurmx import engines
from tests.conftest import ROOT

TREES = ("repo-main", "repo-kimik3-b300-lmcache", "repo-lmcache-agentix")
NEAR_MATCH_KEY = (
    "kimik3-fp4-b300-vllm-agentic-dspark"  # the seed recipe kimik3_fp4_b300_vllm.yaml differs in image, dcp
)
SERVED_KEY = "kimik3-fp4-h200-vllm-agentic"  # has its recipe (jobs/kimik3_fp4_h200_vllm.yaml) and profile
IMPORTED_KEY = "minimaxm3-fp4-b200-vllm-agentic-mtp"  # single-node, served by jobs/minimaxm3_fp4_b200_vllm_mtp.yaml
SLURMX_FIELDS = ("point-id", "config-key", "slurm-request", "recipe", "recipe-note")


def slurmx(
    args: list[str], cwd: Path, jobs: Path | None = None, pythonpath: tuple[Path, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`slurmx ARGS` as a new process in `cwd`; `jobs`: SLURMX_JOBS_DIR (else the checkout's jobs/ is found)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SLURMX_JOBS_DIR", "SLURMX_RESULTS")}
    first = [*map(str, pythonpath), str(ROOT / "src")]
    env["PYTHONPATH"] = os.pathsep.join([*first, *filter(None, [env.get("PYTHONPATH")])])
    if jobs is not None:
        env["SLURMX_JOBS_DIR"] = str(jobs)
    return subprocess.run(
        [sys.executable, "-m", "slurmx", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def inferencex_rows(tree: Path) -> list[dict[str, Any]]:
    """InferenceX's own generator, unchanged, run on its own tree as its workflow runs it."""
    proc = subprocess.run(
        [
            sys.executable, "utils/matrix_logic/generate_sweep_configs.py", "full-sweep",
            "--config-files", "configs/nvidia-master.yaml", "configs/amd-master.yaml",
            "--runner-config", "configs/runners.yaml", "--no-evals",
        ],
        cwd=tree, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    rows: list[dict[str, Any]] = json.loads(proc.stdout)
    return rows


def inferencex_fields(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k not in SLURMX_FIELDS} for row in rows]


def planned(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert proc.returncode == 0, proc.stderr
    rows: list[dict[str, Any]] = json.loads(proc.stdout)
    return rows


@pytest.fixture
def bad_jobs(tmp_path: Path) -> Path:
    """The project's recipes plus one file that does not load: planning must not care."""
    jobs = tmp_path / "bad-jobs"
    jobs.mkdir()
    for recipe in (ROOT / "jobs").glob("*.yaml"):
        (jobs / recipe.name).write_text(recipe.read_text())
    (jobs / "broken.yaml").write_text("recipe: broken\nmatch: {model-prefix: dsv4\n")
    return jobs


def test_plan_all_over_the_fixture_masters_equals_inferencex_whatever_the_recipes(
    fixtures: Path, tmp_path: Path, bad_jobs: Path
) -> None:
    masters = ["--config", str(fixtures / "nvidia-master.yaml"), "--config", str(fixtures / "amd-master.yaml")]
    args = ["plan", "--all", *masters, "--clusters", str(fixtures / "runners.yaml"), "--json"]
    expected = json.loads((fixtures / "expected" / "full-sweep-nvidia-amd.json").read_text())
    empty = tmp_path / "no-jobs"
    empty.mkdir()
    cwd = tmp_path / "wd"
    cwd.mkdir()
    served: dict[object, set[object]] = {}
    for jobs in (None, empty, bad_jobs):  # the checkout's jobs/ found from anywhere; none at all; a broken one
        rows = planned(slurmx(args, cwd, jobs))
        assert len(rows) == len(expected) == 1820
        assert inferencex_fields(rows) == expected, f"with jobs {jobs}"
        served[jobs] = {r["recipe"] for r in rows if r["config-key"] == IMPORTED_KEY}
        # a key slurmx has no engine for is said so whatever jobs/ holds (plan reads no recipe for it); one it has
        # an engine for is not
        agentic = [r for r in rows if r.get("scenario-type") == "agentic-coding" and "prefill" not in r]
        missing = {
            r["framework"]: r.get("recipe-note") or "" for r in agentic if r["framework"] not in engines.REGISTRY
        }
        assert all(f"no serving engine '{name}'" in note for name, note in missing.items()), missing
        served_by = {r["framework"] for r in agentic if "no serving engine" not in (r.get("recipe-note") or "")}
        assert served_by == set(engines.REGISTRY) & {r["framework"] for r in agentic}, served_by
    assert served[None] == {"minimaxm3-fp4-b200-vllm-mtp"}  # the checkout's recipe, from a fresh directory
    assert served[empty] == {None}
    assert list(cwd.iterdir()) == []  # planning writes nothing


@pytest.fixture
def near_jobs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A jobs/ holding the seed recipe the near-match key misses and the served key's own: the near-match key's
    imported recipe would serve it."""
    jobs = tmp_path_factory.mktemp("near") / "jobs"
    jobs.mkdir()
    for name in ("kimik3_fp4_b300_vllm.yaml", "kimik3_fp4_h200_vllm.yaml"):
        shutil.copy(ROOT / "jobs" / name, jobs)
    return jobs


def test_plan_names_the_near_match_as_information(fixtures: Path, tmp_path: Path, near_jobs: Path) -> None:
    jobs = near_jobs
    masters = ["--config", str(fixtures / "nvidia-master.yaml"), "--config", str(fixtures / "amd-master.yaml")]
    rows = planned(slurmx(["plan", NEAR_MATCH_KEY, *masters, "--json"], tmp_path, jobs))
    assert rows and all(r["recipe"] is None for r in rows)
    assert {r["recipe-note"] for r in rows} == {
        f"no serving recipe for {NEAR_MATCH_KEY}; nearest is {jobs / 'kimik3_fp4_b300_vllm.yaml'} "
        "(kimik3-fp4-b300-vllm), which differs in image 'vllm/vllm-openai:nightly-b22afe45ac797ae58e67a7a3ad79ee5714024420"
        "@sha256:144356af876edbb3a4bfee23e1444b196cc3fdadd0a0c1a7f11f721756972a21' "
        "(point: 'vllm/vllm-openai:nightly-dev-x86_64-cu13.0.1-5894fdf'), dcp-size 1 (point: 8)"
    }
    table = slurmx(["plan", NEAR_MATCH_KEY, *masters], tmp_path, jobs)
    assert table.returncode == 0 and table.stderr == ""
    assert f"recipe: no serving recipe for {NEAR_MATCH_KEY}; nearest is" in table.stdout


# The lmcache-agentix branch (PR #2153) predates main's multinode agentic rules, which slurmx follows: its
# generator packs up to 4 concurrencies into one allocation (main: 1), gives disaggregated points no DRAM budget
# and names them without the prefill worker's ep/dp-attn; there its 9 dynamo-vllm multinode agentic rows are
# main's 23. Every other row of that tree, the seed key's included, must be InferenceX's.
OLDER_MULTINODE_RULES = {"repo-lmcache-agentix": (9, 23)}


def _multinode_agentic(row: dict[str, Any]) -> bool:
    return "prefill" in row and row.get("scenario-type") == "agentic-coding"


@pytest.mark.parametrize("name", TREES)
def test_plan_all_over_an_inferencex_checkout_equals_its_own_generator(
    fixtures: Path, tmp_path: Path, bad_jobs: Path, name: str
) -> None:
    tree = fixtures / name
    configs = tree / "configs"
    args = [
        "plan",
        "--all",
        "--config",
        str(configs / "nvidia-master.yaml"),
        "--config",
        str(configs / "amd-master.yaml"),
    ]
    args += ["--clusters", str(configs / "runners.yaml"), "--json"]
    expected = inferencex_rows(tree)
    if name in OLDER_MULTINODE_RULES:
        theirs = [r for r in expected if _multinode_agentic(r)]
        assert len(theirs) == OLDER_MULTINODE_RULES[name][0] and {r["framework"] for r in theirs} == {"dynamo-vllm"}
        expected = [r for r in expected if not _multinode_agentic(r)]
    for jobs in (None, bad_jobs):
        rows = inferencex_fields(planned(slurmx(args, tmp_path, jobs)))
        if name in OLDER_MULTINODE_RULES:
            ours = [r for r in rows if _multinode_agentic(r)]
            assert len(ours) == OLDER_MULTINODE_RULES[name][1] and {r["framework"] for r in ours} == {"dynamo-vllm"}
            rows = [r for r in rows if not _multinode_agentic(r)]
        assert len(rows) == len(expected) > 1000
        assert rows == expected, f"{name} with jobs {jobs}"


def test_render_and_dry_run_refuse_the_near_match_key_alone(fixtures: Path, tmp_path: Path, near_jobs: Path) -> None:
    masters = ["--config", str(fixtures / "nvidia-master.yaml"), "--config", str(fixtures / "amd-master.yaml")]
    for command in (["render"], ["submit", "--dry-run"]):
        proc = slurmx([*command, NEAR_MATCH_KEY, SERVED_KEY, *masters], tmp_path, near_jobs)
        assert proc.returncode == 2, proc.stderr
        errors = proc.stderr.splitlines()
        assert len(errors) == 1, proc.stderr
        assert errors[0].startswith("slurmx: error: ") and NEAR_MATCH_KEY in errors[0]
        assert "nearest is" in errors[0] and "kimik3_fp4_b300_vllm.yaml" in errors[0]
        assert SERVED_KEY in proc.stdout and "#SBATCH" in proc.stdout  # the other key went on
        assert NEAR_MATCH_KEY not in proc.stdout
    assert list(tmp_path.iterdir()) == []  # neither render nor a dry run writes into the tree


def test_submit_dry_run_json_lists_the_keys_it_planned(fixtures: Path, tmp_path: Path, near_jobs: Path) -> None:
    masters = ["--config", str(fixtures / "nvidia-master.yaml"), "--config", str(fixtures / "amd-master.yaml")]
    proc = slurmx(["submit", "--dry-run", "--json", NEAR_MATCH_KEY, SERVED_KEY, *masters], tmp_path, near_jobs)
    assert proc.returncode == 2
    assert [r["config-key"] for r in json.loads(proc.stdout)] == [SERVED_KEY]


def test_a_broken_recipe_file_is_refused_by_render_not_by_plan(tmp_path: Path, bad_jobs: Path) -> None:
    key = "tiny-fp32-local-vllm-agentic-lmcache"
    local = ["--config", str(ROOT / "configs" / "local-master.yaml")]
    plan = slurmx(["plan", key, *local, "--json"], tmp_path, bad_jobs)
    rows = planned(plan)
    assert rows and all(r["recipe"] is None and str(r["recipe-note"]).startswith("recipes unreadable: ") for r in rows)
    render = slurmx(["render", key, *local], tmp_path, bad_jobs)
    assert render.returncode == 2 and render.stdout == ""
    assert render.stderr.count("\n") == 1 and "broken.yaml" in render.stderr


def test_collect_hints_are_printed_literally(tmp_path: Path) -> None:
    """rich's markup would swallow '[report]' in the hint; what users read is what the code says. The report
    extra's absence is simulated: a jinja2 that cannot be imported comes first on the path."""
    from tests.helpers.synthetic import make_result, write_sweep

    write_sweep(tmp_path / "results", "synthetic-key", "sweep-1", [make_result(point_id="p1")])
    blocked = tmp_path / "no-jinja2" / "jinja2"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('jinja2 is absent in this test')\n")
    proc = slurmx(
        ["collect", "--results", str(tmp_path / "results"), "--no-plots"], tmp_path, pythonpath=(blocked.parent,)
    )
    assert proc.returncode == 0, proc.stderr
    assert "report.html skipped: jinja2 or matplotlib is not installed (pip install 'slurmx[report]')" in proc.stderr
    with_report = slurmx(["collect", "--results", str(tmp_path / "results"), "--no-plots"], tmp_path)
    assert with_report.returncode == 0 and "report: " in with_report.stderr  # the same call with the extra


DIRECT_KEYS = {  # Dynamo rows of main whose srt-slurm recipe serves with the engine itself (tests/test_srt_direct.py)
    "kimik3-fp4-b200-dynamo-vllm-agentic": 6,
    "qwen3.5-fp4-gb200-dynamo-sglang-agentic-mtp": 16,
    "qwen3.5-fp4-gb300-dynamo-sglang-agentic-agg": 7,
}
MOONCAKE_ACROSS_NODES = {  # refused: one Mooncake store for a rank over several nodes, the row's recipe named
    "kimik3-fp4-b200-dynamo-vllm-agentic-dspark": "recipes/vllm/kimi-k3/agentic/agg-b200-tp8pp2-mooncake-c1-agentic.yaml",
    "kimik3-fp4-gb200-dynamo-vllm-agentic-dspark-mooncake-tp8pp2": (
        "recipes/vllm/kimi-k3/agentic/agg-gb200-tp8pp2-mooncake-c16-agentic.yaml"
    ),
}


@pytest.mark.parametrize("key", sorted(DIRECT_KEYS))
def test_a_directly_served_dynamo_key_dry_runs_from_a_fresh_directory(fixtures: Path, tmp_path: Path, key: str) -> None:
    """`slurmx submit --dry-run --inferencex repo-main KEY` as a new user runs it: every point would be submitted."""
    proc = slurmx(["submit", "--dry-run", "--inferencex", str(fixtures / "repo-main"), key], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("would submit") == DIRECT_KEYS[key], proc.stdout
    assert not (tmp_path / "results").exists()  # a dry run writes nothing


@pytest.mark.parametrize("key", sorted(MOONCAKE_ACROSS_NODES))
def test_a_mooncake_key_over_several_nodes_is_refused_in_one_line(fixtures: Path, tmp_path: Path, key: str) -> None:
    proc = slurmx(["submit", "--dry-run", "--inferencex", str(fixtures / "repo-main"), key], tmp_path)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert (
        line.startswith(f"slurmx: error: {key}: ")
        and f"{MOONCAKE_ACROSS_NODES[key]}: kv-offload-backend mooncake" in line
    )
