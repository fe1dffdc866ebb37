"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from slurmx.errors import UserError


class StorageError(UserError):
    """The results tree could not be written (disk full, read-only, no permission): one line, exit 1."""

    exit_code = 1

    def __init__(self, path: Path, exc: OSError) -> None:
        super().__init__(f"{path}: cannot write: {exc.strerror or exc}")
        self.path = path
        self.errno = exc.errno


def write_text(path: Path, text: str) -> None:
    """Write to a temporary name beside `path`, fsync, rename, fsync the directory; on any failure before the
    rename the old file stays whole."""
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, 0o644)  # a shared results tree: readable by every user, like a plain open()
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        _discard(tmp)
        raise StorageError(path, exc) from None
    except BaseException:
        _discard(tmp)
        raise


def _fsync_dir(directory: Path) -> None:
    """A rename is on disk only once its directory is: until then a crash can bring back the old file."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # EINVAL: a filesystem that cannot sync a directory (nothing more to do)
            raise
    finally:
        os.close(fd)


def _discard(tmp: str | None) -> None:
    if tmp is not None:
        with contextlib.suppress(OSError):  # a read-only or vanished directory: there is nothing to clean
            Path(tmp).unlink(missing_ok=True)


def finite(value: Any) -> Any:
    """`value` with every float that is not finite, at any depth, replaced by None (JSON has no Infinity or NaN);
    every other value as it is (a tuple becomes the list JSON writes for it)."""
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def dumps(data: Any, **options: Any) -> str:
    """JSON text as every JSON slurmx writes (files and --json output): a float that is not finite is null, never
    Python's `Infinity`/`NaN`, which no JSON parser but Python's reads. json's C encoder first; the walk only when
    it meets such a float."""
    try:
        return json.dumps(data, allow_nan=False, **options)
    except ValueError:  # a float that is not finite: nulled, then written
        return json.dumps(finite(data), allow_nan=False, **options)


def write_json(path: Path, data: Any) -> None:
    write_text(path, dumps(data, indent=2, sort_keys=False) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
