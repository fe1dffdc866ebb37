"""One owner for every process of a job body: its own process group each, a log, a command record,
and a teardown that terminates, kills and then verifies that nothing of the job is left.

Teardown runs on normal end, on exception and on SIGTERM, SIGINT, SIGUSR2 and SIGHUP, because an
LMCache server orphaned by a cancel, a time limit or a preemption keeps terabytes of host DRAM.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import http.client as http_client
import json
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from slurmx.node import loopback, procscan
from slurmx.node.identity import MARKER_ENV, node_name
from slurmx.node.ports import free_port, free_ports
from slurmx.node.procscan import ProcInfo, kill_survivors
from slurmx.node.redact import redact_argv, redact_env
from slurmx.store import atomic
from slurmx.store.tree import COMMANDS, LOGS, TEARDOWN_JSON

__all__ = [
    "HANDLED_SIGNALS",
    "MARKER_ENV",
    "JobInterrupted",
    "Managed",
    "ProcessDied",
    "ReadinessTimeout",
    "Supervisor",
    "SupervisorError",
    "TeardownReport",
    "free_port",
    "free_ports",
    "kill_survivors",
]

log = logging.getLogger(__name__)

HANDLED_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2, signal.SIGHUP)
LOG_TAIL_LINES = 30
JOB_TEARDOWN_GRACE_S = 4.0  # a job's supervisors: below Slurm's KillWait, so our KILL comes before Slurm's
POLL_S = 0.05
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_MARKER_RE = re.compile(r"[A-Za-z0-9._:-]+")

SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class SupervisorError(Exception):
    """A supervised process failed; the first line of str() is the reason, the log tail follows."""


class ProcessDied(SupervisorError):
    def __init__(self, name: str, returncode: int, log_path: Path, log_tail: str, context: str = "") -> None:
        self.name = name
        self.returncode = returncode
        self.log_path = log_path
        self.log_tail = log_tail
        reason = f"{name} exited with {describe_returncode(returncode)}{context}"
        super().__init__(_with_tail(reason, log_path, log_tail))


class ReadinessTimeout(SupervisorError):
    def __init__(self, name: str, url: str, timeout_s: float, last_error: str, log_path: Path, log_tail: str) -> None:
        self.name = name
        self.url = url
        self.log_path = log_path
        self.log_tail = log_tail
        reason = f"{name} not ready at {url} after {timeout_s:g} s (last probe: {last_error})"
        super().__init__(_with_tail(reason, log_path, log_tail))


class JobInterrupted(BaseException):
    """A signal ended the job body.

    BaseException, like KeyboardInterrupt, so an `except Exception` in the body cannot swallow it.
    By the time it is raised every supervised process is already torn down.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"job interrupted by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def describe_returncode(returncode: int) -> str:
    if returncode < 0:
        return f"signal {signal.Signals(-returncode).name}"
    return f"code {returncode}"


def _with_tail(reason: str, log_path: Path, log_tail: str) -> str:
    if not log_tail:
        return f"{reason}\n(log {log_path} is empty)"
    return f"{reason}\n--- last lines of {log_path} ---\n{log_tail}"


@dataclass(eq=False)  # identity: two starts of the same argv are two processes
class Managed:
    """A process started by the supervisor; it leads its own process group (pgid == pid)."""

    name: str
    argv: list[str]
    log_path: Path
    command_path: Path
    log_offset: int  # this run's output starts here in a log that earlier attempts may share
    started_at: float
    popen: subprocess.Popen[bytes] = field(repr=False)
    stop_signal: int = signal.SIGTERM  # teardown sends it first, then SIGKILL after the grace

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def pgid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    @property
    def alive(self) -> bool:
        return self.poll() is None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return read_log_tail(self.log_path, self.log_offset, lines)


def read_log_tail(path: Path, offset: int = 0, lines: int = LOG_TAIL_LINES, max_bytes: int = 64 * 1024) -> str:
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(offset, size - max_bytes))
            data = handle.read()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


@dataclass
class TeardownReport:
    """What teardown did; `clean` means the process groups alone accounted for everything."""

    reason: str
    started_at: float
    ended_at: float = 0.0
    already_exited: list[str] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)  # group gone within the grace after its stop signal
    killed: list[str] = field(default_factory=list)  # group still running after the grace period: SIGKILL
    survivors: list[ProcInfo] = field(default_factory=list)  # found by the /proc verification, then SIGKILLed
    unkillable: list[int] = field(default_factory=list)  # still running after SIGKILL (stuck in D state)
    signals: list[str] = field(default_factory=list)  # signals received while the supervisor was active

    @property
    def clean(self) -> bool:
        return not self.survivors and not self.unkillable

    def summary(self) -> str:
        parts = [
            f"teardown ({self.reason}) in {self.ended_at - self.started_at:.1f} s",
            f"terminated={self.terminated}",
            f"killed={self.killed}",
            f"already_exited={self.already_exited}",
        ]
        if self.survivors:
            parts.append(f"survivors={[f'{p.pid}:{p.cmdline[:60]}' for p in self.survivors]}")
        if self.unkillable:
            parts.append(f"UNKILLABLE={self.unkillable}")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["clean"] = self.clean
        return data


def render_command(name: str, argv: Sequence[str], env_delta: Mapping[str, str], cwd: Path | str | None) -> str:
    """commands/<name>.txt: a copy-pasteable line, then the same as JSON; secret values are ***."""
    shown_argv = redact_argv(argv)
    shown_env = redact_env(env_delta)
    lines = [f"# {name}: exact argv and env delta, written before the process started; secrets shown as ***"]
    lines += [f"# env: {key}={shlex.quote(value)}" for key, value in shown_env.items()]
    lines.append(f"# cwd: {cwd if cwd is not None else '(inherited)'}")
    lines.append(f"# node: {node_name()}")  # a multinode point has records from several nodes
    lines.append(shlex.join(shown_argv))
    record = {"name": name, "argv": shown_argv, "env_delta": shown_env, "cwd": None if cwd is None else str(cwd)}
    lines.append(json.dumps(record))
    return "\n".join(lines) + "\n"


def probe(url: str, timeout_s: float, expect: Callable[[bytes], bool] | None = None) -> tuple[bool, str]:
    """One GET: (ready, what happened). Ready means a 2xx whose body satisfies `expect`."""
    try:
        status, body = loopback.request(url, timeout_s=timeout_s, max_bytes=1 << 20)
    except (OSError, http_client.HTTPException) as exc:
        return False, loopback.probe_error(exc)
    if not 200 <= status < 300:
        return False, f"HTTP {status}"
    if expect is not None and not expect(body):
        return False, f"HTTP {status}, body rejected by expect: {body[:120]!r}"
    return True, f"HTTP {status}"


class Supervisor:
    """Starts, watches and tears down every process of one job body; use as a context manager.

    Not thread-safe: call it from the thread that entered it (normally the main thread, which is
    also where the signal handlers run).
    """

    def __init__(
        self,
        run_dir: Path,
        marker: str,
        *,
        grace_s: float = 10.0,
        kill_wait_s: float = 5.0,
        report_name: str = TEARDOWN_JSON,
        signal_grace_s: float | None = None,
    ) -> None:
        """`grace_s`: how long teardown waits after the stop signals before SIGKILL; `signal_grace_s`: the
        same when a signal ends the job (Slurm's own SIGKILL follows its KillWait later), default grace_s."""
        if not _MARKER_RE.fullmatch(marker):
            raise ValueError(f"marker must match {_MARKER_RE.pattern}, got {marker!r}")
        self.run_dir = Path(run_dir)
        self.marker = marker
        self.report_name = report_name
        self.grace_s = grace_s
        self.signal_grace_s = grace_s if signal_grace_s is None else signal_grace_s
        self.kill_wait_s = kill_wait_s
        self._managed: list[Managed] = []
        self._report: TeardownReport | None = None
        self._tearing_down = False
        self._starting = False  # a signal during Popen waits until the child is on the list
        self._pending_signum: int | None = None
        self._unraised_signum: int | None = None  # arrived during teardown; raised at __exit__
        self._signals: list[str] = []
        self._previous_handlers: dict[signal.Signals, SignalHandler] = {}

    # ---- paths and state -------------------------------------------------------------------

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / LOGS

    @property
    def commands_dir(self) -> Path:
        return self.run_dir / COMMANDS

    @property
    def report_path(self) -> Path:
        return self.run_dir / self.report_name

    @property
    def processes(self) -> tuple[Managed, ...]:
        return tuple(self._managed)

    @property
    def report(self) -> TeardownReport | None:
        return self._report

    # ---- context manager and signals -------------------------------------------------------

    def __enter__(self) -> Supervisor:
        # handlers can only be installed from the main thread; elsewhere the caller owns signals
        if threading.current_thread() is threading.main_thread():
            try:
                self.install_signal_handlers()
            except BaseException:
                self.restore_signal_handlers()
                raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.teardown(_exit_reason(exc))
        finally:
            self.restore_signal_handlers()
        pending, self._unraised_signum = self._unraised_signum, None
        if exc is None and pending is not None:
            raise JobInterrupted(pending)

    def install_signal_handlers(self) -> None:
        """Override (e.g. submitit's) handlers while the body runs; restored by restore_signal_handlers."""
        for signum in HANDLED_SIGNALS:
            if signum not in self._previous_handlers:
                self._previous_handlers[signum] = signal.getsignal(signum)
            signal.signal(signum, self._on_signal)

    def restore_signal_handlers(self) -> None:
        for signum, previous in self._previous_handlers.items():
            # None means a handler installed outside Python; the default is the closest we can restore
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        self._previous_handlers.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signal.Signals(signum).name)
        if self._tearing_down:
            self._unraised_signum = self._unraised_signum or signum
        elif self._starting:
            self._pending_signum = self._pending_signum or signum
        else:
            self._interrupt(signum)

    def _interrupt(self, signum: int) -> None:
        # tear down here, in the handler: the processes go now, wherever the main thread was
        self.teardown(f"signal {signal.Signals(signum).name}", grace_s=self.signal_grace_s)
        self._unraised_signum = None
        raise JobInterrupted(signum)

    # ---- starting and watching -------------------------------------------------------------

    def start(
        self,
        name: str,
        argv: Sequence[str],
        env_delta: Mapping[str, str] | None = None,
        *,
        base_env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        stop_signal: signal.Signals = signal.SIGTERM,
    ) -> Managed:
        """Record the command, then start it in its own session with the job marker in its env.

        A process stopped by another signal than SIGTERM starts with the other handled signals ignored
        (for SIGINT: SIGTERM, SIGUSR2, SIGHUP): Slurm sends them to every process of the job at once (scancel,
        the time-limit lead), and they must not cut short the graceful stop teardown asks for."""
        self._check_startable(name, argv)
        delta = dict(env_delta or {})
        if delta.get(MARKER_ENV, self.marker) != self.marker:
            raise ValueError(f"{name}: env_delta may not change {MARKER_ENV}")
        env = {**(os.environ if base_env is None else base_env), **delta, MARKER_ENV: self.marker}
        argv = [str(arg) for arg in argv]
        command_path = self.commands_dir / f"{name}.txt"
        atomic.write_text(command_path, render_command(name, argv, delta, cwd))
        log_path = self.logs_dir / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log_file:
            # before the child starts: it shares this file offset, and a fast child's output would move it first
            offset = log_file.seek(0, os.SEEK_END)
            self._starting = True
            try:
                popen = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,  # own session and group: one killpg reaches its whole tree
                    preexec_fn=_ignoring(stop_signal),
                )
                managed = Managed(
                    name, argv, log_path, command_path, offset, time.time(), popen, stop_signal=stop_signal
                )
                self._managed.append(managed)
            finally:
                self._starting = False
                self._raise_pending_signal()
        log.info("started %s pid %d (%s)", name, managed.pid, command_path)
        return managed

    def _check_startable(self, name: str, argv: Sequence[str]) -> None:
        if self._report is not None or self._tearing_down:
            raise RuntimeError(f"cannot start {name}: the supervisor has been torn down")
        if not _NAME_RE.fullmatch(name):
            raise ValueError(f"process name must match {_NAME_RE.pattern} (it names files), got {name!r}")
        if any(m.name == name for m in self._managed):
            raise ValueError(f"a process named {name!r} was already started")
        if not argv:
            raise ValueError(f"{name}: empty argv")

    def _raise_pending_signal(self) -> None:
        pending, self._pending_signum = self._pending_signum, None
        if pending is not None:
            self._interrupt(pending)

    def poll(self, m: Managed) -> int | None:
        return m.poll()

    def alive(self, m: Managed) -> bool:
        return m.alive

    def wait(self, m: Managed, timeout_s: float | None = None) -> int:
        """Exit code of the process; raises subprocess.TimeoutExpired after timeout_s."""
        return m.popen.wait(timeout_s)

    def check_alive(self, m: Managed, context: str = "") -> None:
        """Raise ProcessDied (with the log tail) if the process has exited."""
        returncode = m.poll()
        if returncode is not None:
            raise ProcessDied(m.name, returncode, m.log_path, m.log_tail(), context)

    def wait_ready(
        self,
        m: Managed,
        url: str,
        *,
        timeout_s: float,
        interval_s: float = 1.0,
        expect: Callable[[bytes], bool] | None = None,
        abort: Callable[[], str | None] | None = None,
    ) -> None:
        """Poll a loopback health URL until ready; fail at once if the process exits meanwhile, or when
        `abort` gives a reason (a multinode point's other node failed)."""
        loopback.require_loopback(url)  # health checks never leave the node
        started = time.monotonic()
        deadline = started + timeout_s
        last = "no probe yet"
        while True:
            self.check_alive(m, f" before {url} was ready ({time.monotonic() - started:.1f} s)")
            if abort is not None and (reason := abort()) is not None:
                raise SupervisorError(reason)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReadinessTimeout(m.name, url, timeout_s, last, m.log_path, m.log_tail())
            ready, last = probe(url, min(remaining, max(interval_s, 2.0)), expect)
            if ready:
                log.info("%s ready at %s after %.1f s", m.name, url, time.monotonic() - started)
                return
            _sleep_while_alive(m, min(interval_s, max(deadline - time.monotonic(), 0.0)))

    # ---- stopping ------------------------------------------------------------------------

    def stop(self, m: Managed) -> str:
        """Stop one process group: 'exited' (nothing to do), 'terminated' or 'killed'."""
        if not self._running_groups([m]):
            m.poll()
            return "exited"
        _signal_group(m.pgid, m.stop_signal)
        if not self._wait_groups_gone([m], time.monotonic() + self.grace_s):
            m.poll()
            return "terminated"
        _signal_group(m.pgid, signal.SIGKILL)
        self._wait_groups_gone([m], time.monotonic() + self.kill_wait_s)
        m.poll()
        return "killed"

    def teardown(self, reason: str = "requested", *, grace_s: float | None = None) -> TeardownReport:
        """Stop every group (newest first; SIGTERM or its stop signal), wait the grace (self.grace_s unless
        given), KILL the rest, verify via /proc. Idempotent."""
        if self._report is not None:
            return self._report
        if self._tearing_down:
            raise RuntimeError("teardown re-entered")
        self._tearing_down = True
        report = TeardownReport(reason=reason, started_at=time.time())
        try:
            self._terminate_then_kill(report, self.grace_s if grace_s is None else grace_s)
        finally:
            # the verification runs even if the steps above failed: it needs only the marker
            self._verify_nothing_left(report)
            report.signals = list(self._signals)
            report.ended_at = time.time()
            self._report = report
            self._tearing_down = False
            self._record(report)
        return report

    def _terminate_then_kill(self, report: TeardownReport, grace_s: float) -> None:
        running = self._running_groups(list(reversed(self._managed)))
        report.already_exited = [m.name for m in reversed(self._managed) if m not in running]
        for m in running:
            _signal_group(m.pgid, m.stop_signal)
        still = self._wait_groups_gone(running, time.monotonic() + grace_s)
        report.terminated = [m.name for m in running if m not in still]
        for m in still:
            _signal_group(m.pgid, signal.SIGKILL)
        report.killed = [m.name for m in still]
        self._wait_groups_gone(still, time.monotonic() + self.kill_wait_s)

    def _verify_nothing_left(self, report: TeardownReport) -> None:
        pgids = [m.pgid for m in self._managed if self._group_is_ours(m)]
        found = kill_survivors(self.marker, pgids=pgids, wait_s=self.kill_wait_s)
        report.survivors = found
        report.unkillable = [p.pid for p in found if procscan.is_running(p.pid)]
        for m in self._managed:
            m.poll()  # reap leaders only now: an unreaped leader keeps its pgid from being reused

    def _record(self, report: TeardownReport) -> None:
        line = report.summary()
        (log.info if report.clean else log.warning)("%s", line)
        try:
            atomic.write_json(self.report_path, report.to_dict())
        except atomic.StorageError as exc:
            log.warning("could not write %s: %s", self.report_path, exc)

    def _group_is_ours(self, m: Managed) -> bool:
        # a pgid number is reserved while its leader is unreaped; after that, only the marker proves it
        if m.popen.returncode is None:
            return True
        members = procscan.running_by_group([m.pgid])[m.pgid]
        return any(procscan.has_marker(pid, self.marker) for pid in members)

    def _running_groups(self, managed: Iterable[Managed]) -> list[Managed]:
        ours = [m for m in managed if self._group_is_ours(m)]
        members = procscan.running_by_group(m.pgid for m in ours)
        return [m for m in ours if members[m.pgid]]

    def _wait_groups_gone(self, managed: list[Managed], deadline: float) -> list[Managed]:
        """Wait until every group is empty or the deadline passes; return the groups still running."""
        pending = self._running_groups(managed)
        while pending and time.monotonic() < deadline:
            time.sleep(POLL_S)
            pending = self._running_groups(pending)
        return pending


def _ignoring(stop_signal: signal.Signals) -> Callable[[], None]:
    """The child's set-up (see Supervisor.start): its stop signal when this process dies without tearing it
    down (SIGKILL, out of memory), and the other job signals ignored when its stop signal is not SIGTERM."""
    ignored = () if stop_signal == signal.SIGTERM else tuple(s for s in HANDLED_SIGNALS if s != stop_signal)
    return functools.partial(_child_setup, os.getpid(), stop_signal, ignored)


_PR_SET_PDEATHSIG = 1
# resolved here, not in the child: between fork and exec only the call itself runs
_PRCTL = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None) if sys.platform.startswith("linux") else None


def _child_setup(parent: int, stop_signal: signal.Signals, ignored: tuple[signal.Signals, ...]) -> None:
    # runs in the child between fork and exec; the death signal and ignored dispositions survive exec
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(stop_signal), 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before the death signal was armed
            os.kill(os.getpid(), stop_signal)
    for signum in ignored:
        signal.signal(signum, signal.SIG_IGN)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group emptied since we looked
        os.killpg(pgid, signum)


def _sleep_while_alive(m: Managed, seconds: float) -> None:
    # short naps so a dying server is noticed within POLL_S, whatever the probe interval
    deadline = time.monotonic() + seconds
    while m.poll() is None and time.monotonic() < deadline:
        time.sleep(min(POLL_S, max(deadline - time.monotonic(), 0.0)))


def _exit_reason(exc: BaseException | None) -> str:
    if exc is None:
        return "normal end"
    if isinstance(exc, JobInterrupted):
        return f"signal {signal.Signals(exc.signum).name}"
    first_line = (str(exc).splitlines() or [""])[0]
    return f"exception {type(exc).__name__}: {first_line}"[:200]
