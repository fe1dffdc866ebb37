"""Secrets out of commands/*.txt: env names and CLI flags whose words name a secret."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

REDACTED = "***"
# whole words only: HF_TOKEN and --api-key are secrets, MAX_NUM_BATCHED_TOKENS and --block-size are not
SECRET_WORDS = frozenset({"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "APIKEY", "CREDENTIAL", "CREDENTIALS"})
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+")


def is_secret_name(name: str) -> bool:
    return any(word.upper() in SECRET_WORDS for word in _WORD_SPLIT.split(name) if word)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {name: REDACTED if is_secret_name(name) else value for name, value in env.items()}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """Hide the value of `--secret-flag VALUE` and `--secret-flag=VALUE`; everything else verbatim."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        flag, eq, _ = arg.partition("=")
        if flag.startswith("-") and is_secret_name(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out
