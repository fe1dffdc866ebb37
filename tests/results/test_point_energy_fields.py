"""aggregate.point_energy: InferenceX's power fields of a point and the telemetry block behind them, from a real
telemetry directory (telemetry.json and gpu_metrics.csv as the node's sampler writes them), every figure worked by
hand: no telemetry at all, a node that says why it had none, a window aiperf did not give, and one GPU's samples
over a four-second window."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurmx.results import energy
from slurmx.results.aggregate import point_energy
from slurmx.results.schema import EnergyMeta

T0 = 1_796_000_000.0
PROFILE = {"start_time": T0 + 10, "end_time": T0 + 14}  # a window of 4 s
# 4 requests: 1000 input and 100 output tokens
RECORDS = [
    {"metrics": {"input_sequence_length": {"value": 250}, "output_sequence_length": {"value": 25}}} for _ in range(4)
]
# one GPU: 100 W up to 11 s, 300 W from 12 s; over [10, 14] 100 + (100 + 300) / 2 + 300 + 300 = 900 J. Its energy
# counter reads 100 J at 10 s and 1050 J at 14 s: 950 J, told apart from the integral on purpose.
SAMPLES = [
    (9, 100, 0),
    (10, 100, 100),
    (11, 100, 300),
    (12, 300, 500),
    (13, 300, 800),
    (14, 300, 1050),
    (15, 300, 1400),
]


def _telemetry(tmp_path: Path, info: dict[str, Any] | None, samples: bool = True) -> Path:
    if info is not None:
        (tmp_path / energy.INFO_JSON).write_text(json.dumps(info))
    if samples:
        # an hour before the window, a row that would be refused: rows far outside the window are not read
        rows = f"{T0 - 3600:.3f},0,N/A,0\n" + "".join(f"{T0 + t:.3f},0,{w:.3f},{j:.3f}\n" for t, w, j in SAMPLES)
        (tmp_path / energy.METRICS_CSV).write_text("timestamp,index,power.draw [W],energy.total [J]\n" + rows)
    return tmp_path


def test_no_telemetry_file_is_no_power_fields_and_says_where_it_looked(tmp_path: Path) -> None:
    fields, meta = point_energy(_telemetry(tmp_path, None), PROFILE, RECORDS, 1)
    assert fields == {}
    assert meta == EnergyMeta(source="none", absent_reason=f"no telemetry in {tmp_path}")


def test_a_node_without_gpus_says_why(tmp_path: Path) -> None:
    info = {"source": "none", "absent_reason": "no NVIDIA GPU on the node"}
    fields, meta = point_energy(_telemetry(tmp_path, info), PROFILE, RECORDS, 1)
    assert fields == {}
    assert meta == EnergyMeta(source="none", absent_reason="no NVIDIA GPU on the node")
    fields, meta = point_energy(_telemetry(tmp_path, {"source": None}), PROFILE, RECORDS, 1)
    assert (fields, meta) == ({}, EnergyMeta(source="none", absent_reason=f"no telemetry in {tmp_path}"))


def test_without_aiperfs_window_the_power_is_not_valid(tmp_path: Path) -> None:
    fields, meta = point_energy(_telemetry(tmp_path, {"source": "nvml"}), {"start_time": T0}, RECORDS, 1)
    assert fields == {"power_metric_schema_version": 2, "power_valid": 0}
    assert meta == EnergyMeta(source="nvml", reasons=["profile_window_missing"])


def test_one_gpus_window_worked_by_hand(tmp_path: Path) -> None:
    fields, meta = point_energy(_telemetry(tmp_path, {"source": "nvidia-smi"}), PROFILE, RECORDS, 1)
    assert fields == {
        "power_metric_schema_version": 2,
        "power_valid": 1,
        "avg_power_w": 225.0,  # 900 J / 4 s, one GPU
        "avg_total_gpu_power_w": 225.0,
        "total_gpu_energy_j": 900.0,
        "joules_per_successful_query": 225.0,  # 900 / 4
        "joules_per_input_token": 0.9,  # 900 / 1000
        "joules_per_output_token": 9.0,  # 900 / 100
        "joules_per_total_token": pytest.approx(0.818182, abs=1e-12),  # 900 / 1100, to 6 decimals
    }
    assert meta.source == "nvidia-smi" and meta.power_valid is True and meta.reasons == []
    assert meta.absent_reason is None
    assert meta.integration_method == "per_device_trapezoidal_with_linear_boundary_interpolation"
    assert (meta.window_start_unix, meta.window_end_unix) == (T0 + 10, T0 + 14)
    assert meta.gpu_ids == ["0"]
    assert meta.per_gpu_energy_j == {"0": pytest.approx(900.0)}
    assert meta.per_gpu_max_sample_gap_s == {"0": pytest.approx(1.0)}
    assert meta.peak_power_w == pytest.approx(300.0)
    assert meta.counter_energy_j == pytest.approx(950.0)
    # tokens per second per kW: 100 output tokens / 4 s / 0.225 kW, 1100 tokens / 4 s / 0.225 kW
    assert meta.output_tokens_per_s_per_kw == pytest.approx(100 / 4 / 0.225)
    assert meta.total_tokens_per_s_per_kw == pytest.approx(1100 / 4 / 0.225)


def test_a_point_on_two_gpus_sampled_on_one_is_not_valid(tmp_path: Path) -> None:
    fields, meta = point_energy(_telemetry(tmp_path, {"source": "nvml"}), PROFILE, RECORDS, 2)
    assert fields == {"power_metric_schema_version": 2, "power_valid": 0}
    assert meta.reasons == ["expected_gpu_count_mismatch"] and meta.power_valid is False
    assert meta.output_tokens_per_s_per_kw is None and meta.total_tokens_per_s_per_kw is None
