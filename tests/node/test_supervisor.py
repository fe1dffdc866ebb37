"""The supervisor with real process trees: nothing of a job may survive its end, however it ends.

Every check of "nothing survives" scans /proc itself (not through the code under test), and first
proves the scan does see the live tree, so a broken scan cannot make a test pass.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmx.node.ports import free_port
from slurmx.node.procscan import kill_survivors, running_by_group
from slurmx.node.supervisor import (
    JobInterrupted,
    ProcessDied,
    ReadinessTimeout,
    Supervisor,
)
from tests.helpers.waiting import until

HERE = Path(__file__).resolve().parent
PROC_TREE = HERE / "proc_tree.py"
RUNNER = HERE / "supervisor_runner.py"
PY = sys.executable


# ---- helpers that do not go through the code under test --------------------------------------


def marker_pids(marker: str) -> set[int]:
    """Live processes started with SLURMX_JOB_MARKER=<marker> (a zombie's environ reads empty)."""
    needle = f"SLURMX_JOB_MARKER={marker}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.add(int(entry.name))
    return found


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def blocked_in(pid: int, body: str) -> bool:
    """The runner's main thread is asleep where its body blocks: time.sleep or waitpid (the kernel's wchan)."""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False
    return wchan == "do_wait" if body == "wait" else "nanosleep" in wchan


_spawned: list[int] = []  # tree pids seen by this test, killed at its end even if the marker is broken


def tree_pids(pidfile: Path) -> dict[str, list[int] | int | None]:
    until(pidfile.exists)
    data: dict[str, list[int] | int | None] = json.loads(pidfile.read_text())
    tree, escapee = data["tree"], data["escapee"]
    _spawned.extend([*(tree if isinstance(tree, list) else []), *([escapee] if isinstance(escapee, int) else [])])
    return data


def _kill_spawned() -> None:
    for pid in _spawned:
        with contextlib.suppress(OSError):  # gone meanwhile
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"proc_tree.py" in cmdline or b"time.sleep(60)" in cmdline:  # still the process we saw
                os.kill(pid, signal.SIGKILL)
    _spawned.clear()


def start_tree(sup: Supervisor, tmp_path: Path, mode: str = "stay") -> tuple[list[int], int | None, int]:
    port = free_port()
    pidfile = tmp_path / f"tree-{uuid.uuid4().hex[:6]}.json"
    sup.start("tree", [PY, str(PROC_TREE), str(pidfile), str(port), mode])
    data = tree_pids(pidfile)
    tree = data["tree"]
    escapee = data["escapee"]
    assert isinstance(tree, list) and (escapee is None or isinstance(escapee, int))
    return tree, escapee, port


def assert_job_gone(marker: str, pids: list[int]) -> None:
    assert marker_pids(marker) == set()
    assert [pid for pid in pids if running(pid)] == []


@pytest.fixture
def marker() -> Iterator[str]:
    value = f"test-{uuid.uuid4().hex[:12]}"
    yield value
    # a failing test must not leak processes into the next one, even when the marker is what broke
    kill_survivors(value)
    _kill_spawned()


# ---- teardown ---------------------------------------------------------------------------------


def test_normal_end_leaves_no_process_behind(tmp_path: Path, marker: str) -> None:
    with Supervisor(tmp_path, marker, grace_s=5) as sup:
        tree, _, _ = start_tree(sup, tmp_path)
        assert set(tree) <= marker_pids(marker)
    report = sup.report
    assert report is not None
    assert_job_gone(marker, tree)
    # the process group alone reached the whole tree: nothing was left for the /proc sweep
    assert report.terminated == ["tree"] and report.survivors == [] and report.clean
    assert report.reason == "normal end"


def test_exception_in_block_leaves_no_process_behind(tmp_path: Path, marker: str) -> None:
    with pytest.raises(RuntimeError, match="boom"), Supervisor(tmp_path, marker, grace_s=5) as sup:
        tree, _, _ = start_tree(sup, tmp_path)
        assert set(tree) <= marker_pids(marker)
        raise RuntimeError("boom")
    assert_job_gone(marker, tree)
    assert sup.report is not None and sup.report.clean
    assert sup.report.reason == "exception RuntimeError: boom"


def test_grandchild_that_leaves_its_group_is_found_by_marker_and_killed(tmp_path: Path, marker: str) -> None:
    with Supervisor(tmp_path, marker, grace_s=5) as sup:
        tree, escapee, _ = start_tree(sup, tmp_path, mode="escape")
        assert escapee is not None and escapee in marker_pids(marker)
    assert_job_gone(marker, [*tree, escapee])
    assert sup.report is not None
    assert [p.pid for p in sup.report.survivors] == [escapee]
    assert not sup.report.clean and sup.report.unkillable == []


def test_child_ignoring_sigterm_is_killed_after_grace(tmp_path: Path, marker: str) -> None:
    ignore_term = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('armed', flush=True); time.sleep(60)"
    )
    with Supervisor(tmp_path, marker, grace_s=0.5) as sup:
        stubborn = sup.start("stubborn", [PY, "-c", ignore_term])
        until(lambda: "armed" in stubborn.log_path.read_text())
        started = time.monotonic()
    elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 3.0
    assert sup.report is not None
    assert sup.report.killed == ["stubborn"] and sup.report.terminated == [] and sup.report.survivors == []
    assert sup.wait(stubborn, timeout_s=1) == -signal.SIGKILL
    assert_job_gone(marker, [stubborn.pid])


GRACEFUL_ON_INT = """
import signal, sys, time
def stop(signum, frame):
    time.sleep(0.3)  # a graceful stop takes a moment: it writes what it has
    print('flushed', flush=True)
    sys.exit(0)
signal.signal(signal.SIGINT, stop)
print('armed', flush=True)
time.sleep(60)
"""


def test_a_process_stopped_by_sigint_outlives_the_job_wide_sigterm(tmp_path: Path, marker: str) -> None:
    # Slurm's scancel sends SIGTERM to every process of the job; aiperf stops gracefully on SIGINT only
    with Supervisor(tmp_path, marker, grace_s=5, report_name="teardown-replay.json") as sup:
        graceful = sup.start("graceful", [PY, "-c", GRACEFUL_ON_INT], stop_signal=signal.SIGINT)
        until(lambda: "armed" in graceful.log_path.read_text())
        for signum in (signal.SIGTERM, signal.SIGUSR2, signal.SIGHUP):
            os.killpg(graceful.pgid, signum)
        with pytest.raises(subprocess.TimeoutExpired):  # a job-wide signal must not end it
            sup.wait(graceful, timeout_s=0.5)
    assert sup.report is not None and sup.report.terminated == ["graceful"] and sup.report.killed == []
    assert sup.wait(graceful, timeout_s=1) == 0
    assert "flushed" in graceful.log_path.read_text()
    assert json.loads((tmp_path / "teardown-replay.json").read_text())["terminated"] == ["graceful"]
    assert not (tmp_path / "teardown.json").exists()
    assert_job_gone(marker, [graceful.pid])


def test_a_signal_shortens_the_grace_to_what_slurms_killwait_leaves(tmp_path: Path, marker: str) -> None:
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('armed', flush=True); time.sleep(60)"
    )
    started = 0.0
    with pytest.raises(JobInterrupted), Supervisor(tmp_path, marker, grace_s=30, signal_grace_s=0.5) as sup:
        child = sup.start("stubborn", [PY, "-c", stubborn])
        until(lambda: "armed" in child.log_path.read_text())
        started = time.monotonic()
        os.kill(os.getpid(), signal.SIGUSR2)  # the handler tears down at once and raises
    assert time.monotonic() - started < 5.0  # not the 30 s grace of an ordinary teardown
    assert sup.report is not None and sup.report.killed == ["stubborn"]
    assert_job_gone(marker, [child.pid])


def test_teardown_is_idempotent_and_refuses_new_starts(tmp_path: Path, marker: str) -> None:
    with Supervisor(tmp_path, marker, grace_s=1) as sup:
        sup.start("sleeper", [PY, "-c", "import time; time.sleep(60)"])
        first = sup.teardown("requested")
        assert sup.teardown("again") is first
        with pytest.raises(RuntimeError, match="torn down"):
            sup.start("late", [PY, "-c", "pass"])
    assert sup.report is first and first.terminated == ["sleeper"]
    assert json.loads((tmp_path / "teardown.json").read_text())["terminated"] == ["sleeper"]


def test_stop_ends_one_process_group_and_leaves_the_others(tmp_path: Path, marker: str) -> None:
    with Supervisor(tmp_path, marker, grace_s=2) as sup:
        first = sup.start("first", [PY, "-c", "import time; time.sleep(60)"])
        second = sup.start("second", [PY, "-c", "import time; time.sleep(60)"])
        assert sup.stop(second) == "terminated"
        assert sup.stop(second) == "exited"
        assert not sup.alive(second) and sup.alive(first) and sup.poll(first) is None
    assert sup.report is not None and sup.report.terminated == ["first"] and sup.report.already_exited == ["second"]


IGNORE_TERM_TREE = (
    "import signal, subprocess, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "  # inherits SIG_IGN
    "print('armed', g.pid, flush=True); g.wait()"
)


def test_stop_kills_a_group_that_ignores_sigterm_after_the_grace(tmp_path: Path, marker: str) -> None:
    with Supervisor(tmp_path, marker, grace_s=0.3) as sup:
        other = sup.start("other", [PY, "-c", "import time; time.sleep(60)"])
        stubborn = sup.start("stubborn", [PY, "-c", IGNORE_TERM_TREE])
        until(lambda: "armed" in stubborn.log_path.read_text())
        grandchild = int(stubborn.log_path.read_text().split()[1])
        _spawned.append(grandchild)
        started = time.monotonic()
        assert sup.stop(stubborn) == "killed"
        assert time.monotonic() - started >= 0.3  # the whole grace first
        # dead and reaped when stop() returns, the grandchild in its group too; the other group untouched
        assert stubborn.popen.returncode == -signal.SIGKILL
        assert not running(grandchild) and running_by_group([stubborn.pgid])[stubborn.pgid] == []
        assert sup.alive(other)
    assert sup.report is not None and sup.report.already_exited == ["stubborn"] and sup.report.terminated == ["other"]


CHATTY = "import sys, time; print('hello from child'); print('to stderr', file=sys.stderr, flush=True); time.sleep(60)"


def test_logs_are_kept_after_teardown(tmp_path: Path, marker: str) -> None:
    with Supervisor(tmp_path, marker, grace_s=2) as sup:
        chatty = sup.start("chatty", [PY, "-c", CHATTY])
        until(lambda: "to stderr" in chatty.log_path.read_text())
    assert chatty.log_path == tmp_path / "logs" / "chatty.log"
    assert {"hello from child", "to stderr"} <= set(chatty.log_path.read_text().splitlines())


def test_the_tail_of_a_child_that_wrote_and_exited_before_start_returned_is_its_own(
    tmp_path: Path, marker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child shares the log's file offset with the supervisor: on a loaded node it may write and exit before
    start() reads that offset, which must not skip its output (its failure reason would read "no output")."""
    real = subprocess.Popen

    def slow_parent(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        child = real(*args, **kwargs)  # type: ignore[call-overload]  # Popen's overloads; passed through as given
        child.wait()  # the interleaving a loaded node gives: the child runs to its end first
        return child

    with Supervisor(tmp_path, marker, grace_s=2) as sup:  # an earlier attempt, whose log this one shares
        sup.start("replay", [PY, "-c", "print('an earlier attempt')"]).popen.wait()
    monkeypatch.setattr("slurmx.node.supervisor.subprocess.Popen", slow_parent)
    with Supervisor(tmp_path, marker, grace_s=2) as sup:
        quick = sup.start("replay", [PY, "-c", "print('error: the endpoint answered 500', flush=True)"])
        assert quick.log_tail(3) == "error: the endpoint answered 500"  # this attempt's line, and only it


# ---- signals, delivered to a separate job-body process ------------------------------------------


def run_signalled_body(
    tmp_path: Path, marker: str, signals: list[int], mode: str = "stay", grace_s: float = 5.0, body: str = "sleep"
) -> tuple[int, dict[str, object], list[int]]:
    argv = [PY, str(RUNNER), str(tmp_path), marker, str(free_port()), mode, str(grace_s), body]
    runner = subprocess.Popen(argv)
    try:
        until(lambda: (tmp_path / "runner-ready").exists() or runner.poll() is not None)
        tree = tree_pids(tmp_path / "tree.json")["tree"]
        assert isinstance(tree, list) and set(tree) <= marker_pids(marker)
        until(lambda: blocked_in(runner.pid, body))  # the signal must find the body in its sleep or waitpid
        for n, signum in enumerate(signals):
            os.kill(runner.pid, signum)
            if n + 1 < len(signals):
                # the next one must land during the teardown this one began: its SIGTERM reached the tree
                until(lambda: not running(tree[1]))
        code = runner.wait(timeout=15)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    return code, json.loads((tmp_path / "outcome.json").read_text()), tree


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR2, signal.SIGHUP], ids=lambda s: signal.Signals(s).name
)
def test_signal_to_job_body_leaves_no_process_behind(tmp_path: Path, marker: str, signum: int) -> None:
    code, outcome, tree = run_signalled_body(tmp_path, marker, [signum])
    assert_job_gone(marker, tree)
    assert code == 128 + signum and outcome["interrupted"] == signum
    assert outcome["previous_handler_calls"] == []  # ours overrode the submitit-like handlers ...
    assert outcome["handlers_restored"] is True  # ... and gave them back afterwards
    report = outcome["report"]
    assert isinstance(report, dict)
    assert report["terminated"] == ["tree"] and report["survivors"] == []
    assert report["reason"] == f"signal {signal.Signals(signum).name}"


def test_a_supervisor_killed_outright_takes_its_children_with_it(tmp_path: Path, marker: str) -> None:
    """SIGKILL (out of memory, a multinode task killed) runs no teardown: each child started by the
    supervisor gets its own stop signal from the kernel when the supervisor's process dies."""
    argv = [PY, str(RUNNER), str(tmp_path), marker, str(free_port()), "stay", "5", "sleep"]
    runner = subprocess.Popen(argv)
    try:
        until(lambda: (tmp_path / "runner-ready").exists() or runner.poll() is not None)
        tree = tree_pids(tmp_path / "tree.json")["tree"]
        assert isinstance(tree, list) and running(tree[0])
        runner.kill()
        runner.wait()
        until(lambda: not running(tree[0]), bound_s=5.0)  # the direct child: SIGTERM, its stop signal
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()


def test_sigterm_while_body_blocks_in_wait_leaves_no_process_behind(tmp_path: Path, marker: str) -> None:
    code, outcome, tree = run_signalled_body(tmp_path, marker, [signal.SIGTERM], body="wait")
    assert_job_gone(marker, tree)
    assert code == 128 + signal.SIGTERM and outcome["interrupted"] == signal.SIGTERM
    report = outcome["report"]
    assert isinstance(report, dict) and report["terminated"] == ["tree"] and report["survivors"] == []


def test_second_signal_during_teardown_does_not_abort_it(tmp_path: Path, marker: str) -> None:
    code, outcome, tree = run_signalled_body(
        tmp_path, marker, [signal.SIGTERM, signal.SIGTERM], mode="stubborn", grace_s=1.0
    )
    assert_job_gone(marker, tree)
    assert code == 128 + signal.SIGTERM
    report = outcome["report"]
    assert isinstance(report, dict)
    assert report["killed"] == ["tree"] and report["survivors"] == []
    assert report["signals"] == ["SIGTERM", "SIGTERM"]


# ---- readiness -----------------------------------------------------------------------------------


def test_readiness_succeeds_on_health_and_honours_expect(tmp_path: Path, marker: str) -> None:
    with Supervisor(tmp_path, marker, grace_s=2) as sup:
        _, _, port = start_tree(sup, tmp_path)
        server = sup.processes[0]
        url = f"http://127.0.0.1:{port}/health"
        sup.wait_ready(server, url, timeout_s=5, interval_s=0.1, expect=lambda body: body == b"ok")
        with pytest.raises(ReadinessTimeout, match="body rejected by expect"):
            sup.wait_ready(server, url, timeout_s=0.5, interval_s=0.1, expect=lambda body: b"ready" in body)


def test_readiness_fails_fast_with_log_tail_when_process_dies(tmp_path: Path, marker: str) -> None:
    dies = "import time; [print(f'line {i}') for i in range(40)]; time.sleep(0.3); raise SystemExit(3)"
    with Supervisor(tmp_path, marker, grace_s=2) as sup:
        server = sup.start("server", [PY, "-c", dies])
        started = time.monotonic()
        with pytest.raises(ProcessDied) as caught:
            sup.wait_ready(server, f"http://127.0.0.1:{free_port()}/health", timeout_s=30, interval_s=1.0)
    assert time.monotonic() - started < 3.0
    message = str(caught.value)
    assert message.splitlines()[0].startswith("server exited with code 3 before http://127.0.0.1:")
    assert caught.value.returncode == 3
    assert caught.value.log_tail.splitlines() == [f"line {i}" for i in range(10, 40)]
    assert "line 39" in message and str(server.log_path) in message


def test_readiness_timeout_names_url_and_shows_log_tail(tmp_path: Path, marker: str) -> None:
    with Supervisor(tmp_path, marker, grace_s=2) as sup:
        slow = sup.start("slow", [PY, "-c", "import time; print('still warming up', flush=True); time.sleep(60)"])
        until(lambda: "warming" in slow.log_path.read_text())
        url = f"http://127.0.0.1:{free_port()}/health"
        started = time.monotonic()
        with pytest.raises(ReadinessTimeout) as caught:
            sup.wait_ready(slow, url, timeout_s=1.0, interval_s=0.2)
        assert 1.0 <= time.monotonic() - started < 3.0
    first_line, *rest = str(caught.value).splitlines()
    assert first_line.startswith(f"slow not ready at {url} after 1 s (last probe:")
    assert "still warming up" in rest


def test_readiness_refuses_urls_off_the_node(tmp_path: Path, marker: str) -> None:
    with Supervisor(tmp_path, marker, grace_s=1) as sup:
        managed = sup.start("idle", [PY, "-c", "import time; time.sleep(60)"])
        with pytest.raises(ValueError, match="loopback"):
            sup.wait_ready(managed, "http://10.0.0.1:8000/health", timeout_s=1)


# ---- commands/ ------------------------------------------------------------------------------------


READS_OWN_RECORD = (
    "import os, pathlib, sys; pathlib.Path(sys.argv[1]).read_text(); "
    "print('token', os.environ['HF_TOKEN']); print('marker', os.environ['SLURMX_JOB_MARKER'])"
)


def test_command_is_recorded_before_start_with_secrets_redacted(tmp_path: Path, marker: str) -> None:
    command_file = tmp_path / "commands" / "reader.txt"
    # the child itself reads its command record: it exists before the process does
    argv = [PY, "-c", READS_OWN_RECORD, str(command_file), "--api-key", "sk-argv", "--max-num-batched-tokens", "8192"]
    with Supervisor(tmp_path, marker, grace_s=1) as sup:
        reader = sup.start("reader", argv, {"HF_TOKEN": "hf_secret123", "VLLM_USE_V1": "1"})
        assert sup.wait(reader, timeout_s=5) == 0
    text = command_file.read_text()
    assert "hf_secret123" not in text and "sk-argv" not in text
    assert "# env: HF_TOKEN='***'" in text and "# env: VLLM_USE_V1=1" in text
    shell_line, json_line = [line for line in text.splitlines() if not line.startswith("#")]
    shown = [*argv[:-3], "***", "--max-num-batched-tokens", "8192"]
    assert shlex.split(shell_line) == shown
    assert json.loads(json_line) == {
        "name": "reader",
        "argv": shown,
        "env_delta": {"HF_TOKEN": "***", "VLLM_USE_V1": "1"},
        "cwd": None,
    }
    log = reader.log_path.read_text().splitlines()
    assert "token hf_secret123" in log and f"marker {marker}" in log  # the process got the real values
    assert [p.name for p in command_file.parent.iterdir()] == ["reader.txt"]  # no temp file left


def test_command_is_recorded_even_when_the_start_fails(tmp_path: Path, marker: str) -> None:
    # deterministic proof of "before": a process that cannot start still leaves its record
    with Supervisor(tmp_path, marker, grace_s=1) as sup, pytest.raises(FileNotFoundError):
        sup.start("missing", [str(tmp_path / "no-such-binary"), "--port", "1"])
    record = (tmp_path / "commands" / "missing.txt").read_text()
    shell_line = next(line for line in record.splitlines() if not line.startswith("#"))
    assert shlex.split(shell_line) == [str(tmp_path / "no-such-binary"), "--port", "1"]


def test_start_refuses_duplicate_names_and_marker_overrides(tmp_path: Path, marker: str) -> None:
    with Supervisor(tmp_path, marker, grace_s=1) as sup:
        sup.start("one", [PY, "-c", "pass"])
        with pytest.raises(ValueError, match="already started"):
            sup.start("one", [PY, "-c", "pass"])
        with pytest.raises(ValueError, match="SLURMX_JOB_MARKER"):
            sup.start("two", [PY, "-c", "pass"], {"SLURMX_JOB_MARKER": "other"})
        with pytest.raises(ValueError, match="names files"):
            sup.start("../evil", [PY, "-c", "pass"])


def test_job_interrupted_escapes_except_exception() -> None:
    with pytest.raises(JobInterrupted):
        try:
            raise JobInterrupted(signal.SIGTERM)
        except Exception:
            pytest.fail("JobInterrupted was caught by `except Exception`")
    assert JobInterrupted(signal.SIGUSR2).exit_code == 128 + signal.SIGUSR2
