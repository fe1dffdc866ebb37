"""A point is served only by a recipe that matches every field deciding what runs; a near match is refused
at plan time, naming the nearest recipe and how it differs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from slurmx.cli import main
from slurmx.inputs import load_inputs
from slurmx.recipes.resolve import resolve

ROOT = Path(__file__).resolve().parents[2]
KEY = "dsv4-fp4-b200-vllm-agentic-lmcache"


def _variant(tmp_path: Path, **changes: object) -> list[str]:
    master = yaml.safe_load((ROOT / "configs/nvidia-master.yaml").read_text())
    key = dict(master[KEY])
    space = dict(key["scenarios"]["agentic-coding"][0]["search-space"][0])
    for name in ("spec-decoding", "dcp-size"):
        if name in changes:
            space[name] = changes.pop(name)
    key.update(changes)
    key["scenarios"] = {"agentic-coding": [{"dram-utilization": 0.8, "search-space": [space]}]}
    (tmp_path / "v-master.yaml").write_text(yaml.safe_dump({"variant": key}))
    return ["variant", "--config", str(tmp_path / "v-master.yaml")]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"spec-decoding": "mtp"}, "spec-decoding 'none' (point: 'mtp')"),
        ({"dcp-size": 2}, "dcp-size 1 (point: 2)"),
        ({"image": "inferactinc/public:other-tag"}, "image 'inferactinc/public:sprint-agentx-fast"),
    ],
)
def test_a_near_match_is_refused_by_render_and_submit_naming_the_nearest_recipe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, object], named: str
) -> None:
    for command in (["render"], ["submit", "--dry-run", "--results", str(tmp_path / "results")]):
        assert main([*command, *_variant(tmp_path, **change)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert "no serving recipe matches" in err and "dsv4_fp4_b200_vllm.yaml (dsv4-fp4-b200-vllm)" in err
        assert named in err
    # plan only expands: it names the nearest recipe as information and exits 0
    assert main(["plan", *_variant(tmp_path, **change)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "recipe: no serving recipe for variant; nearest is" in out and named in out


def test_the_exact_key_plans_with_its_recipe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *_variant(tmp_path)]) == 0
    assert "dsv4-fp4-b200-vllm" in capsys.readouterr().out


def test_each_point_records_the_digest_of_the_recipe_file_that_serves_it() -> None:
    inputs = load_inputs(None, None, [KEY, "tiny-fp32-local-vllm-agentic-lmcache"])
    specs = [resolve(p, inputs.recipes()) for p in inputs.points if not p.multinode]
    files = {s.recipe_file for s in specs}
    assert len(files) == 2, files  # two recipes: a digest shared between files would show
    for spec in specs:
        assert spec.recipe_sha256 == hashlib.sha256(Path(spec.recipe_file).read_bytes()).hexdigest()
