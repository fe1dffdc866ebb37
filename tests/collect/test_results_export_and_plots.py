"""InferenceX agg_*.json export and the per-sweep plots."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from slurmx.cli import main
from slurmx.collect import plots
from slurmx.results.schema import Result
from tests.helpers.synthetic import make_result, write_sweep

KEY = "dsv4-fp4-b200-vllm-agentic-lmcache"


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    results = [
        make_result(point_id=f"{arm}{conc}", config_key=KEY, conc=conc, arm=arm)
        for arm in ("none", "lmcache")
        for conc in (4, 8, 16, 32)
    ]
    results.append(make_result(point_id="dep8lmc16", config_key=KEY, conc=16, ep=8, dp_attn=True, arm="lmcache"))
    return write_sweep(tmp_path / "results", KEY, "s1", results)


def test_inferencex_export_round_trips_through_the_schema(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = sweep.parent.parent
    assert main(["collect", "--results", str(root), "--format", "inferencex", "--no-plots"]) == 0
    agg = json.loads((sweep / f"agg_{KEY}.json").read_text())
    assert isinstance(agg, list) and len(agg) == 9
    for obj in agg:
        assert "slurmx" not in obj
        assert obj["scenario_type"] == "agentic-coding"
        assert set(obj["request_metrics"]) >= {"qps", "latency", "tokens", "throughput", "cache"}
        assert set(obj["request_metrics"]["latency"]) >= {"ttft", "e2el", "itl", "tpot", "intvty", "e2e_norm_intvty"}
        back = Result.model_validate(obj)
        assert back.inferencex() == obj
    lmcache = [o for o in agg if o["kv_offload_backend"]]
    assert lmcache[0]["kv_offload_backend"] == {"name": "lmcache", "version": "0.5.6"}
    assert {o["kv_offloading"] for o in lmcache} == {"dram"}


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.skipif(not plots.available(), reason="matplotlib not installed")
def test_plots_are_written_as_real_pngs(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collect", "--results", str(sweep.parent.parent)]) == 0
    for name in (plots.PARETO_PNG, plots.TTFT_PNG):
        png = sweep / "plots" / name
        assert png.stat().st_size > 20_000, f"{png} looks empty"
        width, height = _png_size(png)
        assert width >= 800 and height >= 500


@pytest.mark.skipif(not plots.available(), reason="matplotlib not installed")
def test_plots_are_redrawn_only_when_results_change(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(sweep.parent.parent)
    assert main(["collect", "--results", root]) == 0
    png = sweep / "plots" / plots.PARETO_PNG
    first = png.stat().st_mtime_ns
    assert main(["collect", "--results", root]) == 0
    assert png.stat().st_mtime_ns == first
    changed = make_result(point_id="none4", config_key=KEY, conc=4, tput_per_gpu=123.0)
    (sweep / "points" / "none4" / "result.json").write_text(changed.model_dump_json())
    assert main(["collect", "--results", root]) == 0
    assert png.stat().st_mtime_ns != first


def test_without_matplotlib_collect_still_works_and_says_so(sweep: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['matplotlib'] = None\n"  # what an environment without the extra looks like
        "from slurmx.cli import main\n"
        f"sys.exit(main(['collect', '--results', {str(sweep.parent.parent)!r}]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "plots skipped: matplotlib is not installed" in proc.stderr
    assert (sweep / "summary.csv").exists() and not (sweep / "plots").exists()
    assert "lmcache" in proc.stdout
