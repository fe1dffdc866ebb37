"""What `collect --index` printed, kept in the index and printed again when nothing it depends on changed.

A whole process that finds the tree as its last call left it (the same sweeps, their index state, the options,
the terminal) prints the recorded bytes instead of reading the rows back, de-duplicating, ranking and formatting
them again: issue 27's goal for a large tree once indexed. Only the standard library here: the replay path must
import little.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

STDOUT, STDERR = 1, 2
# a larger output (e.g. --json of a huge tree) is not kept: compressing and storing it would cost more than it saves
MAX_CHARS = 64 * 1024 * 1024
# what rich reads from the environment to choose colours and widths: a different value prints differently
_ENV = ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM", "COLORTERM", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


class _Tap:
    """A text stream that records what is written to it, and passes it on to `real` unless silent; everything
    else (isatty, encoding, fileno) is the real stream's, so rich renders exactly as it would have."""

    def __init__(self, real: TextIO, fd: int, chunks: list[tuple[int, str]], silent: bool) -> None:
        self._real, self._fd, self._chunks, self._silent = real, fd, chunks, silent

    def write(self, text: str) -> int:
        if text:
            self._chunks.append((self._fd, text))
        return len(text) if self._silent else self._real.write(text)

    def flush(self) -> None:
        if not self._silent:
            self._real.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@contextmanager
def recording(chunks: list[tuple[int, str]], *, silent: bool = False) -> Iterator[None]:
    """sys.stdout and sys.stderr record into `chunks` (and still print, unless silent) within the block."""
    out, err = sys.stdout, sys.stderr
    sys.stdout = _Tap(out, STDOUT, chunks, silent)
    sys.stderr = _Tap(err, STDERR, chunks, silent)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def _code() -> list[tuple[str, int, int]]:
    """The code that computes and prints collect's text (a checkout edited without a new version prints anew)."""
    package = Path(__file__).resolve().parents[1]
    found = [*package.glob("collect/*.py"), *package.glob("history/*.py"), package / "commands" / "collect.py"]
    out = []
    for path in sorted(found):
        st = path.stat()
        out.append((path.name, st.st_mtime_ns, st.st_size))
    return out


def key(options: list[object]) -> str:
    """The options, the code, and what of the terminal and environment the printed text depends on."""
    tty = (sys.stdout.isatty(), sys.stderr.isatty())
    size = tuple(shutil.get_terminal_size()) if any(tty) else None
    env = [os.environ.get(name) for name in _ENV]
    text = json.dumps([[str(o) for o in options], _code(), tty, size, env, os.getcwd()])
    return hashlib.sha256(text.encode()).hexdigest()


def encode(chunks: list[tuple[int, str]]) -> bytes | None:
    """The recorded output, compressed; None when it is too large to be worth keeping."""
    if sum(len(text) for _, text in chunks) > MAX_CHARS:
        return None
    merged: list[list[Any]] = []
    for fd, text in chunks:
        if merged and merged[-1][0] == fd:
            merged[-1][1] += text
        else:
            merged.append([fd, text])
    return zlib.compress(json.dumps(merged).encode("utf-8", "surrogatepass"), 1)


def play(blob: bytes) -> None:
    """Print the recorded output again, each stream's text in the order it was written."""
    merged = json.loads(zlib.decompress(blob).decode("utf-8", "surrogatepass"))
    previous = None
    for fd, text in merged:
        stream = sys.stdout if fd == STDOUT else sys.stderr
        if previous is not None and previous is not stream:
            previous.flush()
        stream.write(text)
        previous = stream
    sys.stdout.flush()
    sys.stderr.flush()
