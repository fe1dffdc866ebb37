"""Energy windows on hand-made telemetry streams (issue 26): each stream's verdict, reasons, gaps, sample counts and
energy equal InferenceX's integrate_power on the same file (the fixtures' aggregate_power.py, run as an oracle), and
the figures InferenceX does not compute (peak power, the energy counter, tokens per second per kW) are worked by
hand. Timestamps, the window reader (aiperf's start/end and records) and the edges of every rule are pinned too."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from slurmx.results import energy
from tests.helpers.inferencex_power import aggregate_power

T0 = 1_796_000_000.0  # an epoch second; samples are offsets from it
WINDOW = energy.Window(T0 + 10, T0 + 14, completed=4, total_input_tokens=400, total_output_tokens=40)
HEADER = "timestamp,index,power.draw [W],power.limit [W]\n"


def rows(gpu: str, samples: list[tuple[float, float | str]]) -> str:
    return "".join(f"{T0 + t:.3f},{gpu},{watts},700\n" for t, watts in samples)


def steady(gpu: str, watts: float, times: list[float]) -> str:
    return rows(gpu, [(t, watts) for t in times])


SECONDS = [9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
# name -> (CSV text, the GPUs the point claims)
STREAMS: dict[str, tuple[str, int]] = {
    "clean two gpus": (HEADER + steady("0", 100, SECONDS) + steady("1", 300, SECONDS), 2),
    # InferenceX's own case: a negative and conflicting samples far outside the window are not the window's
    "far outside ignored": (
        HEADER + rows("0", [(-100, -1.0), (100, 100.0), (100, 200.0)]) + steady("0", 500, SECONDS),
        1,
    ),
    "unparseable timestamp": (
        HEADER + steady("0", 500, SECONDS[:3]) + "soon,0,500,700\n" + steady("0", 500, SECONDS[3:]),
        1,
    ),
    "n/a power in window": (HEADER + steady("0", 500, SECONDS) + rows("0", [(12.5, "[N/A]")]), 1),
    "negative power in window": (HEADER + steady("0", 500, SECONDS) + rows("0", [(12.5, -5.0)]), 1),
    "text power in window": (HEADER + steady("0", 500, SECONDS) + rows("0", [(12.5, "idle")]), 1),
    "zero watts is a sample": (HEADER + steady("0", 0, SECONDS), 1),
    "missing gpu id": (HEADER + steady("0", 500, SECONDS) + rows("", [(12.5, 400.0)]), 1),
    "missing gpu id then bad power": (
        HEADER + rows("", [(9.5, 400.0)]) + rows("0", [(10.5, "[N/A]")]) + steady("0", 500, SECONDS),
        1,
    ),
    "no usable sample": (HEADER + rows("0", [(t, "[N/A]") for t in SECONDS]), 1),
    "header only": (HEADER, 1),
    "one sample and not bracketed": (
        HEADER + steady("0", 200, [12.0]) + steady("1", 200, [11.0, 12.0, 13.0]) + steady("2", 200, SECONDS),
        3,
    ),
    "gap of exactly 3 s": (HEADER + steady("0", 250, [7.0, 10.0, 13.0, 16.0]), 1),
    "gap over 3 s": (HEADER + steady("0", 250, [9.0, 12.5, 15.0]), 1),
    "samples on the window's ends": (HEADER + rows("0", [(10.0, 500.0), (12.0, 100.0), (14.0, 450.0)]), 1),
    "kept at the read margin": (HEADER + steady("0", 200, [7.0, 10.5, 13.5, 17.0]), 1),
    "duplicate timestamps averaged": (HEADER + steady("0", 100, SECONDS) + rows("0", [(12.0, 300.0)]), 1),
    "gpu count mismatch": (HEADER + steady("0", 100, SECONDS), 2),
    "two gpus for a one-gpu point": (HEADER + steady("0", 100, SECONDS) + steady("1", 100, SECONDS), 1),
    "a gpu of two samples is judged on its window": (
        HEADER + steady("0", 100, [9.5, 12.0, 14.5]) + steady("1", 100, [10.0, 13.0]),
        2,
    ),
    "ids sort as numbers then names": (
        HEADER + "".join(steady(gpu, 10.0 * (i + 1), SECONDS) for i, gpu in enumerate(["10", "mig-a", "2", "0"])),
        4,
    ),
}


@pytest.mark.parametrize("name", list(STREAMS))
def test_each_stream_is_judged_and_integrated_as_by_inferencex(name: str, tmp_path: Path) -> None:
    text, gpus = STREAMS[name]
    path = tmp_path / "gpu_metrics.csv"
    path.write_text(text, encoding="utf-8")
    _as_inferencex(path, gpus)


def _as_inferencex(path: Path, gpus: int | None, max_gap_s: float = energy.MAX_SAMPLE_GAP_S) -> energy.Energy:
    """slurmx's figures of the file, each InferenceX's integrate_power's on the same file."""
    theirs = aggregate_power().integrate_power(
        path, start_unix=WINDOW.start_unix, end_unix=WINDOW.end_unix, expected_num_gpus=gpus, max_sample_gap_s=max_gap_s
    )
    ours = energy.integrate(energy.read_telemetry(path, WINDOW, max_gap_s), WINDOW, gpus, max_gap_s)
    assert ours.reasons == list(theirs.invalid_reasons)
    assert ours.power_valid == theirs.power_valid
    assert ours.observed_gpu_ids == list(theirs.observed_gpu_ids)
    assert ours.per_gpu_sample_counts == theirs.per_gpu_sample_counts
    assert ours.per_gpu_max_sample_gap_s == pytest.approx(theirs.per_gpu_max_sample_gap_s, rel=1e-12)
    assert ours.per_gpu_energy_j == pytest.approx(theirs.per_gpu_energy_j, rel=1e-12)
    for field in ("total_gpu_energy_j", "avg_total_gpu_power_w", "avg_power_w"):
        expected = getattr(theirs, field)
        assert getattr(ours, field) == (None if expected is None else pytest.approx(expected, rel=1e-12)), field
    return ours


@pytest.mark.parametrize("gpus", [0, -1])
def test_a_point_of_no_gpus_is_said_first_and_the_file_still_judged(gpus: int, tmp_path: Path) -> None:
    path = tmp_path / "gpu_metrics.csv"
    path.write_text(HEADER + steady("0", 100, SECONDS) + rows("0", [(12.5, "[N/A]")]), encoding="utf-8")
    judged = _as_inferencex(path, gpus)
    assert judged.reasons == ["invalid_expected_gpu_count", "invalid_power_sample"]
    assert not judged.power_valid and judged.total_gpu_energy_j == pytest.approx(100.0 * 4)  # 100 W over 4 s
    assert _as_inferencex(tmp_path / "absent.csv", gpus).reasons == [
        "invalid_expected_gpu_count",
        "telemetry_file_missing",
    ]
    assert _as_inferencex(tmp_path / "absent.csv", None).reasons == ["telemetry_file_missing"]


@pytest.mark.parametrize("gap", [0.0, -3.0, math.nan, math.inf])
def test_a_max_gap_no_gap_can_pass_judges_nothing(gap: float, tmp_path: Path) -> None:
    path = tmp_path / "gpu_metrics.csv"
    path.write_text(HEADER + steady("0", 100, SECONDS), encoding="utf-8")
    for gpus in (1, 0):
        judged = _as_inferencex(path, gpus, gap)
        assert judged.reasons == ["invalid_max_sample_gap"] and not judged.power_valid
        assert judged.observed_gpu_ids == [] and judged.total_gpu_energy_j is None


def test_a_file_that_cannot_be_read_says_so(tmp_path: Path) -> None:
    """A directory where the file should be is a missing file; a row the CSV reader refuses (a field over its
    131072-character limit) leaves the file unread, after the reasons of the rows before it."""
    (tmp_path / "dir.csv").mkdir()
    assert _as_inferencex(tmp_path / "dir.csv", 1).reasons == ["telemetry_file_missing"]
    path = tmp_path / "gpu_metrics.csv"
    path.write_text(
        HEADER + "soon,0,500,700\n" + steady("0", 100, SECONDS) + f"{T0 + 12.5:.3f},0,{'9' * 200_000},700\n"
    )
    judged = _as_inferencex(path, 1)
    assert judged.reasons == ["invalid_timestamp_sample", "telemetry_file_unreadable"]
    assert judged.observed_gpu_ids == [] and judged.total_gpu_energy_j is None


def _read(tmp_path: Path, name: str, window: energy.Window = WINDOW) -> energy.Energy:
    text, gpus = STREAMS[name]
    path = tmp_path / "gpu_metrics.csv"
    path.write_text(text, encoding="utf-8")
    return energy.integrate(energy.read_telemetry(path, window), window, gpus)


def test_the_streams_figures_worked_by_hand(tmp_path: Path) -> None:
    """The oracle's figures above, for a few streams, from the samples themselves."""
    clean = _read(tmp_path, "clean two gpus")
    assert clean.per_gpu_energy_j == {"0": pytest.approx(400.0), "1": pytest.approx(1200.0)}  # 4 s x 100 W, x 300 W
    assert clean.avg_total_gpu_power_w == pytest.approx(400.0) and clean.avg_power_w == pytest.approx(200.0)
    assert clean.per_gpu_sample_counts == {"0": 7, "1": 7}
    assert _read(tmp_path, "far outside ignored").total_gpu_energy_j == pytest.approx(2000.0)  # 4 s x 500 W
    assert _read(tmp_path, "unparseable timestamp").reasons == ["invalid_timestamp_sample"]
    assert _read(tmp_path, "n/a power in window").reasons == ["invalid_power_sample"]
    assert _read(tmp_path, "negative power in window").reasons == ["invalid_power_sample"]
    assert _read(tmp_path, "text power in window").reasons == ["invalid_power_sample"]
    zero = _read(tmp_path, "zero watts is a sample")
    assert zero.power_valid and zero.total_gpu_energy_j == 0.0 and zero.peak_power_w == 0.0
    assert _read(tmp_path, "missing gpu id").reasons == ["gpu_identity_missing"]
    # a missing id is told after the rows are read, as InferenceX does
    assert _read(tmp_path, "missing gpu id then bad power").reasons == ["invalid_power_sample", "gpu_identity_missing"]
    assert _read(tmp_path, "no usable sample").reasons == ["invalid_power_sample", "no_usable_power_samples"]
    assert _read(tmp_path, "header only").reasons == ["no_usable_power_samples"]
    mixed = _read(tmp_path, "one sample and not bracketed")
    assert mixed.reasons == ["insufficient_power_samples", "benchmark_window_not_bracketed"]
    assert mixed.per_gpu_sample_counts == {"0": 1, "1": 3, "2": 7}
    assert mixed.per_gpu_energy_j == {"2": pytest.approx(800.0)}  # the GPU after the two bad ones is still integrated
    assert mixed.total_gpu_energy_j is None and mixed.avg_power_w is None
    exact = _read(tmp_path, "gap of exactly 3 s")  # InferenceX's limit: a gap over 3 s, not of 3 s
    assert exact.power_valid and exact.per_gpu_max_sample_gap_s == {"0": pytest.approx(3.0)}
    over = _read(tmp_path, "gap over 3 s")
    assert over.reasons == ["sampling_gap_exceeded"] and over.per_gpu_max_sample_gap_s == {"0": pytest.approx(3.5)}
    ends = _read(tmp_path, "samples on the window's ends")
    # (500+100)/2 x 2 + (100+450)/2 x 2 = 600 + 550; the peak is the sample on the start itself
    assert ends.power_valid and ends.total_gpu_energy_j == pytest.approx(1150.0) and ends.peak_power_w == 500.0
    # samples at start - 3 s and end + 3 s are read: the window is bracketed, by samples 3.5 s from the next
    margin = _read(tmp_path, "kept at the read margin")
    assert margin.reasons == ["sampling_gap_exceeded"] and margin.per_gpu_sample_counts == {"0": 4}
    # 100 W and 300 W at 12 s average to 200 W: 1 x 100 + 2 x (100+200)/2 + 1 x 100 = 500 J
    assert _read(tmp_path, "duplicate timestamps averaged").total_gpu_energy_j == pytest.approx(500.0)
    mismatch = _read(tmp_path, "gpu count mismatch")
    assert mismatch.reasons == ["expected_gpu_count_mismatch"] and mismatch.total_gpu_energy_j == pytest.approx(400.0)
    assert mismatch.metrics(WINDOW) == {} and mismatch.tokens_per_s_per_kw(WINDOW) is None
    assert _read(tmp_path, "ids sort as numbers then names").observed_gpu_ids == ["0", "2", "10", "mig-a"]


def test_the_gaps_span_from_the_last_sample_before_the_window_to_the_first_after(tmp_path: Path) -> None:
    """GPU 0's widest gap straddles the start, GPU 1's the end, GPU 2's lies just past a sample on the end."""
    text = (
        HEADER
        + steady("0", 100, [7.5, 10.5, 11.0, 12.0, 13.0, 14.5])  # 3.0 s from 7.5 to 10.5
        + steady("1", 100, [9.5, 10.5, 11.0, 12.0, 13.6, 16.5])  # 2.9 s from 13.6 to 16.5
        + steady("2", 100, [9.5, 11.0, 12.0, 13.0, 14.0, 16.9])  # 14.0 is on the end: 16.9 is past the window
    )
    path = tmp_path / "gpu_metrics.csv"
    path.write_text(text, encoding="utf-8")
    ours = energy.integrate(energy.read_telemetry(path, WINDOW), WINDOW, 3)
    assert ours.power_valid
    assert ours.per_gpu_max_sample_gap_s == {
        "0": pytest.approx(3.0),
        "1": pytest.approx(2.9),
        "2": pytest.approx(1.5),  # 9.5 to 11.0; the 2.9 s after the end sample is not the window's
    }


def test_peak_power_is_the_highest_sample_inside_the_window_on_any_gpu(tmp_path: Path) -> None:
    text = (
        HEADER
        + rows("0", [(9.0, 900.0), (10.0, 0.25), (12.0, 0.5), (14.0, 0.75), (15.0, 800.0)])
        + rows("1", [(9.0, 0.1), (11.0, 0.2), (13.0, 0.25), (15.0, 0.3)])
    )
    path = tmp_path / "gpu_metrics.csv"
    path.write_text(text, encoding="utf-8")
    ours = energy.integrate(energy.read_telemetry(path, WINDOW), WINDOW, 2)
    assert ours.power_valid
    assert ours.peak_power_w == 0.75  # on the end itself; the 900 W and 800 W samples lie outside the window


def test_the_energy_counter_is_read_only_when_every_gpu_has_one(tmp_path: Path) -> None:
    header = "timestamp,index,power.draw [W],energy.total [J]\n"
    # GPU 0 at 100 W with its counter running 100 J a second from 0 at 9 s; GPU 1 has no counter
    gpu0 = "".join(f"{T0 + t:.3f},0,100,{(t - 9) * 100:.1f}\n" for t in SECONDS)
    gpu1 = "".join(f"{T0 + t:.3f},1,100,\n" for t in SECONDS)
    path = tmp_path / "gpu_metrics.csv"
    path.write_text(header + gpu0 + gpu1, encoding="utf-8")
    both = energy.integrate(energy.read_telemetry(path, WINDOW), WINDOW, 2)
    assert both.power_valid and both.total_gpu_energy_j == pytest.approx(800.0)
    assert both.counter_energy_j is None  # half the deployment's counter is no deployment figure
    path.write_text(header + gpu0, encoding="utf-8")
    alone = energy.integrate(energy.read_telemetry(path, WINDOW), WINDOW, 1)
    # the counter's own figures: (14 - 9) x 100 = 500 J at the end, (10 - 9) x 100 = 100 J at the start
    assert alone.counter_energy_j == pytest.approx(500.0 - 100.0)


def test_an_invalid_window_is_refused_before_any_sample_is_read() -> None:
    telemetry = energy.Telemetry(power={"0": [(T0 + t, 100.0) for t in range(21)]})
    broken = [(T0 + 10, T0 + 10), (T0 + 10, T0 + 9), (T0 + 10, math.inf), (-math.inf, T0 + 10), (math.nan, T0 + 10)]
    for start, end in broken:
        result = energy.integrate(telemetry, energy.Window(start, end, 1, 1, 1), 1)
        assert result.power_valid is False and result.reasons == ["invalid_benchmark_window"], (start, end)
        assert result.observed_gpu_ids == [] and result.per_gpu_energy_j == {} and result.total_gpu_energy_j is None
        assert result.per_gpu_sample_counts == {} and result.per_gpu_max_sample_gap_s == {}
    half = energy.integrate(telemetry, energy.Window(T0 + 10, T0 + 10.5, 1, 1, 1), 1)
    assert half.power_valid and half.total_gpu_energy_j == pytest.approx(50.0)  # half a second at 100 W
    assert energy.integrate(energy.Telemetry(), WINDOW, 1).reasons == ["no_usable_power_samples"]


def test_a_row_shorter_than_the_header_reads_its_missing_cells_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "gpu_metrics.csv"
    header = "timestamp,power.draw [W],index\n"
    path.write_text(header + "".join(f"{T0 + t:.3f},100,0\n" for t in SECONDS) + f"{T0 + 12.5:.3f},100\n")
    assert energy.integrate(energy.read_telemetry(path, WINDOW), WINDOW, 1).reasons == ["gpu_identity_missing"]


def test_undecodable_bytes_are_replaced_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "gpu_metrics.csv"
    body = "".join(f"{T0 + t:.3f},0,100,NVIDIA H200 \xb5\n" for t in SECONDS)
    path.write_bytes(("timestamp,index,power.draw [W],name\n" + body).encode("latin-1"))
    result = energy.integrate(energy.read_telemetry(path, WINDOW), WINDOW, 1)
    assert result.power_valid and result.total_gpu_energy_j == pytest.approx(400.0)


@pytest.mark.parametrize(
    ("header", "reasons"),
    [
        ("index,power.draw [W]", ["timestamp_column_missing"]),
        ("timestamp,index,power.limit [W],enforced.power.max [W]", ["power_column_missing"]),
        ("timestamp,power.draw [W],bus_id", ["gpu_identity_column_missing"]),
        ("name,uuid", ["timestamp_column_missing", "power_column_missing", "gpu_identity_column_missing"]),
    ],
)
def test_a_header_without_a_required_column_names_each_missing_one(
    header: str, reasons: list[str], tmp_path: Path
) -> None:
    path = tmp_path / "gpu_metrics.csv"
    path.write_text(header + "\n" + "1,2,3\n", encoding="utf-8")
    theirs = aggregate_power().integrate_power(path, start_unix=WINDOW.start_unix, end_unix=WINDOW.end_unix)
    assert list(theirs.invalid_reasons) == reasons
    assert energy.integrate(energy.read_telemetry(path, WINDOW), WINDOW, 1).reasons == reasons


def test_timestamps_read_as_inferencex_reads_them() -> None:
    ix = aggregate_power()
    texts = [
        "1796000012.5",  # epoch seconds
        "1796000012500",  # epoch milliseconds (past 1e12)
        "1000000000000",  # 1e12 itself is seconds
        "1000000000000.5",  # just past: milliseconds
        "2026/12/05 13:00:01.250",  # nvidia-smi's local time
        "2026/12/05 13:00:01",
        "2026-12-05T13:00:01.250+01:00",  # ISO 8601 with an offset
        "2026-12-05T13:00:01",  # naive ISO: local time
        "",
        "soon",
    ]
    for text in texts:
        assert energy.parse_timestamp(text) == ix._parse_timestamp(text), text
    assert energy.parse_timestamp("1796000012500") == 1796000012.5
    assert energy.parse_timestamp("1000000000000.5") == pytest.approx(1_000_000_000.0005)
    assert (
        energy.parse_timestamp("2026-12-05T13:00:01.250+01:00")
        == datetime(2026, 12, 5, 12, 0, 1, 250000, UTC).timestamp()
    )


def test_interpolation_at_a_sample_between_two_and_outside() -> None:
    ix = aggregate_power()
    samples = [(10.0, 0.0), (11.0, 10.5), (13.0, 30.5)]
    for at in (10.0, 10.5, 11.0, 12.0, 13.0, 10.0 - 1e-10):
        assert energy.interpolate(samples, at) == ix._interpolate_power(samples, at), at
    assert energy.interpolate(samples, 10.5) == 5.25  # halfway from 0 W to 10.5 W
    assert energy.interpolate(samples, 12.0) == 20.5  # halfway from 10.5 W to 30.5 W
    assert energy.interpolate(samples, 10.0 - 1e-10) == 0.0  # within a nanosecond of the first sample is on it
    for outside in (9.0, 13.5):
        with pytest.raises(ValueError) as refused:
            energy.interpolate(samples, outside)
        assert str(refused.value) == "timestamp is not bracketed"


# ---------------------------------------------------------------- the window from aiperf's artifacts


def _record(isl: Any, osl: Any) -> dict[str, Any]:
    return {"metrics": {"input_sequence_length": {"value": isl}, "output_sequence_length": osl}}


def test_the_window_is_aiperfs_start_and_end_with_the_profiled_records_counts() -> None:
    profile = {"start_time": "2026-12-05T13:00:00Z", "end_time": "2026-12-05T13:05:00.500+00:00"}
    window, reasons = energy.window_from_aiperf(profile, [_record(100, 10), _record(250, {"value": 30}), _record(0, 2)])
    start = datetime(2026, 12, 5, 13, 0, 0, tzinfo=UTC).timestamp()
    assert reasons == [] and window == energy.Window(start, start + 300.5, 3, 350, 42)
    # epoch seconds as numbers; one token in and out is enough
    assert energy.window_from_aiperf({"start_time": 100, "end_time": 160.5}, [_record(1, 1)]) == (
        energy.Window(100.0, 160.5, 1, 1, 1),
        [],
    )


@pytest.mark.parametrize(
    ("profile", "records", "reason"),
    [
        ({"end_time": 160}, [_record(1, 1)], "profile_window_missing"),
        ({"start_time": 100}, [_record(1, 1)], "profile_window_missing"),
        ({"start_time": 100, "end_time": 100}, [_record(1, 1)], "profile_window_invalid"),
        ({"start_time": 100, "end_time": "later"}, [_record(1, 1)], "profile_window_invalid"),
        ({"start_time": "earlier", "end_time": 160}, [_record(1, 1)], "profile_window_invalid"),
        ({"start_time": math.nan, "end_time": 160}, [_record(1, 1)], "profile_window_invalid"),
        ({"start_time": True, "end_time": 160}, [_record(1, 1)], "profile_window_invalid"),
        ({"start_time": {"at": 100}, "end_time": 160}, [_record(1, 1)], "profile_window_invalid"),
        ({"start_time": "  ", "end_time": 160}, [_record(1, 1)], "profile_window_invalid"),
        ({"start_time": 100, "end_time": 160}, [], "successful_request_count_invalid"),
        ({"start_time": 100, "end_time": 160}, [_record(None, 1)], "incomplete_token_accounting"),
        ({"start_time": 100, "end_time": 160}, [_record(1, None)], "incomplete_token_accounting"),
        ({"start_time": 100, "end_time": 160}, [_record(5, 1), _record(None, 1)], "incomplete_token_accounting"),
        ({"start_time": 100, "end_time": 160}, [_record(5, 1), _record(5, None)], "incomplete_token_accounting"),
        ({"start_time": 100, "end_time": 160}, [_record(True, 1)], "incomplete_token_accounting"),
        ({"start_time": 100, "end_time": 160}, [_record(0, 1)], "incomplete_token_accounting"),
        ({"start_time": 100, "end_time": 160}, [_record(1, 0)], "incomplete_token_accounting"),
        ({"start_time": 100, "end_time": 160}, [_record(5, 1), _record(-1, 1)], "incomplete_token_accounting"),
    ],
)
def test_a_window_that_cannot_be_built_says_why_in_inferencexs_code(
    profile: dict[str, Any], records: list[dict[str, Any]], reason: str
) -> None:
    assert energy.window_from_aiperf(profile, records) == (None, [reason])


def test_tokens_per_second_per_kw_only_for_a_valid_measurement(tmp_path: Path) -> None:
    clean = _read(tmp_path, "clean two gpus")
    # 440 tokens (40 out) over 4 s at 0.4 kW
    per_kw = clean.tokens_per_s_per_kw(WINDOW)
    assert per_kw is not None and per_kw["output"] == pytest.approx(25.0) and per_kw["total"] == pytest.approx(275.0)
    fields = energy.power_fields(clean, WINDOW)
    assert fields["joules_per_output_token"] == 40.0 and fields["joules_per_total_token"] == pytest.approx(
        1600 / 440, abs=5e-7
    )
    assert fields["power_valid"] == 1 and fields["power_metric_schema_version"] == 2
    assert energy.power_fields(_read(tmp_path, "gpu count mismatch"), WINDOW) == {
        "power_metric_schema_version": 2,
        "power_valid": 0,
    }
