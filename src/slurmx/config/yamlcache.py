"""The parsed form of YAML files, kept between runs: a repeat `plan` reads a master as marshal data, not YAML.

One cache file per YAML path and load mode holds the digest of the bytes it was parsed from, so any edit (even one
that keeps the size and time) parses anew; a cache that cannot be read or written is only slower, never an error."""

from __future__ import annotations

import functools
import hashlib
import marshal
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from slurmx.paths import cache_dir

# What the parsed form depends on besides the file's bytes: this format, PyYAML, and the builder's own code.
_FORMAT = 1
_BUILDER = Path(__file__).with_name("yamlfile.py")

Parsed = tuple[Any, list[tuple[Any, dict[Any, int]]], list[str]]  # data, (container, its lines) pairs, warnings


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


@functools.cache  # once a process: every file of a run shares it
def _version() -> bytes:
    try:
        builder = _BUILDER.read_bytes()
    except OSError:
        builder = b""
    return _digest(f"{_FORMAT}:{yaml.__version__}".encode(), builder)


def _slot(path: Path, mode: str) -> Path | None:
    root = cache_dir()
    if root is None:
        return None
    # the path as given too: a duplicate-key warning names the file as the user wrote it
    name = _digest(_version(), mode.encode(), os.fsencode(path.resolve()), os.fsencode(path)).hex()
    return root / "yaml" / f"{name}.marshal"


def load(path: Path, mode: str, text: bytes) -> Parsed | None:
    """The parsed form of `text` (the bytes of `path` read now), or None when no cache entry matches them."""
    slot = _slot(path, mode)
    if slot is None:
        return None
    try:
        blob = slot.read_bytes()
    except OSError:
        return None
    if blob[:20] != _digest(text):
        return None
    try:
        parsed = marshal.loads(blob[20:])
    except (EOFError, ValueError, TypeError):
        return None  # a torn or foreign file: parse anew, and the store below replaces it
    if not (isinstance(parsed, tuple) and len(parsed) == 3):
        return None
    return parsed  # the shape store() wrote; checked above as far as marshal allows


def store(path: Path, mode: str, text: bytes, parsed: Parsed) -> None:
    """Keep `parsed` for the next run; silently nothing where it cannot be marshalled or written."""
    slot = _slot(path, mode)
    if slot is None:
        return
    try:
        blob = marshal.dumps(parsed)
    except ValueError:
        return  # a value marshal cannot hold (a YAML timestamp is a datetime): parsed each time
    try:
        slot.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=slot.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(_digest(text) + blob)
            os.replace(tmp, slot)  # readers see the old entry or the whole new one
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return
