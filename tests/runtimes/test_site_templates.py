"""A site's sbatch preambles: `sbatch_templates/<kind>.sh` in the checkout (or SLURMX_TEMPLATES_DIR) replaces
the packaged one in what `render` prints and names where it came from; without it the packaged one is back.
A cluster profile's `slurm.setup` lines come before the runtime's preamble, and a line break in one is a
located error."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml

from slurmx import paths
from slurmx.cli import main
from slurmx.config.load import load_clusters
from slurmx.errors import ConfigError

KEY = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"  # the seed key: cluster:b300-nv, runtime kind pyxis, no runtime.env
LABEL = "cluster:b300-nv"
PACKAGED_LINE = "# sbatch template: slurmx/runtimes/templates/pyxis.sh (packaged)"
SITE_LINE = "module load site-cuda/12.8"


def _render(capsys: pytest.CaptureFixture[str], tmp_path: Path, *extra: str) -> str:
    code = main(["render", KEY, "--results", str(tmp_path / "results"), *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _preamble(out: str) -> str:
    """The first sbatch script's setup block."""
    return out.split("# setup\n", 1)[1].split("\n# command\n", 1)[0]


def _site_pyxis(directory: Path) -> Path:
    packaged = resources.files("slurmx.runtimes").joinpath("templates", "pyxis.sh").read_text(encoding="utf-8")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "pyxis.sh"
    path.write_text(
        packaged.replace("export PYTHONDONTWRITEBYTECODE=1\n", f"export PYTHONDONTWRITEBYTECODE=1\n{SITE_LINE}\n")
    )
    return path


def test_the_checkouts_sbatch_templates_replace_the_packaged_preamble_until_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SLURMX_TEMPLATES_DIR", raising=False)
    checkout = tmp_path / "checkout"
    site = _site_pyxis(checkout / "sbatch_templates")
    monkeypatch.chdir(checkout)  # a checkout's own sbatch_templates/ is found from its root, as jobs/ is
    assert paths.templates_dir() == checkout / "sbatch_templates"
    preamble = _preamble(_render(capsys, tmp_path))
    assert preamble.splitlines()[0] == f"# sbatch template: {site}"
    assert SITE_LINE in preamble.splitlines() and PACKAGED_LINE not in preamble
    assert "enroot import" in preamble  # the rest of the site's copy is the packaged preamble

    site.unlink()
    preamble = _preamble(_render(capsys, tmp_path))
    assert preamble.splitlines()[0] == PACKAGED_LINE
    assert SITE_LINE not in preamble and "enroot import" in preamble


def test_slurmx_templates_dir_overrides_per_runtime_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "site-templates"
    site = _site_pyxis(elsewhere)
    (elsewhere / "venv.sh").write_text("echo not this kind\n")  # another kind's file leaves pyxis alone
    monkeypatch.setenv("SLURMX_TEMPLATES_DIR", str(elsewhere))
    preamble = _preamble(_render(capsys, tmp_path))
    assert preamble.splitlines()[0] == f"# sbatch template: {site}" and SITE_LINE in preamble
    assert "not this kind" not in preamble
    site.unlink()
    assert _preamble(_render(capsys, tmp_path)).splitlines()[0] == PACKAGED_LINE


def _clusters_with_setup(tmp_path: Path, setup: list[str]) -> Path:
    data = yaml.safe_load(paths.default_clusters().read_text(encoding="utf-8"))
    data["hardware"][LABEL]["slurm"]["setup"] = setup
    path = tmp_path / "clusters.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_profiles_setup_lines_come_before_the_runtimes_preamble(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SLURMX_TEMPLATES_DIR", raising=False)
    setup = ["module load cuda/12.8", "export https_proxy=http://proxy.site:3128"]
    clusters = _clusters_with_setup(tmp_path, setup)
    lines = _preamble(_render(capsys, tmp_path, "--clusters", str(clusters))).splitlines()
    assert lines[:4] == ["# cluster profile setup (slurm.setup)", *setup, PACKAGED_LINE]


def test_a_setup_line_with_a_line_break_is_a_located_error(tmp_path: Path) -> None:
    clusters = _clusters_with_setup(tmp_path, ["module load a\nmodule load b"])
    loaded = load_clusters(clusters)
    error = loaded.errors[LABEL]
    assert isinstance(error, ConfigError)
    assert "slurm.setup" in str(error) and "line break" in str(error)
    assert f"{clusters}:" in str(error) and error.line is not None
