"""A strict JSON parser for tests of what slurmx writes: Python's json reads `Infinity`, `-Infinity` and `NaN`, which
are not JSON (no other parser takes them); this one refuses them."""

from __future__ import annotations

import json
from typing import Any


def strict(text: str) -> Any:
    """json.loads refusing the bare words Python's json writes for floats that are not finite."""

    def refuse(word: str) -> Any:
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)
