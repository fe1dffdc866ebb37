"""Energy of a point on more than one GPU: each GPU's samples are integrated over the window on their own (each
interpolated at the window's two ends) and the GPUs' energies summed; figures worked by hand, and the same samples
through InferenceX's aggregate_power.py (the fixtures' copy) as a second method."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmx.results import energy
from tests.helpers.inferencex_power import aggregate_power

T0 = 1_796_000_000.0  # an epoch second; the samples below are offsets from it
# window [10 s, 14 s]: 10 queries, 1000 input and 100 output tokens
WINDOW = energy.Window(T0 + 10, T0 + 14, completed=10, total_input_tokens=1000, total_output_tokens=100)
HEADER = "timestamp,index,power.draw [W],energy.total [J]\n"

# GPU 0: samples on whole seconds, 100 W up to 11 s, 300 W from 12 s (linear in between); its counter is the running
# trapezoid from 9 s. Over [10, 14]: 100 + (100+300)/2 + 300 + 300 = 900 J.
GPU0 = [(9, 100, 0), (10, 100, 100), (11, 100, 200), (12, 300, 400), (13, 300, 700), (14, 300, 1000), (15, 300, 1300)]
# GPU 1: samples on half seconds, a ramp of 20 W/s from 200 W at 9.5 s: P(t) = 200 + 20 (t - 9.5). A trapezoid is
# exact on a line, so over [10, 14] it is 4 s x P(12) = 4 x 250 = 1000 J; the ends interpolate to 210 W and 290 W.
# Its counter is the ramp's integral E(t) = 200 (t - 9.5) + 10 (t - 9.5)^2, interpolated at the ends:
# (0 + 210) / 2 = 105 at 10 s, (960 + 1250) / 2 = 1105 at 14 s: 1000 J.
GPU1 = [(9.5 + i, 200 + 20 * i, 200 * i + 10 * i * i) for i in range(6)]


def write_csv(path: Path, gpus: dict[str, list[tuple[float, float, float]]]) -> Path:
    rows = sorted((T0 + t, gpu, watts, joules) for gpu, samples in gpus.items() for t, watts, joules in samples)
    path.write_text(HEADER + "".join(f"{t:.3f},{gpu},{w:.3f},{j:.3f}\n" for t, gpu, w, j in rows))
    return path


def test_two_gpus_are_integrated_each_over_the_window_and_summed(tmp_path: Path) -> None:
    csv_path = write_csv(tmp_path / "gpu_metrics.csv", {"0": GPU0, "1": GPU1})
    result = energy.integrate(energy.read_telemetry(csv_path, WINDOW), WINDOW, expected_num_gpus=2)
    assert result.power_valid and result.reasons == []
    assert result.observed_gpu_ids == ["0", "1"]
    assert result.per_gpu_energy_j == {"0": pytest.approx(900.0), "1": pytest.approx(1000.0)}
    assert result.total_gpu_energy_j == pytest.approx(1900.0)
    assert result.avg_total_gpu_power_w == pytest.approx(475.0)  # 1900 J / 4 s
    assert result.avg_power_w == pytest.approx(237.5)  # per GPU: 475 W / 2
    assert result.peak_power_w == pytest.approx(300.0)  # GPU 0 from 12 s; GPU 1's last in-window sample is 280 W
    assert result.counter_energy_j == pytest.approx(1900.0)  # 900 + 1000 from the counters
    assert result.per_gpu_max_sample_gap_s == {"0": pytest.approx(1.0), "1": pytest.approx(1.0)}
    metrics = result.metrics(WINDOW)
    assert metrics["joules_per_successful_query"] == pytest.approx(190.0)  # 1900 / 10
    assert metrics["joules_per_input_token"] == pytest.approx(1.9)  # 1900 / 1000
    assert metrics["joules_per_output_token"] == pytest.approx(19.0)  # 1900 / 100
    assert metrics["joules_per_total_token"] == pytest.approx(1900 / 1100)
    per_kw = result.tokens_per_s_per_kw(WINDOW)
    assert per_kw == {"output": pytest.approx(100 / 4 / 0.475), "total": pytest.approx(1100 / 4 / 0.475)}


def test_a_point_on_more_gpus_than_sampled_is_not_valid(tmp_path: Path) -> None:
    csv_path = write_csv(tmp_path / "gpu_metrics.csv", {"0": GPU0, "1": GPU1})
    result = energy.integrate(energy.read_telemetry(csv_path, WINDOW), WINDOW, expected_num_gpus=4)
    assert not result.power_valid and result.reasons == ["expected_gpu_count_mismatch"]
    assert result.metrics(WINDOW) == {}


def test_one_gpu_that_does_not_bracket_the_window_invalidates_the_sum(tmp_path: Path) -> None:
    late = [s for s in GPU1 if s[0] > 10]  # GPU 1's first sample after the window starts
    csv_path = write_csv(tmp_path / "gpu_metrics.csv", {"0": GPU0, "1": late})
    result = energy.integrate(energy.read_telemetry(csv_path, WINDOW), WINDOW, expected_num_gpus=2)
    assert not result.power_valid and result.reasons == ["benchmark_window_not_bracketed"]
    assert result.per_gpu_energy_j == {"0": pytest.approx(900.0)} and result.total_gpu_energy_j is None


def test_gpus_agree_with_inferencexs_aggregate_power(tmp_path: Path) -> None:
    ix = aggregate_power()
    # GPU ids sort as numbers (2 before 10) and a third GPU with its own sample times joins the sum
    # GPU 0's step a quarter second later at half the power: over [10, 14] that is GPU 0's shape over [9.75, 13.75],
    # (1.25 s x 100 + (100+300)/2 + 1.75 s x 300) / 2 = (125 + 200 + 525) / 2 = 425 J
    gpu10 = [(t + 0.25, watts / 2, joules / 2) for t, watts, joules in GPU0]
    csv_path = write_csv(tmp_path / "gpu_metrics.csv", {"2": GPU0, "10": gpu10, "1": GPU1})
    ours = energy.integrate(energy.read_telemetry(csv_path, WINDOW), WINDOW, expected_num_gpus=3)
    theirs = ix.integrate_power(csv_path, start_unix=WINDOW.start_unix, end_unix=WINDOW.end_unix, expected_num_gpus=3)
    assert ours.power_valid and theirs.power_valid
    assert ours.observed_gpu_ids == ["1", "2", "10"]
    assert ours.total_gpu_energy_j == pytest.approx(theirs.total_gpu_energy_j, rel=1e-12)
    assert ours.total_gpu_energy_j == pytest.approx(2325.0)  # 1000 + 900 + 425
