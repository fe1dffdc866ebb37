"""store/atomic.py's dumps, the JSON every slurmx writer goes through (write_json and the commands' --json): a float
that is not finite is null (JSON has no Infinity or NaN, which Python's json writes by default), read back by a
strict parser; a finite value comes back as it went in."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from slurmx.store import atomic
from tests.helpers.strict_json import strict

FINITE: dict[str, Any] = {
    "big": 1.7976931348623157e308,
    "tiny": 5e-324,
    "negative zero": -0.0,
    "third": 1 / 3,
    "int beyond a double": 2**64 + 1,
    "flags": [True, False, None],
    "nested": {"a": [1.5, {"b": -2.25}], "s": "NaN Infinity"},
}


def test_finite_values_come_back_unchanged(tmp_path: Path) -> None:
    assert strict(atomic.dumps(FINITE)) == FINITE
    assert math.copysign(1.0, strict(atomic.dumps(FINITE))["negative zero"]) == -1.0
    atomic.write_json(tmp_path / "f.json", FINITE)
    assert strict((tmp_path / "f.json").read_text()) == FINITE


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_a_float_that_is_not_finite_is_null_at_any_depth(tmp_path: Path, bad: float) -> None:
    data = {"top": bad, "list": [1.0, bad], "tuple": (bad, 2), "deep": {"x": {"y": [bad]}}, "ok": 0.5}
    expected = {"top": None, "list": [1.0, None], "tuple": [None, 2], "deep": {"x": {"y": [None]}}, "ok": 0.5}
    assert strict(atomic.dumps(data, indent=1)) == expected
    atomic.write_json(tmp_path / "r.json", data)
    assert strict((tmp_path / "r.json").read_text()) == expected
    with pytest.raises(ValueError):  # what Python's json would have written instead
        strict(json.dumps(data))
