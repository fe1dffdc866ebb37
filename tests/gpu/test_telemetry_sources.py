"""The sampler's two sources in this process: NVML through a stand-in `pynvml` answering the H200's captured
values (tests/helpers/h200_nvml.py), nvidia-smi as a script on the job's PATH printing the H200's recorded
answer. What the sampler writes is compared with the files the real H200 run wrote."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmx.node import telemetry
from tests.helpers.h200_nvml import H200, H200Nvml, NVMLError, first_h200_uuid, h200_dirty, h200_sampled

UUID = first_h200_uuid()
RERUN_UUID = "GPU-81bc2e63-2271-5f9a-6089-d6ac676cfbe6"  # the second H200 (tests/data/gpu/h200-rerun)


@pytest.fixture(autouse=True)
def own_signals() -> Iterator[None]:
    """`telemetry.run` takes SIGTERM and SIGINT for the sampler: give them back to pytest afterwards."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def use_nvml(monkeypatch: pytest.MonkeyPatch, nv: H200Nvml) -> H200Nvml:
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return nv


def fake_smi(bin_dir: Path, body: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


def recorded_smi(bin_dir: Path) -> Path:
    """nvidia-smi answering the sampler's query with the H200's recorded answer (one GPU, 78.17 W)."""
    return fake_smi(bin_dir, f"cat {H200 / 'query-gpu-slurmx.csv'}")


def without_times(text: str) -> str:
    return re.sub(r'"(started_at|ended_at|interval_s)": [0-9.e+]+', r'"\1": T', text)


def test_nvml_sampler_writes_what_the_h200_run_wrote(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    nv = use_nvml(monkeypatch, H200Nvml([h200_sampled()]))
    began = time.time()
    # the H200 run: 95 rounds, then the one after the stop (96 rows); interval 0 here, no waiting
    assert telemetry.run(tmp_path, 0.0, {"PATH": "/nonexistent"}, max_samples=95) == 0
    ended = time.time()
    ours = (tmp_path / telemetry.METRICS_CSV).read_text().splitlines()
    theirs = (H200 / telemetry.METRICS_CSV).read_text().splitlines()
    assert ours[0] == theirs[0] and len(ours) == len(theirs) == 97
    assert [r.split(",", 1)[1] for r in ours[1:]] == [r.split(",", 1)[1] for r in theirs[1:]]
    stamps = [float(r.split(",", 1)[0]) for r in ours[1:]]
    assert began <= stamps[0] and stamps == sorted(stamps) and stamps[-1] <= ended
    assert all(re.fullmatch(r"\d+\.\d{6}", r.split(",", 1)[0]) for r in ours[1:])
    for snapshot in (telemetry.ENERGY_START_CSV, telemetry.ENERGY_END_CSV):  # 28667.507 J and 50876.406 J
        assert (tmp_path / snapshot).read_bytes() == (H200 / snapshot).read_bytes()
    # telemetry.json: the H200 run's, key for key and line for line, but for its times
    info_text = (tmp_path / telemetry.INFO_JSON).read_text()
    assert without_times(info_text) == without_times((H200 / telemetry.INFO_JSON).read_text())
    info = json.loads(info_text)
    assert info["interval_s"] == 0.0 and began <= info["started_at"] <= info["ended_at"] <= ended
    assert nv.initialised == 1 and nv.shutdowns == 1


def test_the_sampler_stops_one_round_after_sigterm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    class TermAfterThree(H200Nvml):
        def nvmlDeviceGetPowerUsage(self, h):  # type: ignore[no-untyped-def]  # noqa: N802
            value = super().nvmlDeviceGetPowerUsage(h)
            if self.calls[(0, "power_mw")] == 3:
                os.kill(os.getpid(), signal.SIGTERM)  # what the job's teardown sends
            return value

    use_nvml(monkeypatch, TermAfterThree([h200_sampled()]))
    assert telemetry.run(tmp_path, 0.0, {}) == 0
    rows = (tmp_path / telemetry.METRICS_CSV).read_text().splitlines()
    theirs = (H200 / telemetry.METRICS_CSV).read_text().splitlines()
    # three rounds, the stop seen, one round more: the H200's first four rows
    assert [r.split(",", 1)[1] for r in rows[1:]] == [r.split(",", 1)[1] for r in theirs[1:5]]
    assert json.loads((tmp_path / telemetry.INFO_JSON).read_text())["rounds"] == 3


def test_sigint_stops_it_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    class IntAfterOne(H200Nvml):
        def nvmlDeviceGetPowerUsage(self, h):  # type: ignore[no-untyped-def]  # noqa: N802
            value = super().nvmlDeviceGetPowerUsage(h)
            if self.calls[(0, "power_mw")] == 1:
                os.kill(os.getpid(), signal.SIGINT)
            return value

    use_nvml(monkeypatch, IntAfterOne([h200_sampled()]))
    assert telemetry.run(tmp_path, 0.0, {}) == 0
    assert len((tmp_path / telemetry.METRICS_CSV).read_text().splitlines()) == 1 + 2  # header, round, the one after


def test_the_command_line_samples_as_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_nvml(monkeypatch, H200Nvml([h200_sampled()]))
    monkeypatch.setattr(os, "environ", {"CUDA_VISIBLE_DEVICES": UUID[:12]})  # GPU-cdfacf4c: a UUID prefix
    out = tmp_path / "t"
    assert telemetry.main(["--out", str(out), "--interval-s", "0", "--max-samples", "2"]) == 0
    assert len((out / telemetry.METRICS_CSV).read_text().splitlines()) == 1 + 3  # header, 2 rounds, the one after
    info = json.loads((out / telemetry.INFO_JSON).read_text())
    assert info["cuda_visible_devices"] == "GPU-cdfacf4c" and info["interval_s"] == 0 and info["rounds"] == 2


def test_gpus_are_chosen_by_uuid_and_keep_their_index(monkeypatch: pytest.MonkeyPatch) -> None:
    nv = use_nvml(monkeypatch, H200Nvml([h200_dirty("h200-rerun"), h200_sampled()], uuid_bytes=True))
    source, reasons = telemetry.open_source({"CUDA_VISIBLE_DEVICES": "GPU-cdfacf4c"})
    assert isinstance(source, telemetry.NvmlSource) and reasons == []
    assert source.gpus == [("1", UUID)]
    (recorded,) = json.loads((H200 / telemetry.INFO_JSON).read_text())["devices"]
    assert source.devices == [{**recorded, "index": "1"}]
    # the first round's readings, as the H200 run's first row: 97.623 W, 28667.5 J, 615.062 MiB, 390/3201 MHz, 32 C
    assert source.energy_j() == {"1": 28667.507}
    (sample,) = source.read()
    assert sample.row()[1:] == ["1", "97.623", "28667.5", "615.062", "390", "3201", "0", "0", "32"]
    source.close()
    assert nv.shutdowns == 1


def test_an_nvml_field_the_gpu_does_not_support_is_left_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = h200_sampled()
    assert gpu.series is not None
    del gpu.series["power_mw"], gpu.series["util_gpu"], gpu.series["util_mem"]  # NVML: NOT_SUPPORTED
    use_nvml(monkeypatch, H200Nvml([gpu]))
    source, _ = telemetry.open_source({})
    assert isinstance(source, telemetry.NvmlSource)
    (sample,) = source.read()
    assert sample.row()[1:] == ["0", "", "28667.5", "615.062", "390", "3201", "", "", "32"]


def test_a_gpu_without_describable_fields_is_still_sampled(monkeypatch: pytest.MonkeyPatch) -> None:
    class Bare(H200Nvml):
        def nvmlDeviceGetName(self, h):  # type: ignore[no-untyped-def]  # noqa: N802
            raise NVMLError(3)

        def nvmlDeviceGetEnforcedPowerLimit(self, h):  # type: ignore[no-untyped-def]  # noqa: N802
            return "n/a"  # not a number: no limit rather than a crash

    use_nvml(monkeypatch, Bare([h200_sampled()]))
    source, _ = telemetry.open_source({})
    assert isinstance(source, telemetry.NvmlSource)
    assert source.devices[0]["name"] == "" and source.devices[0]["power_limit_w"] is None
    assert source.devices[0]["pci_bus_id"] == "00000000:00:06.0"


def test_nvml_naming_no_granted_gpu_is_closed_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    nv = use_nvml(monkeypatch, H200Nvml([h200_sampled()]))
    assert telemetry.open_source({"CUDA_VISIBLE_DEVICES": "3", "PATH": "/nonexistent"}) == (
        None,
        ["nvml: none of CUDA_VISIBLE_DEVICES=3 found", "nvidia-smi: not on PATH"],
    )
    assert nv.shutdowns == 1


def test_an_empty_grant_opens_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    nv = use_nvml(monkeypatch, H200Nvml([h200_sampled()]))
    assert telemetry.open_source({"CUDA_VISIBLE_DEVICES": ""}) == (
        None,
        ["CUDA_VISIBLE_DEVICES is empty: no GPU granted"],
    )
    assert nv.initialised == 0


def test_without_a_driver_the_jobs_nvidia_smi_answers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_nvml(monkeypatch, H200Nvml([], init_error=NVMLError("Driver Not Loaded")))
    recorded_smi(tmp_path / "bin")  # on the job's PATH only, not on this process's
    source, reasons = telemetry.open_source({"CUDA_VISIBLE_DEVICES": "0", "PATH": str(tmp_path / "bin")})
    assert reasons == ["nvml: NVMLError: Driver Not Loaded"]
    assert isinstance(source, telemetry.SmiSource) and source.devices == [{"index": "0", "uuid": UUID}]
    assert source.energy_j() == {"0": None}
    # query-gpu-slurmx.csv: 0, GPU-cdfacf4c..., 78.17, 0, 345, 3201, 0, 0, 32
    (sample,) = source.read()
    assert sample.row()[1:] == ["0", "78.17", "", "0", "345", "3201", "0", "0", "32"]
    assert source.close() is None


def test_the_smi_stream_has_no_energy_snapshots(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_nvml(monkeypatch, H200Nvml([], init_error=ImportError("hidden for the fallback test")))
    recorded_smi(tmp_path / "bin")
    out = tmp_path / "t"
    assert telemetry.run(out, 0.0, {"PATH": str(tmp_path / "bin")}, max_samples=1) == 0
    assert sorted(p.name for p in out.iterdir()) == [telemetry.METRICS_CSV, telemetry.INFO_JSON]
    rows = (out / telemetry.METRICS_CSV).read_text().splitlines()
    assert [r.split(",", 1)[1] for r in rows[1:]] == ["0,78.17,,0,345,3201,0,0,32"] * 2
    info = json.loads((out / telemetry.INFO_JSON).read_text())
    recorded = json.loads((H200 / "smi_fallback" / telemetry.INFO_JSON).read_text())  # the H200's fallback run
    assert {k: info[k] for k in ("source", "devices", "fallback_reasons", "cuda_visible_devices")} == {
        k: recorded[k] for k in ("source", "devices", "fallback_reasons", "cuda_visible_devices")
    }


def test_a_failed_smi_round_is_a_gap_not_a_crash(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_nvml(monkeypatch, H200Nvml([], init_error=ImportError("no pynvml")))
    once = tmp_path / "answered"
    fake_smi(tmp_path / "bin", f"[ -e {once} ] && exit 1\ntouch {once}\ncat {H200 / 'query-gpu-slurmx.csv'}")
    source, _ = telemetry.open_source({"PATH": str(tmp_path / "bin")})
    assert isinstance(source, telemetry.SmiSource)
    assert source.read() == []


def test_an_smi_that_fails_is_the_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_nvml(monkeypatch, H200Nvml([], init_error=ImportError("no pynvml")))
    fake_smi(tmp_path / "bin", "echo 'NVIDIA-SMI has failed' >&2\nexit 9")
    source, reasons = telemetry.open_source({"PATH": str(tmp_path / "bin")})
    assert source is None and reasons[0] == "nvml: ImportError: no pynvml"
    assert reasons[1].startswith("nvidia-smi: CalledProcessError: Command ") and reasons[1].endswith("exit status 9.")


def test_an_smi_without_the_granted_gpu_is_the_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_nvml(monkeypatch, H200Nvml([], init_error=ImportError("no pynvml")))
    recorded_smi(tmp_path / "bin")
    source, reasons = telemetry.open_source({"CUDA_VISIBLE_DEVICES": "1", "PATH": str(tmp_path / "bin")})
    assert source is None and reasons[1:] == ["nvidia-smi: no GPU of the allocation found"]


def test_smi_rows_with_unsupported_fields() -> None:
    rows = telemetry.parse_smi_rows("\n0, GPU-x, [N/A], 1, 2, 3, [Not Supported], 5, 6\n")
    assert rows == [["0", "GPU-x", "[N/A]", "1", "2", "3", "[Not Supported]", "5", "6"]]
    assert telemetry.smi_sample(rows[0], 1.5).row() == ["1.500000", "0", "", "", "1", "2", "3", "", "5", "6"]


def test_await_sample_after_waits_for_a_later_row(tmp_path: Path) -> None:
    (tmp_path / telemetry.INFO_JSON).write_text(json.dumps({"source": "nvml"}))
    began = time.monotonic()
    assert telemetry.await_sample_after(tmp_path, 100.0, timeout_s=0.3) is False  # no CSV yet
    assert 0.3 <= time.monotonic() - began < 3
    (tmp_path / telemetry.METRICS_CSV).write_text("timestamp,index\n99.5,0\n100.5,0\n101.0,0,1")  # half a line last
    assert telemetry.await_sample_after(tmp_path, 100.0, timeout_s=0.3) is True
    assert telemetry.await_sample_after(tmp_path, 101.0, timeout_s=0.0) is False


def test_telemetry_argv() -> None:
    out = Path("/p/telemetry")
    assert telemetry.telemetry_argv("py", out) == [
        "py", "-m", "slurmx.node.telemetry", "--out", "/p/telemetry", "--interval-s", "0.5"
    ]  # fmt: skip
    assert telemetry.telemetry_argv("py", out, 0.25, "AMD")[-4:] == ["--interval-s", "0.25", "--absent", "AMD"]


def test_an_absent_reason_opens_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    nv = use_nvml(monkeypatch, H200Nvml([h200_sampled()]))
    assert telemetry.run(tmp_path, 0.5, {"CUDA_VISIBLE_DEVICES": "0"}, absent="MI355X: no NVML") == 0
    info = json.loads((tmp_path / telemetry.INFO_JSON).read_text())
    assert info["source"] == "none" and info["absent_reason"] == "MI355X: no NVML"
    assert info["fallback_reasons"] == ["MI355X: no NVML"] and info["devices"] == []
    assert nv.initialised == 0 and not (tmp_path / telemetry.METRICS_CSV).exists()


def test_rounds_are_spaced_by_the_interval(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_nvml(monkeypatch, H200Nvml([h200_sampled()]))
    source, _ = telemetry.open_source({})
    assert source is not None
    began = time.monotonic()
    assert telemetry.sample_until_stopped(source, tmp_path, 0.1, lambda: False, max_samples=3) == 3
    took = time.monotonic() - began
    stamps = [float(r.split(",", 1)[0]) for r in (tmp_path / telemetry.METRICS_CSV).read_text().splitlines()[1:]]
    # rounds due at 0, 0.1 and 0.2 s (each a little after), then the one after the stop right away
    assert len(stamps) == 4 and stamps[1] - stamps[0] >= 0.05 and stamps[2] - stamps[0] >= 0.18
    assert stamps[3] - stamps[2] < 0.05 and 0.18 <= took < 1.5


def test_a_late_round_is_not_made_up_for(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    class SlowFirstRound(H200Nvml):
        def nvmlDeviceGetPowerUsage(self, h):  # type: ignore[no-untyped-def]  # noqa: N802
            if self.calls[(0, "power_mw")] == 0:
                time.sleep(0.35)  # a slow driver call: the round ends past the next round's time
            return super().nvmlDeviceGetPowerUsage(h)

    use_nvml(monkeypatch, SlowFirstRound([h200_sampled()]))
    source, _ = telemetry.open_source({})
    assert source is not None
    telemetry.sample_until_stopped(source, tmp_path, 0.1, lambda: False, max_samples=3)
    stamps = [float(r.split(",", 1)[0]) for r in (tmp_path / telemetry.METRICS_CSV).read_text().splitlines()[1:]]
    # the late round's time is the new start: the next round comes one interval later, not at once to catch up
    assert stamps[2] - stamps[1] >= 0.05


def test_the_command_lines_defaults_and_what_it_prints(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    use_nvml(monkeypatch, H200Nvml([h200_sampled()]))
    monkeypatch.setattr(os, "environ", {})
    assert telemetry.main(["--out", str(tmp_path), "--max-samples", "1"]) == 0
    assert json.loads((tmp_path / telemetry.INFO_JSON).read_text())["interval_s"] == 0.5
    assert capsys.readouterr().out == "telemetry: nvml, GPUs ['0'], every 0.5 s\n"
    assert telemetry.main(["--out", str(tmp_path / "amd"), "--absent", "MI355X: no NVML"]) == 0
    assert capsys.readouterr().out == "telemetry: no GPU telemetry on this node: MI355X: no NVML\n"


def test_a_reason_without_a_message_ends_at_its_type(monkeypatch: pytest.MonkeyPatch) -> None:
    use_nvml(monkeypatch, H200Nvml([], init_error=ImportError()))
    assert telemetry.open_source({"PATH": "/nonexistent"})[1] == ["nvml: ImportError:", "nvidia-smi: not on PATH"]


def test_a_memory_reading_that_fails_is_left_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoMemory(H200Nvml):
        def nvmlDeviceGetMemoryInfo(self, h):  # type: ignore[no-untyped-def]  # noqa: N802
            raise NVMLError(3)

    use_nvml(monkeypatch, NoMemory([h200_sampled()]))
    source, _ = telemetry.open_source({})
    assert isinstance(source, telemetry.NvmlSource) and source.devices[0]["memory_total_mib"] is None
    (sample,) = source.read()
    assert sample.row()[1:] == ["0", "97.623", "28667.5", "", "390", "3201", "0", "0", "32"]


def test_nvidia_smi_runs_in_its_own_session(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The job's teardown signals the sampler's group: a query under way must still answer, outside it."""
    use_nvml(monkeypatch, H200Nvml([], init_error=ImportError("no pynvml")))
    seen = tmp_path / "seen"
    # field 6 of /proc/self/stat is the session id; a session leader's equals its pid
    fake_smi(
        tmp_path / "bin", f"echo \"$$ $(cut -d' ' -f6 /proc/$$/stat)\" > {seen}\ncat {H200 / 'query-gpu-slurmx.csv'}"
    )
    source, _ = telemetry.open_source({"PATH": str(tmp_path / "bin")})
    assert isinstance(source, telemetry.SmiSource)
    pid, session = seen.read_text().split()
    assert pid == session and int(session) != os.getsid(0)


def test_the_smi_source_asks_for_csv_without_header_or_units(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    answer = f"cat {H200 / 'query-gpu-slurmx.csv'}"
    fake_smi(
        tmp_path / "bin",
        f'[ "$1 $2" = "--query-gpu={telemetry.SMI_QUERY} --format=csv,noheader,nounits" ] || exit 4\n{answer}',
    )
    monkeypatch.setenv(
        "PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}"
    )  # the default: as this process's PATH finds it
    source = telemetry.SmiSource(None)
    assert source.gpus == [("0", UUID)]


def test_without_a_path_the_jobs_default_path_is_searched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_nvml(monkeypatch, H200Nvml([], init_error=ImportError("no pynvml")))
    recorded_smi(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # this process's PATH has one; the job's env has no PATH
    monkeypatch.setattr(os, "defpath", str(tmp_path / "none"))
    assert telemetry.open_source({})[1] == ["nvml: ImportError: no pynvml", "nvidia-smi: not on PATH"]


def test_the_output_directory_is_made_with_its_parents(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_nvml(monkeypatch, H200Nvml([h200_sampled()]))
    out = tmp_path / "point" / "attempt" / "telemetry"
    assert telemetry.run(out, 0.0, {}, max_samples=1) == 0
    assert (out / telemetry.METRICS_CSV).is_file()


def test_every_reason_is_in_the_absent_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_nvml(monkeypatch, H200Nvml([h200_sampled()]))
    assert telemetry.run(tmp_path, 0.5, {"CUDA_VISIBLE_DEVICES": "3", "PATH": "/nonexistent"}) == 0
    info = json.loads((tmp_path / telemetry.INFO_JSON).read_text())
    assert info["absent_reason"] == "nvml: none of CUDA_VISIBLE_DEVICES=3 found; nvidia-smi: not on PATH"


def test_telemetry_json_names_the_source_while_sampling(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[dict[str, object]] = []

    class Peek(H200Nvml):
        def nvmlDeviceGetPowerUsage(self, h):  # type: ignore[no-untyped-def]  # noqa: N802
            if not seen:  # the first round: what await_sample_after reads while the sampler runs
                seen.append(json.loads((tmp_path / telemetry.INFO_JSON).read_text()))
            return super().nvmlDeviceGetPowerUsage(h)

    use_nvml(monkeypatch, Peek([h200_sampled()]))
    telemetry.run(tmp_path, 0.0, {}, max_samples=1)
    assert seen[0]["source"] == "nvml" and "rounds" not in seen[0]


def test_an_info_without_a_source_means_no_sampler(tmp_path: Path) -> None:
    (tmp_path / telemetry.INFO_JSON).write_text("{}")
    (tmp_path / telemetry.METRICS_CSV).write_text("timestamp,index\n200.0,0\n")
    assert telemetry.await_sample_after(tmp_path, 100.0, timeout_s=5) is False


def test_newer_nvml_answers_str_and_partial_memory_info(monkeypatch: pytest.MonkeyPatch) -> None:
    class Newer(H200Nvml):
        def nvmlDeviceGetName(self, h):  # type: ignore[no-untyped-def]  # noqa: N802
            return "NVIDIA H200"  # nvidia-ml-py 12 and later: str, not bytes

        def nvmlDeviceGetMemoryInfo(self, h):  # type: ignore[no-untyped-def]  # noqa: N802
            return types.SimpleNamespace(total=143771 * 2**20)  # no `used` field: unknown, not a crash

    use_nvml(monkeypatch, Newer([h200_sampled()]))
    source, _ = telemetry.open_source({})
    assert isinstance(source, telemetry.NvmlSource) and source.devices[0]["name"] == "NVIDIA H200"
    (sample,) = source.read()
    assert sample.memory_used_mib is None


def test_the_command_line_needs_an_output_directory(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        telemetry.main([])
    assert caught.value.code == 2 and "--out" in capsys.readouterr().err


def test_a_row_written_while_waiting_is_seen_soon(tmp_path: Path) -> None:
    (tmp_path / telemetry.INFO_JSON).write_text(json.dumps({"source": "nvml"}))
    (tmp_path / telemetry.METRICS_CSV).write_text("timestamp,index\n99.0,0\n")
    writer = threading.Timer(0.2, lambda: (tmp_path / telemetry.METRICS_CSV).write_text("timestamp,index\n101.0,0\n"))
    writer.start()
    began = time.monotonic()
    assert telemetry.await_sample_after(tmp_path, 100.0, timeout_s=10) is True
    writer.join()
    assert time.monotonic() - began < 0.9  # polled every 0.1 s
