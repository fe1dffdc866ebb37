"""Energy over a window, on samples captured on a real H200 (scripts/gpu/h200_proof.py): slurmx's
integral against NVML's own energy counter, and against InferenceX's aggregate_power.py (the shared fixtures' copy, run as an oracle)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from slurmx.results import energy
from tests.helpers.inferencex_power import aggregate_power

DATA = Path(__file__).resolve().parents[1] / "data"
H200 = DATA / "gpu" / "h200"
WINDOWS = json.loads((H200 / "proof_summary.json").read_text())["windows"]
RERUN = DATA / "gpu" / "h200-rerun"  # another H200 machine, the branch's final code


def inferencex() -> ModuleType:
    return aggregate_power()


def window_of(row: dict[str, Any]) -> energy.Window:
    return energy.Window(row["start_unix"], row["end_unix"], 100, 400_000, 50_000)


@pytest.mark.parametrize("row", WINDOWS, ids=[w["window"] for w in WINDOWS])
def test_energy_matches_nvml_counter_within_2_percent(row: dict[str, Any]) -> None:
    window = window_of(row)
    result = energy.integrate(energy.read_telemetry(H200 / "gpu_metrics.csv", window), window, 1)
    assert result.power_valid, result.reasons
    assert result.total_gpu_energy_j == pytest.approx(row["slurmx_energy_j"], rel=1e-9)
    assert result.total_gpu_energy_j == pytest.approx(row["nvml_counter_delta_j"], rel=0.02)
    # the counter column, interpolated at the window's ends, tells the same story
    assert result.counter_energy_j == pytest.approx(row["nvml_counter_delta_j"], rel=0.02)


@pytest.mark.parametrize("row", json.loads((RERUN / "proof_summary.json").read_text())["windows"], ids=str)
def test_second_h200_run_agrees_within_2_percent_too(row: dict[str, Any]) -> None:
    window = window_of(row)
    result = energy.integrate(energy.read_telemetry(RERUN / "gpu_metrics.csv", window), window, 1)
    assert result.power_valid and result.total_gpu_energy_j == pytest.approx(row["slurmx_energy_j"], rel=1e-9)
    assert result.total_gpu_energy_j == pytest.approx(row["nvml_counter_delta_j"], rel=0.02)
    assert row["inferencex_energy_j"] == pytest.approx(result.total_gpu_energy_j, rel=1e-12)


def test_load_window_draws_near_the_power_limit() -> None:
    steady = next(w for w in WINDOWS if w["window"] == "steady")
    window = window_of(steady)
    result = energy.integrate(energy.read_telemetry(H200 / "gpu_metrics.csv", window), window, 1)
    limit_w = json.loads((H200 / "telemetry.json").read_text())["devices"][0]["power_limit_w"]
    assert result.avg_power_w is not None and result.peak_power_w is not None
    assert 0.9 * limit_w < result.avg_power_w <= result.peak_power_w <= limit_w


@pytest.mark.parametrize("row", WINDOWS, ids=[w["window"] for w in WINDOWS])
def test_power_fields_equal_inferencex_aggregate_power(row: dict[str, Any], tmp_path: Path) -> None:
    ix = inferencex()
    window = window_of(row)
    csv_path = tmp_path / "gpu_metrics.csv"
    shutil.copy(H200 / "gpu_metrics.csv", csv_path)
    bench, agg = tmp_path / "bench.json", tmp_path / "agg.json"
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
    assert ix.run(csv_path, bench, agg, expected_num_gpus=1) == 0
    theirs = json.loads(agg.read_text())
    ours = energy.integrate(energy.read_telemetry(csv_path, window), window, 1)
    fields = energy.power_fields(ours, window)
    assert fields.keys() == theirs.keys()
    assert fields == theirs
    # and both equal what InferenceX wrote on the H200 itself
    recorded = json.loads((H200 / "inferencex" / f"agg_{row['window']}.json").read_text())
    assert fields == recorded


def test_inferencex_cross_check_accepts_our_energy_snapshots(tmp_path: Path) -> None:
    for name in ("gpu_metrics.csv", "gpu_metrics_energy_start.csv", "gpu_metrics_energy_end.csv"):
        shutil.copy(H200 / name, tmp_path / name)
    check = inferencex().cross_check_accumulator(tmp_path / "gpu_metrics.csv")
    assert check["available"] and check["within_tolerance"]
    assert check["relative_error"] < 0.001


def drop_rows(source: Path, target: Path, keep: Any) -> None:
    lines = source.read_text().splitlines(keepends=True)
    target.write_text(lines[0] + "".join(line for line in lines[1:] if keep(float(line.split(",")[0]))))


@pytest.mark.parametrize(
    "case",
    ["not_bracketed", "gap", "gpu_count", "bad_power", "empty", "missing"],
)
def test_invalid_streams_give_inferencex_reasons(case: str, tmp_path: Path) -> None:
    ix = inferencex()
    ramp = next(w for w in WINDOWS if w["window"] == "ramp")
    window = window_of(ramp)
    csv_path = tmp_path / "gpu_metrics.csv"
    expected_gpus = 1
    if case == "not_bracketed":
        drop_rows(H200 / "gpu_metrics.csv", csv_path, lambda t: t < window.end_unix - 1)
    elif case == "gap":
        drop_rows(
            H200 / "gpu_metrics.csv", csv_path, lambda t: not (window.start_unix + 5 < t < window.start_unix + 10)
        )
    elif case == "gpu_count":
        shutil.copy(H200 / "gpu_metrics.csv", csv_path)
        expected_gpus = 8
    elif case == "bad_power":
        text = (H200 / "gpu_metrics.csv").read_text().splitlines(keepends=True)
        fields = text[20].split(",")
        fields[2] = "-5"
        text[20] = ",".join(fields)
        csv_path.write_text("".join(text))
    elif case == "empty":
        csv_path.write_text("")
    theirs = ix.integrate_power(
        csv_path, start_unix=window.start_unix, end_unix=window.end_unix, expected_num_gpus=expected_gpus
    )
    ours = energy.integrate(energy.read_telemetry(csv_path, window), window, expected_gpus)
    assert not ours.power_valid
    assert ours.reasons == list(theirs.invalid_reasons)


def test_inferencex_nvidia_smi_stream_reads_the_same(tmp_path: Path) -> None:
    """InferenceX's own sampler (nvidia-smi -l 1, local-time stamps), captured beside ours on the H200."""
    ix = inferencex()
    stream = H200 / "inferencex" / "gpu_metrics_nvidia_smi.csv"
    times = [energy.parse_timestamp(line.split(",")[0]) for line in stream.read_text().splitlines()[1:]]
    known = [t for t in times if t is not None]
    window = energy.Window(known[3], known[-3], 1, 1, 1)
    ours = energy.integrate(energy.read_telemetry(stream, window), window, 1)
    theirs = ix.integrate_power(stream, start_unix=window.start_unix, end_unix=window.end_unix, expected_num_gpus=1)
    assert ours.power_valid and theirs.power_valid
    assert ours.total_gpu_energy_j == pytest.approx(theirs.total_gpu_energy_j, rel=1e-12)
    assert ours.counter_energy_j is None  # nvidia-smi's stream has no energy counter


def test_nvidia_smi_fallback_stream_integrates_without_a_counter() -> None:
    stream = H200 / "smi_fallback" / "gpu_metrics.csv"
    info = json.loads((H200 / "smi_fallback" / "telemetry.json").read_text())
    assert info["source"] == "nvidia-smi"
    samples = energy.read_telemetry(stream)
    times = [t for t, _ in samples.power["0"]]
    window = energy.Window(times[1], times[-2], 1, 1, 1)
    result = energy.integrate(energy.read_telemetry(stream, window), window, 1)
    assert result.power_valid and result.counter_energy_j is None
    assert 50 < (result.avg_power_w or 0) < 120  # the idle H200 drew about 78 W
