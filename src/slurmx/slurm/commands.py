"""Slurm client commands as argument lists, run with a timeout; failures become one-line errors."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess

from slurmx.errors import UserError


class SlurmUnavailable(UserError):
    pass


def run_slurm(argv: list[str], timeout_s: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    if shutil.which(argv[0]) is None:
        raise SlurmUnavailable(
            f"{argv[0]} not found: is this a Slurm login node? (scripts/local-slurm.sh up starts a local cluster)"
        )
    # its own session: a client that does not answer is ended with every process it started (a site's wrapper
    # script, a stand-in), not only the one we started
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as child:
        try:
            stdout, stderr = child.communicate(timeout=timeout_s)
        except BaseException as exc:  # the timeout, or an interrupt: no client outlives the call
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            if isinstance(exc, subprocess.TimeoutExpired):
                raise SlurmUnavailable(f"{argv[0]} did not answer within {timeout_s:.0f} s") from None
            raise
    proc = subprocess.CompletedProcess(argv, child.returncode, stdout, stderr)
    if check and proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip().splitlines()
        raise SlurmUnavailable(f"{' '.join(argv[:2])} failed: {message[-1] if message else f'exit {proc.returncode}'}")
    return proc
