"""Who the job is on the node (Slurm's env, the host name), the ports' fallbacks, and the array task's entry
taking the job's signals over, in this process."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmx.node import entry, identity
from slurmx.node import ports as ports_mod
from slurmx.node.supervisor import JobInterrupted
from tests.helpers.serving_group import serving_group

SLURM_VARS = ("SLURMD_NODENAME", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_ID", "SLURM_RESTART_COUNT")


@pytest.fixture
def outside_slurm(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in SLURM_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_node_is_slurms_name_else_the_short_host(outside_slurm: pytest.MonkeyPatch) -> None:
    short = socket.gethostname().split(".")[0]
    assert identity.node_name({}) == short and identity.node_name() == short
    assert identity.node_name({"SLURMD_NODENAME": ""}) == short
    assert identity.node_name({"SLURMD_NODENAME": "node02"}) == "node02"
    outside_slurm.setenv("SLURMD_NODENAME", "node03")
    assert identity.node_name() == "node03"
    outside_slurm.setattr(socket, "gethostname", lambda: "gpu-07.cluster.example")
    assert identity.node_name({}) == "gpu-07"


def test_the_job_id_of_an_array_task_and_of_a_plain_job(outside_slurm: pytest.MonkeyPatch) -> None:
    assert identity.slurm_job_id() is None
    assert identity.marker_prefix(None) == "local-" and identity.job_marker() == f"local-{os.getpid()}"
    outside_slurm.setenv("SLURM_JOB_ID", "4243")
    assert identity.slurm_job_id() == "4243"
    outside_slurm.setenv("SLURM_ARRAY_JOB_ID", "4242")
    assert identity.slurm_job_id() == "4243"  # an array id without a task id: the plain job id
    outside_slurm.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert identity.slurm_job_id() == "4242_3"
    assert identity.job_marker() == f"4242_3-{os.getpid()}" and identity.marker_prefix("4242_3") == "4242_3-"


@pytest.mark.parametrize(("value", "count"), [(None, 0), ("", 0), ("2", 2), ("two", 0)])
def test_the_restart_count(outside_slurm: pytest.MonkeyPatch, value: str | None, count: int) -> None:
    if value is not None:
        outside_slurm.setenv("SLURM_RESTART_COUNT", value)
    assert identity.restart_count() == count


def test_the_ephemeral_range_falls_back_to_linuxs_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ip_local_port_range"
    monkeypatch.setattr(ports_mod, "EPHEMERAL_RANGE", path)
    path.write_text("40000\t60999\n")
    assert ports_mod.ephemeral_low() == 40000
    for broken in ("", "low high\n"):
        path.write_text(broken)
        assert ports_mod.ephemeral_low() == 32_768
    path.unlink()
    assert ports_mod.ephemeral_low() == 32_768


def test_ports_for_ipv6_loopback_and_a_count_below_one() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this host")
    (port,) = ports_mod.free_ports(1, "::1")
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
        sock.bind(("::1", port))  # free on ::1, as chosen
    assert ports_mod.LOWEST <= port < ports_mod.ephemeral_low()
    with pytest.raises(ValueError, match="count must be >= 1, got 0"):
        ports_mod.free_ports(0)


def test_a_range_with_no_room_takes_the_kernels_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports_mod, "ephemeral_low", lambda: ports_mod.LOWEST + 2)  # 2 ports: not more than asked
    chosen = ports_mod.free_ports(2)
    assert len(set(chosen)) == 2 and all(p >= ports_mod.LOWEST + 2 for p in chosen)


@pytest.fixture
def own_handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2, signal.SIGHUP)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR2, signal.SIGHUP])
def test_the_array_task_takes_the_job_signals_first(own_handlers: None, tmp_path: Path, signum: int) -> None:
    assert entry.run_job(str(tmp_path), []) == {}  # no member: nothing run, nothing failed
    with pytest.raises(JobInterrupted) as caught:
        os.kill(os.getpid(), signum)
        pytest.fail("the signal did not end the body")
    assert caught.value.signum == signum


def test_only_the_value_right_after_a_secret_flag_is_hidden() -> None:
    from slurmx.node.redact import REDACTED, redact_argv

    # a secret flag followed by another flag has no value to hide; after a hidden value, positionals are shown
    assert redact_argv(["serve", "--api-key", "--port", "8000", "m"]) == ["serve", "--api-key", "--port", "8000", "m"]
    assert redact_argv(["--api-key", "sk-1", "model", "extra"]) == ["--api-key", REDACTED, "model", "extra"]


def queued_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    """The local key's no-offload points queued in a sweep, served by the project's fake engine and aiperf."""
    group = serving_group(tmp_path, monkeypatch)
    return group.sweep.path, [group.ids[2], group.ids[4]]


def test_a_failed_point_fails_the_array_task_in_slurms_eyes(
    own_handlers: None, outside_slurm: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sweep, ids = queued_sweep(tmp_path, outside_slurm)
    outside_slurm.setenv("CUDA_VISIBLE_DEVICES", "")  # Slurm granted no GPU: preflight fails, no server starts
    with pytest.raises(entry.JobFailed) as caught:
        entry.run_job(str(sweep), ids)
    reason = "preflight: GPUs: the point needs 1, CUDA_VISIBLE_DEVICES shows 0 ()"
    assert str(caught.value) == "; ".join(f"{pid}: {reason}" for pid in ids)


def test_points_a_requeued_job_finished_before_are_done(
    own_handlers: None, outside_slurm: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from slurmx.store.state import PointState, update_state
    from slurmx.store.tree import SweepDir

    sweep, ids = queued_sweep(tmp_path, outside_slurm)

    def done(state: PointState | None) -> PointState:
        assert state is not None
        return state.advance("done")

    for pid in ids:
        update_state(SweepDir(sweep).point(pid).state_json, done)
    outside_slurm.setenv("SLURM_RESTART_COUNT", "1")  # the requeued job finds them done in the run before
    assert entry.run_job(str(sweep), ids) == dict.fromkeys(ids, "done")
