"""Errors a user can cause: each renders as one line and exits 2."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class UserError(Exception):
    """Bad input: printed as one line, exit code 2, no traceback."""

    exit_code = 2


@dataclass
class ConfigError(UserError):
    """A problem in a config file, located by file, line and field path."""

    path: Path | str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else f"{self.path}"
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.message}"
