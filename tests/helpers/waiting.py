"""One bounded poll for the tests that wait on a condition instead of sleeping a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(check: Callable[[], T], bound_s: float = 30.0, poll_s: float = 0.02) -> T:
    """check()'s first truthy answer, asked every poll_s; an AssertionError once bound_s has passed without one."""
    deadline = time.monotonic() + bound_s
    while not (answer := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {bound_s} s")
        time.sleep(poll_s)
    return answer
