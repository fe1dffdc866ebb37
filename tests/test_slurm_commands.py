"""run_slurm: a Slurm client run with a timeout, its failure one line. Real processes stand in for the clients
(run_slurm runs whatever argv it is given): sh for an answer and an exit status, sleep for a client that hangs,
and the stand-in sacct replaying the real sacct's answer with accounting down (tests/data/slurm)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from slurmx.errors import UserError
from slurmx.slurm.commands import SlurmUnavailable, run_slurm
from tests.helpers.slurm_replay import install
from tests.helpers.waiting import until


def test_an_answer_is_its_stdout_and_exit_status() -> None:
    proc = run_slurm(["sh", "-c", "echo 'Submitted batch job 98'; echo note >&2"])
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "Submitted batch job 98\n", "note\n")
    # unchecked, a failing client's answer comes back as it is
    proc = run_slurm(["sh", "-c", "echo half; exit 1"], check=False)
    assert (proc.returncode, proc.stdout) == (1, "half\n")


def test_a_failure_is_one_line_the_clients_last_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the real sacct with slurmdbd down prints three error lines and exits 1: the last one says why
    monkeypatch.setenv("PATH", f"{install(tmp_path / 'bin', {('sacct', '7'): 'sacct-accounting-down'})}:/usr/bin:/bin")
    with pytest.raises(SlurmUnavailable) as caught:
        run_slurm(["sacct", "-n", "-P", "-X", "--format", "JobID,State,NodeList,Elapsed,ExitCode,Reason", "-j", "7"])
    assert str(caught.value) == "sacct -n failed: sacct: error: Problem talking to the database: Connection refused"
    assert isinstance(caught.value, UserError)  # one line and exit 2, not a traceback
    # without stderr the last line of stdout, and with nothing at all the exit status
    with pytest.raises(SlurmUnavailable, match=r"^sh -c failed: second$"):
        run_slurm(["sh", "-c", "echo first; echo second; exit 4"])
    with pytest.raises(SlurmUnavailable, match=r"^sh -c failed: exit 4$"):
        run_slurm(["sh", "-c", "exit 4"])
    with pytest.raises(SlurmUnavailable, match=r"^sh -c failed: exit 4$"):
        run_slurm(["sh", "-c", "echo '  '; exit 4"])  # blank words are no words


def test_a_client_that_is_not_installed_says_where_slurm_comes_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmUnavailable) as caught:
        run_slurm(["squeue", "-h"])
    assert str(caught.value) == (
        "squeue not found: is this a Slurm login node? (scripts/local-slurm.sh up starts a local cluster)"
    )


def test_a_client_that_hangs_is_given_up_after_the_timeout() -> None:
    assert shutil.which("sleep")
    start = time.monotonic()
    with pytest.raises(SlurmUnavailable) as caught:
        run_slurm(["sleep", "6"], timeout_s=1.4)
    assert str(caught.value) == "sleep did not answer within 1 s"
    assert 1.3 < time.monotonic() - start < 5  # not the 6 s the client would take
    assert caught.value.__cause__ is None and caught.value.__suppress_context__  # one line, no chained timeout


def test_a_client_that_hangs_is_ended_with_every_process_it_started(tmp_path: Path) -> None:
    """A client that is a script (a site's wrapper) ends with its children: none is left running after the call."""
    pids = tmp_path / "pids"
    with pytest.raises(SlurmUnavailable, match=r"^sh did not answer within 1 s$"):
        run_slurm(["sh", "-c", f"sleep 60 & echo $! > {pids}; sleep 60"], timeout_s=1.2)
    child = int(pids.read_text())
    until(lambda: not _running(child), bound_s=10)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
