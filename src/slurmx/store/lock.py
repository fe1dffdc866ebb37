"""An advisory lock file in the results tree, so two submits of one key submit one set of jobs."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from slurmx.errors import UserError


@contextmanager
def locked(path: Path, timeout_s: float = 120.0) -> Iterator[None]:
    """Hold an exclusive flock on `path`; wait up to `timeout_s` for another holder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UserError(
                        f"{path}: another slurmx submit holds this lock for over {timeout_s:.0f} s"
                    ) from None
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)  # closing releases the flock
