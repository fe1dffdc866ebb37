"""Slurm client commands as argument lists, run with a timeout; failures become one-line errors."""

from __future__ import annotations

import shutil
import subprocess

from slurmx.errors import UserError


class SlurmUnavailable(UserError):
    pass


def run_slurm(argv: list[str], timeout_s: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    if shutil.which(argv[0]) is None:
        raise SlurmUnavailable(
            f"{argv[0]} not found: is this a Slurm login node? (scripts/local-slurm.sh up starts a local cluster)"
        )
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable(f"{argv[0]} did not answer within {timeout_s:.0f} s") from None
    if check and proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip().splitlines()
        raise SlurmUnavailable(f"{' '.join(argv[:2])} failed: {message[-1] if message else f'exit {proc.returncode}'}")
    return proc
