"""slurm_ready, the check every cluster test starts with, against stand-in `sinfo` programs on PATH (real processes,
no cluster needed): an answer with a node up, one without, a failing client and one that never answers, which is
given up after the timeout with one line, every process it started ended."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.helpers.waiting import until
from tests.slurm.conftest import slurm_ready


def _sinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "sinfo").write_text(f"#!/bin/sh\n{body}\n")
    (bin_dir / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def _running(pid: int) -> bool:
    """The process exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_a_node_up_is_ready_and_no_node_up_says_what_sinfo_saw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _sinfo(tmp_path, monkeypatch, "echo idle; echo down")
    assert slurm_ready() is None
    _sinfo(tmp_path, monkeypatch, "echo down; echo drain; echo down")
    assert slurm_ready() == "no node is up (sinfo: down drain)"
    _sinfo(tmp_path, monkeypatch, "true")
    assert slurm_ready() == "no node is up (sinfo: no nodes)"


def test_a_failing_or_missing_sinfo_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _sinfo(tmp_path, monkeypatch, "echo 'sinfo: error: Unable to contact slurm controller' >&2; exit 1")
    assert slurm_ready() == "sinfo -h failed: sinfo: error: Unable to contact slurm controller"
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert slurm_ready() == (
        "sinfo not found: is this a Slurm login node? (scripts/local-slurm.sh up starts a local cluster)"
    )


def test_an_sinfo_that_hangs_is_given_up_after_the_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pids = tmp_path / "pids"
    _sinfo(tmp_path, monkeypatch, f"sleep 60 &\necho $$ $! > {pids}\nwait")
    start = time.monotonic()
    assert slurm_ready(timeout_s=1.2) == "sinfo did not answer within 1 s"
    assert time.monotonic() - start < 10  # not the 60 s the stand-in would take
    for pid in map(int, pids.read_text().split()):  # the script and the sleep it started
        until(lambda pid=pid: not _running(pid), bound_s=10)
    assert os.environ["PATH"].startswith(str(tmp_path))
