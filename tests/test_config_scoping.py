"""InferenceX's open vocabularies plan and are refused only where slurmx would have to run them; a bad key,
label or file entry blocks only the keys it concerns. Each master here reproduces a config from InferenceX's
open PRs and branches (not available offline) in a few lines; the comment names the InferenceX rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmx import engines
from slurmx.cli import main

CLUSTERS = """\
labels:
  cluster:t: [t-node-0]
hardware:
  cluster:t:
    available-cpu-dram-mib: 2_964_436
    gpus-per-node: 8
    slurm: { partition: p, gres-type: b300 }
"""


def _key(name: str, *, backend: str = "lmcache", spec: str = "none", framework: str = "vllm", runner: str = "cluster:t",
         offload: str = "dram", extra: str = "") -> str:  # fmt: skip
    entry = f"{{ tp: 8, spec-decoding: {spec}, kv-offloading: {offload}, "
    entry += f"kv-offload-backend: {{ name: {backend} }}, " if offload == "dram" else ""
    entry += f"conc-list: [4, 8]{extra} }}"
    return f"""\
{name}:
  image: img
  model: m
  model-prefix: p
  runner: {runner}
  precision: fp4
  framework: {framework}
  multinode: false
  scenarios:
    agentic-coding:
    - dram-utilization: 0.63
      search-space:
      - {entry}
"""


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *argv: str, masters: dict[str, str],
         clusters: str = CLUSTERS) -> tuple[int, str, str]:  # fmt: skip
    args = list(argv)
    for name, text in masters.items():
        (tmp_path / name).write_text(text)
        args += ["--config", str(tmp_path / name)]
    (tmp_path / "clusters.yaml").write_text(clusters)
    args += ["--clusters", str(tmp_path / "clusters.yaml")]
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurmx: error: "), err
    assert "Traceback" not in err
    return lines[0]


# InferenceX's KVOffloadBackendMetadata.name is any non-empty string (umbp; vllm-native on lmcache/agentix).
@pytest.mark.parametrize("command", ["render", "submit"])
def test_open_backend_name_plans_and_is_refused_at_submit_and_render(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    masters = {"m.yaml": _key("k", backend="umbp")}
    code, out, err = _run(tmp_path, capsys, "plan", "k", "--json", masters=masters)
    assert code == 0, err
    rows = json.loads(out)
    assert [r["kv-offload-backend"] for r in rows] == [{"name": "umbp"}] * 2
    assert rows[0]["exp-name"] == "p_tp8_conc4_kvdram-umbp"
    extra = ["--dry-run", "--results", str(tmp_path / "results")] if command == "submit" else []
    code, out, err = _run(tmp_path, capsys, command, "k", *extra, masters=masters)
    assert code == 2
    line = _one_error_line(err)
    assert "k: no KV-offload backend 'umbp' in slurmx (have: " in line and "lmcache" in line


# InferenceX's spec_decoding Literal["mtp", "draft_model", "none"].
def test_draft_model_plans_and_render_names_the_missing_method(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    masters = {"m.yaml": _key("k", spec="draft_model")}
    code, out, err = _run(tmp_path, capsys, "plan", "k", "--json", masters=masters)
    assert code == 0, err
    assert [r["exp-name"] for r in json.loads(out)] == [
        f"p_tp8_conc{c}_kvdram-lmcache_spec-draft_model" for c in (4, 8)
    ]
    code, _, err = _run(tmp_path, capsys, "render", "k", masters=masters)
    assert code == 2
    assert "no spec-decoding method 'draft_model' for engine vllm in slurmx (have: mtp, none)" in _one_error_line(err)


# InferenceX's framework is any string.
def test_unknown_framework_plans_and_render_names_the_missing_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    masters = {"m.yaml": _key("k", framework="tilert")}  # InferenceX's TileRT key: no engine of slurmx
    assert _run(tmp_path, capsys, "plan", "k", masters=masters)[0] == 0
    code, _, err = _run(tmp_path, capsys, "render", "k", masters=masters)
    assert code == 2
    have = ", ".join(sorted(engines.REGISTRY))
    assert f"k: no serving engine 'tilert' in slurmx (have: {have})" in _one_error_line(err)


# PyYAML (so InferenceX's load_runner_file) keeps the last of two equal keys.
def test_duplicate_cluster_label_warns_with_both_lines_and_the_last_wins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clusters = CLUSTERS + "  cluster:t:\n    available-cpu-dram-mib: 1_000_000\n    gpus-per-node: 8\n"
    code, out, err = _run(tmp_path, capsys, "plan", "k", "--json", masters={"m.yaml": _key("k")}, clusters=clusters)
    assert code == 0
    assert err.strip().splitlines() == [
        f"slurmx: warning: {tmp_path / 'clusters.yaml'}:8: cluster:t: duplicate key (also at line 4); the last one wins"
    ]
    # 1_000_000 MiB x 0.63 x 8/8 GPUs, not the first entry's 2_861_022 MiB cap
    assert {r["total-cpu-dram-gb"] for r in json.loads(out)} == {int(1_000_000 * 2**20 * 0.63 / 1e9)}


def test_duplicate_key_in_a_master_warns_and_the_last_wins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = _key("k").replace("  model: m\n", "  model: m\n  model: n\n")
    code, out, err = _run(tmp_path, capsys, "plan", "k", "--json", masters={"m.yaml": text})
    assert code == 0
    assert "m.yaml:4: model: duplicate key (also at line 3); the last one wins" in err
    assert {r["model"] for r in json.loads(out)} == {"n"}


# InferenceX reads a runner's hardware figures only in agentic_dram_offload_gb, for kv-offloading dram.
def test_label_without_hardware_plans_a_key_that_does_not_offload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    masters = {"m.yaml": _key("k", runner="cluster:elsewhere", offload="none")}
    code, out, err = _run(tmp_path, capsys, "plan", "k", "--json", masters=masters)
    assert code == 0, err
    rows = json.loads(out)
    assert [r["total-cpu-dram-gb"] for r in rows] == [0, 0] and "slurm-request" not in rows[0]
    code, _, err = _run(tmp_path, capsys, "submit", "k", "--dry-run", masters=masters)
    assert code == 2
    assert "hardware.cluster:elsewhere: no entry for this label, cannot submit" in _one_error_line(err)


def test_label_without_hardware_is_refused_for_a_key_that_offloads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(tmp_path, capsys, "plan", "k", masters={"m.yaml": _key("k", runner="cluster:elsewhere")})
    assert code == 2
    line = _one_error_line(err)
    assert "m.yaml:1: k.runner: no hardware entry for cluster label 'cluster:elsewhere'" in line
    assert "needed for the kv-offloading dram budget" in line


BAD = _key("bad", extra=", tpp: 2")


@pytest.mark.parametrize("layout", ["same file", "other file"])
def test_a_bad_key_blocks_only_itself(tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str) -> None:
    if layout == "same file":
        masters = {"m.yaml": _key("good") + BAD}
    else:
        masters = {"a.yaml": BAD, "b.yaml": _key("good")}
    code, out, err = _run(tmp_path, capsys, "plan", "good", "--json", masters=masters)
    assert code == 0 and err == ""
    assert len(json.loads(out)) == 2
    code, out, err = _run(tmp_path, capsys, "plan", "bad", masters=masters)
    assert code == 2 and out == ""
    bad_file = "m.yaml" if layout == "same file" else "a.yaml"
    line_no = 26 if layout == "same file" else 13
    assert (
        f"{bad_file}:{line_no}: bad.scenarios.agentic-coding[0].search-space[0].tpp: unknown field"
        in _one_error_line(err)
    )


def test_plan_all_plans_the_good_keys_prints_one_line_per_bad_key_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    masters = {
        "a.yaml": _key("good1") + BAD,
        "b.yaml": _key("good2") + _key("nohw", runner="cluster:elsewhere"),
    }
    code, out, err = _run(tmp_path, capsys, "plan", "--all", "--json", masters=masters)
    assert code == 2
    assert [r["config-key"] for r in json.loads(out)] == ["good1", "good1", "good2", "good2"]
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("slurmx: error: ") for line in lines)
    assert "bad.scenarios.agentic-coding[0].search-space[0].tpp" in lines[0]
    assert "nohw.runner: no hardware entry" in lines[1]


def test_a_key_defined_in_two_files_is_refused_and_others_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    masters = {"a.yaml": _key("k"), "b.yaml": _key("k") + _key("other")}
    assert _run(tmp_path, capsys, "plan", "other", masters=masters)[0] == 0
    code, _, err = _run(tmp_path, capsys, "plan", "k", masters=masters)
    assert code == 2
    assert "b.yaml:1: k: config key also defined at" in _one_error_line(err)


def test_a_bad_cluster_entry_blocks_only_the_keys_on_its_label(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clusters = CLUSTERS + "  cluster:broken:\n    available-cpu-dram-mib: 1\n    gpu-per-node: 8\n"
    masters = {"m.yaml": _key("good") + _key("on-broken", runner="cluster:broken", offload="none")}
    assert _run(tmp_path, capsys, "plan", "good", masters=masters, clusters=clusters)[0] == 0
    code, _, err = _run(tmp_path, capsys, "plan", "on-broken", masters=masters, clusters=clusters)
    assert code == 2
    assert "clusters.yaml:10: hardware.cluster:broken.gpu-per-node: unknown field" in _one_error_line(err)


# InferenceX's AgenticCodingConfig has no min length on search-space: the key plans to no point.
def test_empty_search_space_plans_no_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = _key("k").replace("      search-space:\n      - ", "      search-space: []\n      # ")
    code, out, err = _run(tmp_path, capsys, "plan", "k", "--json", masters={"m.yaml": text})
    assert (code, json.loads(out)) == (0, []), err
