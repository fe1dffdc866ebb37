"""The supervisor's paths that the subprocess tests of test_supervisor.py reach only in another process: its
signal handlers, run here in pytest's own main thread with real signals; its error records, log tails,
probes against a real HTTP server on loopback, and a group whose leader is gone."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from slurmx.node import supervisor
from slurmx.node.procscan import ProcInfo, kill_survivors
from slurmx.node.supervisor import (
    JobInterrupted,
    ProcessDied,
    ReadinessTimeout,
    Supervisor,
    SupervisorError,
    TeardownReport,
)
from tests.helpers.waiting import until

PY = sys.executable
SLEEPER = [PY, "-c", "import time; time.sleep(60)"]


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


@pytest.fixture
def marker() -> Iterator[str]:
    value = f"inproc-{os.getpid()}-{time.monotonic_ns()}"
    yield value
    kill_survivors(value)


@pytest.fixture
def own_handlers() -> Iterator[dict[int, object]]:
    """pytest's handlers of the job signals, put back however a test ends; the test sees them."""
    saved = {s: signal.getsignal(s) for s in supervisor.HANDLED_SIGNALS}
    yield saved
    for s, handler in saved.items():
        signal.signal(s, handler)  # type: ignore[arg-type]  # getsignal's union; each came from getsignal


# ---- signals in this process ---------------------------------------------------------------------


def test_a_signal_tears_down_at_once_and_raises_job_interrupted(
    tmp_path: Path, marker: str, own_handlers: dict[int, object]
) -> None:
    calls: list[int] = []
    signal.signal(signal.SIGUSR2, lambda signum, frame: calls.append(signum))  # what submitit installs
    before = signal.getsignal(signal.SIGUSR2)
    with pytest.raises(JobInterrupted) as caught, Supervisor(tmp_path, marker, grace_s=5) as sup:
        sleeper = sup.start("sleeper", SLEEPER)
        assert signal.getsignal(signal.SIGUSR2) != before  # ours while the body runs
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(5)  # not reached: the handler raises in this thread
        pytest.fail("the signal did not interrupt the body")
    assert caught.value.signum == signal.SIGUSR2 and caught.value.exit_code == 128 + 12  # SIGUSR2 is 12 on Linux
    assert str(caught.value) == "job interrupted by SIGUSR2"
    report = sup.report
    assert report is not None and report.reason == "signal SIGUSR2" and report.signals == ["SIGUSR2"]
    assert report.terminated == ["sleeper"] and not running(sleeper.pid)
    assert signal.getsignal(signal.SIGUSR2) == before and calls == []  # given back, and never called
    written = json.loads((tmp_path / "teardown.json").read_text())
    assert written["reason"] == "signal SIGUSR2" and written["clean"] is True


def test_a_signal_during_teardown_is_raised_after_it(
    tmp_path: Path, marker: str, own_handlers: dict[int, object]
) -> None:
    # the child answers the teardown's SIGTERM by sending SIGHUP to this process (Slurm's second signal)
    child = (
        "import os, signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (os.kill({os.getpid()}, signal.SIGHUP), sys.exit(0)))\n"
        "print('armed', flush=True)\n"
        "time.sleep(60)\n"
    )
    with pytest.raises(JobInterrupted) as caught, Supervisor(tmp_path, marker, grace_s=5) as sup:
        answering = sup.start("answering", [PY, "-c", child])
        until(lambda: "armed" in answering.log_path.read_text())
    assert caught.value.signum == signal.SIGHUP
    report = sup.report
    assert report is not None and report.reason == "normal end"  # the teardown it began ran to its end
    assert report.terminated == ["answering"] and report.signals == ["SIGHUP"]


def test_an_exception_keeps_its_own_way_out(tmp_path: Path, marker: str, own_handlers: dict[int, object]) -> None:
    with pytest.raises(KeyError), Supervisor(tmp_path, marker, grace_s=1) as sup:
        sup.start("sleeper", SLEEPER)
        raise KeyError("no such point")
    assert sup.report is not None and sup.report.reason == "exception KeyError: 'no such point'"
    long = "x" * 300
    with pytest.raises(RuntimeError), Supervisor(tmp_path / "b", marker, grace_s=1) as sup:
        raise RuntimeError(f"{long}\nsecond line")
    assert sup.report is not None and sup.report.reason == ("exception RuntimeError: " + long)[:200]


def test_handlers_set_outside_python_come_back_as_the_default(marker: str, own_handlers: dict[int, object]) -> None:
    sup = Supervisor(Path("/nonexistent"), marker)
    sup._previous_handlers = {signal.SIGHUP: None}  # getsignal's answer for a handler C code installed
    sup.restore_signal_handlers()
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL and sup._previous_handlers == {}


# ---- errors, with their log tails ----------------------------------------------------------------


def test_a_process_killed_by_a_signal_says_which(tmp_path: Path, marker: str) -> None:
    with Supervisor(tmp_path, marker, grace_s=1) as sup:
        victim = sup.start("victim", [PY, "-c", "import os, signal; print('bye', flush=True); os.kill(os.getpid(), 9)"])
        assert sup.wait(victim, timeout_s=10) == -9
        with pytest.raises(ProcessDied) as caught:
            sup.check_alive(victim)
    assert str(caught.value) == f"victim exited with signal SIGKILL\n--- last lines of {victim.log_path} ---\nbye"
    died = caught.value
    assert (died.name, died.returncode, died.log_path, died.log_tail) == ("victim", -9, victim.log_path, "bye")
    assert supervisor.describe_returncode(0) == "code 0" and supervisor.describe_returncode(-15) == "signal SIGTERM"


def test_a_wait_with_a_timeout_gives_up(tmp_path: Path, marker: str) -> None:
    with Supervisor(tmp_path, marker, grace_s=1) as sup:
        sleeper = sup.start("sleeper", SLEEPER)
        with pytest.raises(subprocess.TimeoutExpired):
            sup.wait(sleeper, timeout_s=0.1)
        assert sup.alive(sleeper) and sup.poll(sleeper) is None
        sup.check_alive(sleeper)  # alive: nothing raised


def test_readiness_timeout_carries_what_it_names(tmp_path: Path) -> None:
    timeout = ReadinessTimeout("vllm", "http://127.0.0.1:9/health", 2.5, "refused", tmp_path / "v.log", "")
    assert (
        str(timeout)
        == f"vllm not ready at http://127.0.0.1:9/health after 2.5 s (last probe: refused)\n(log {tmp_path / 'v.log'} is empty)"
    )
    assert (timeout.name, timeout.url, timeout.log_path, timeout.log_tail) == (
        "vllm", "http://127.0.0.1:9/health", tmp_path / "v.log", ""
    )  # fmt: skip


def test_log_tail_reads_the_end_within_its_byte_bound(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    # 10*7 + 90*8 + 900*9 + 9000*10 + 10000*11 = 208,890 bytes, over the 64 KiB bound
    path.write_text("".join(f"line {i}\n" for i in range(20000)))
    assert supervisor.read_log_tail(path, lines=2) == "line 19998\nline 19999"
    # the read starts at 208,890 - 65,536 = 143,354; "line 14042" starts at 98,890 + 4042*11 = 143,352
    tail = supervisor.read_log_tail(path, lines=10**6).splitlines()
    assert tail[0] == "ne 14042" and len(tail) == 20000 - 14042
    small = tmp_path / "small.log"
    small.write_bytes(b"abc\ndef\n")
    assert supervisor.read_log_tail(small, max_bytes=8) == "abc\ndef"  # exactly the bound: every byte
    assert supervisor.read_log_tail(small, max_bytes=5) == "\ndef"  # the last 5 bytes: "\ndef\n"
    assert supervisor.read_log_tail(small, offset=4) == "def"  # an earlier attempt's output skipped
    assert supervisor.read_log_tail(tmp_path / "absent.log") == ""
    many = tmp_path / "many.log"
    many.write_text("".join(f"{i}\n" for i in range(40)))
    assert supervisor.read_log_tail(many).splitlines() == [str(i) for i in range(10, 40)]  # 30 lines by default


def test_the_command_record_names_cwd_and_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-node-07")
    text = supervisor.render_command("engine", ["vllm", "serve"], {"A": "b c"}, tmp_path)
    lines = text.splitlines()
    assert lines[1:5] == ["# env: A='b c'", f"# cwd: {tmp_path}", "# node: gpu-node-07", "vllm serve"]
    assert json.loads(lines[5]) == {
        "name": "engine",
        "argv": ["vllm", "serve"],
        "env_delta": {"A": "b c"},
        "cwd": str(tmp_path),
    }
    assert text.endswith("}\n")


def test_a_process_started_in_a_directory_runs_there(tmp_path: Path, marker: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with Supervisor(tmp_path / "run", marker, grace_s=1) as sup:
        pwd = sup.start("pwd", [PY, "-c", "import os; print(os.getcwd())"], cwd=work)
        assert sup.wait(pwd, timeout_s=10) == 0
    assert pwd.log_path.read_text().strip() == str(work)
    record = (tmp_path / "run" / "commands" / "pwd.txt").read_text().splitlines()
    assert json.loads(record[-1])["cwd"] == str(work)


def test_a_started_process_reads_no_stdin(tmp_path: Path, marker: str) -> None:
    with Supervisor(tmp_path, marker, grace_s=1) as sup:
        reader = sup.start("reader", [PY, "-c", "import sys; print(repr(sys.stdin.read()))"])
        assert sup.wait(reader, timeout_s=10) == 0  # /dev/null: at its end at once, never the test's terminal
    assert reader.log_path.read_text().strip() == "''"


def test_teardown_summary_and_record() -> None:
    survivor = ProcInfo(pid=4321, ppid=1, pgid=4321, state="S", cmdline="lmcache server --port 1 " + "x" * 80)
    report = TeardownReport("signal SIGTERM", started_at=100.0, ended_at=102.25, terminated=["engine"],
                            killed=["lmcache"], survivors=[survivor], unkillable=[4321])  # fmt: skip
    assert report.summary() == (
        "teardown (signal SIGTERM) in 2.2 s terminated=['engine'] killed=['lmcache'] already_exited=[] "
        f"survivors=['4321:{survivor.cmdline[:60]}'] UNKILLABLE=[4321]"
    )  # 2.25 s shown to one decimal: round-half-even of the binary 2.25 gives 2.2
    data = report.to_dict()
    assert data["clean"] is False and data["survivors"] == [survivor.to_dict()] and data["unkillable"] == [4321]
    assert TeardownReport("requested", 0.0).to_dict()["clean"] is True


def test_a_marker_that_cannot_be_a_file_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="marker must match"):
        Supervisor(tmp_path, "job 1/2")
    sup = Supervisor(tmp_path, "job-1", grace_s=3.0)
    assert (
        sup.signal_grace_s == 3.0 and Supervisor(tmp_path, "j", grace_s=3.0, signal_grace_s=1.0).signal_grace_s == 1.0
    )
    with pytest.raises(ValueError, match="empty argv"):
        sup.start("nothing", [])


def test_a_group_whose_leader_is_reaped_is_ours_only_by_its_marker(tmp_path: Path, marker: str) -> None:
    """A reaped leader's pgid may be a stranger's now: a member without the job marker is left alone."""
    pidfile = tmp_path / "stranger.pid"
    leader = (
        "import os, subprocess, sys\n"  # a grandchild in the leader's group, with an env that lacks the marker
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], env={{}})\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
    )
    with Supervisor(tmp_path, marker, grace_s=1) as sup:
        m = sup.start("leader", [PY, "-c", leader])
        assert sup.wait(m, timeout_s=10) == 0  # reaped: its pgid number is free for reuse
        until(pidfile.exists)
        stranger = int(pidfile.read_text())
        try:
            assert os.getpgid(stranger) == m.pgid and running(stranger)
            assert sup.stop(m) == "exited" and running(stranger)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stranger, signal.SIGKILL)


def test_a_group_with_a_marked_member_is_still_stopped(tmp_path: Path, marker: str) -> None:
    pidfile = tmp_path / "member.pid"
    leader = (
        "import subprocess, sys\n"  # the grandchild keeps the job's env, marker included
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
    )
    with Supervisor(tmp_path, marker, grace_s=5) as sup:
        m = sup.start("leader", [PY, "-c", leader])
        assert sup.wait(m, timeout_s=10) == 0
        until(pidfile.exists)
        member = int(pidfile.read_text())
        assert sup.stop(m) == "terminated"
        until(lambda: not running(member))


# ---- readiness probes against a real server on loopback ------------------------------------------


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = int(self.path.strip("/").split("/")[0] or 200)
        body = b"x" * (2 << 20) if self.path.endswith("/big") else b"ready"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def health() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_probe_answers(health: str) -> None:
    assert supervisor.probe(f"{health}/200", 5) == (True, "HTTP 200")
    assert supervisor.probe(f"{health}/204", 5) == (True, "HTTP 204")
    assert supervisor.probe(f"{health}/503", 5) == (False, "HTTP 503")
    assert supervisor.probe(f"{health}/200", 5, lambda body: body == b"ok") == (
        False, "HTTP 200, body rejected by expect: b'ready'"
    )  # fmt: skip
    # a health body is read up to 1 MiB: the 2 MiB one is cut there
    assert supervisor.probe(f"{health}/200/big", 5, lambda body: len(body) == 1 << 20) == (True, "HTTP 200")


def test_wait_ready_on_a_real_server(
    tmp_path: Path, marker: str, health: str, caplog: pytest.LogCaptureFixture
) -> None:
    with Supervisor(tmp_path, marker, grace_s=1) as sup:
        m = sup.start("sleeper", SLEEPER)
        with caplog.at_level("INFO", logger="slurmx.node.supervisor"):
            sup.wait_ready(m, f"{health}/200", timeout_s=5, interval_s=0.1)
        assert re.fullmatch(rf"sleeper ready at {health}/200 after [0-4]\.\d s", caplog.messages[-1])
        with pytest.raises(ReadinessTimeout, match=r"after 0 s \(last probe: no probe yet\)"):
            sup.wait_ready(m, f"{health}/503", timeout_s=0)
        with pytest.raises(SupervisorError, match="^the other node failed$"):
            sup.wait_ready(m, f"{health}/200", timeout_s=5, abort=lambda: "the other node failed")
        began = time.monotonic()
        with pytest.raises(ReadinessTimeout, match=r"after 0.5 s \(last probe: HTTP 503\)"):
            sup.wait_ready(m, f"{health}/503", timeout_s=0.5, interval_s=0.1)
        assert 0.5 <= time.monotonic() - began < 2.5


def test_wait_ready_notices_a_death_between_probes(tmp_path: Path, marker: str, health: str) -> None:
    with Supervisor(tmp_path, marker, grace_s=1) as sup:
        m = sup.start("short", [PY, "-c", "import time; time.sleep(0.5)"])
        began = time.monotonic()
        with pytest.raises(ProcessDied, match=r"^short exited with code 0 before .*/503 was ready \([0-2]\.\d s\)\n"):
            sup.wait_ready(m, f"{health}/503", timeout_s=30, interval_s=10)
        assert time.monotonic() - began < 3  # noticed within the nap, not after the 10 s interval


def test_a_signal_while_a_process_starts_waits_until_it_is_on_the_list(
    tmp_path: Path, marker: str, own_handlers: dict[int, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slurm's SIGTERM landing inside Popen: the new process must be torn down with the rest, not orphaned."""
    real = subprocess.Popen

    def signalled_popen(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        os.kill(os.getpid(), signal.SIGTERM)  # delivered here, before the child exists
        return real(*args, **kwargs)  # type: ignore[call-overload]  # Popen's overloads; passed through as given

    with pytest.raises(JobInterrupted) as caught, Supervisor(tmp_path, marker, grace_s=5) as sup:
        first = sup.start("first", SLEEPER)
        monkeypatch.setattr("slurmx.node.supervisor.subprocess.Popen", signalled_popen)
        sup.start("second", SLEEPER)
        pytest.fail("start returned although a signal came during it")
    assert caught.value.signum == signal.SIGTERM
    report = sup.report
    assert report is not None and report.reason == "signal SIGTERM" and report.signals == ["SIGTERM"]
    assert report.terminated == ["second", "first"]  # newest first, the one being started included
    second = sup.processes[1]
    assert not running(first.pid) and not running(second.pid)


def test_what_the_supervisor_logs(tmp_path: Path, marker: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="slurmx.node.supervisor"), Supervisor(tmp_path, marker, grace_s=5) as sup:
        sleeper = sup.start("sleeper", SLEEPER)
    assert caplog.messages[0] == f"started sleeper pid {sleeper.pid} ({tmp_path / 'commands' / 'sleeper.txt'})"
    assert re.fullmatch(
        r"teardown \(normal end\) in \d\.\d s terminated=\['sleeper'\] killed=\[\] already_exited=\[\]",
        caplog.messages[-1],
    )
    assert caplog.records[-1].levelname == "INFO"  # clean: info, not a warning


def test_a_report_that_cannot_be_written_is_a_warning(
    tmp_path: Path, marker: str, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "teardown.json").mkdir()  # a directory where the report goes: the write fails
    with caplog.at_level("INFO", logger="slurmx.node.supervisor"), Supervisor(tmp_path, marker, grace_s=1):
        pass
    assert caplog.records[-1].levelname == "WARNING"
    assert caplog.messages[-1].startswith(f"could not write {tmp_path / 'teardown.json'}: ")
