"""Command-line flags as data: a mapping names each flag once; rendering turns it into argv."""

from __future__ import annotations

import json

FlagValue = bool | int | float | str | dict[str, object] | list[object]
Flags = dict[str, FlagValue]


def render_flags(flags: Flags) -> list[str]:
    """Mapping -> argv: true is a bare flag, false is left out, dicts and lists become compact JSON."""
    argv: list[str] = []
    for name, value in flags.items():
        if value is True:
            argv.append(name)
        elif value is False:
            continue
        elif isinstance(value, (dict, list)):
            argv += [name, json.dumps(value, separators=(",", ":"))]
        else:
            argv += [name, str(value)]
    return argv
