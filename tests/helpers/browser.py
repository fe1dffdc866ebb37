"""Debian's Chromium, headless, for the tests that open a written page: a missing browser skips, except under
CI=true, where scripts/test installs it and its absence is a failure."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("chromium is not installed (scripts/test installs it with apt-get)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def browse(chromium: str, width: int, height: int, *argv: str) -> subprocess.CompletedProcess[str]:
    """Chromium headless at that window size, offline, with `argv` (--dump-dom URL, --screenshot=PATH URL)."""
    return subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--disable-extensions", "--disable-background-networking", f"--window-size={width},{height}", *argv],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
