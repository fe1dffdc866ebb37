"""kill_survivors from another process, free ports, and secret redaction."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import uuid

import pytest

from slurmx.node import ports as ports_mod
from slurmx.node.identity import MARKER_ENV
from slurmx.node.ports import free_port, free_ports
from slurmx.node.procscan import find_job_processes, is_running, kill_survivors
from slurmx.node.redact import REDACTED, SECRET_WORDS, is_secret_name, redact_argv, redact_env

PY = sys.executable
SLEEP = [PY, "-c", "import time; time.sleep(60)"]


def test_kill_survivors_finds_a_detached_process_by_marker() -> None:
    marker = f"test-{uuid.uuid4().hex[:12]}"
    detached = subprocess.Popen(SLEEP, env={**os.environ, MARKER_ENV: marker}, start_new_session=True)
    bystander = subprocess.Popen(SLEEP, env={**os.environ, MARKER_ENV: marker + "-other"}, start_new_session=True)
    try:
        assert [p.pid for p in find_job_processes(marker)] == [detached.pid]
        killed = kill_survivors(marker)
        assert [p.pid for p in killed] == [detached.pid]
        assert detached.wait(timeout=5) == -9
        assert is_running(bystander.pid)  # a marker is matched exactly, not as a prefix
    finally:
        bystander.kill()
        bystander.wait()


def test_kill_survivors_spares_the_caller_and_its_parents() -> None:
    marker = f"test-{uuid.uuid4().hex[:12]}"
    env = {**os.environ, MARKER_ENV: marker}
    sibling = subprocess.Popen(SLEEP, env=env, start_new_session=True)
    # `slurmx cancel` or the job body may itself carry the marker; it must not kill itself
    caller = (
        f"from slurmx.node.procscan import kill_survivors; print(sorted(p.pid for p in kill_survivors({marker!r})))"
    )
    shell = subprocess.run(
        ["sh", "-c", f"{shlex.join([PY, '-c', caller])}; echo shell-alive"],
        env=env,
        capture_output=True,
        text=True,
        timeout=15,
    )
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.splitlines() == [str([sibling.pid]), "shell-alive"]
    assert sibling.wait(timeout=5) == -9


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    """Outgoing connections take their source ports from the ephemeral range: a port chosen there can be
    taken before its server binds it (a multinode head's RPC port was, by another rank's connection)."""
    ports = free_ports(8)
    assert len(set(ports)) == 8
    assert all(ports_mod.LOWEST <= p < ports_mod.ephemeral_low() for p in ports), ports
    for port in [*ports, free_port()]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_taken_port_is_never_chosen_and_the_kernel_fills_in_when_the_range_is_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        monkeypatch.setattr(ports_mod, "LOWEST", taken)
        monkeypatch.setattr(ports_mod, "ephemeral_low", lambda: taken + 2)  # room for one: taken, taken + 1
        assert free_ports(1) == [taken + 1]  # the range's only free port (taken + 1 is in the kernel's range)
        three = free_ports(3)  # more than the range holds: the kernel gives the rest
        assert taken not in three and len(set(three)) == 3


def test_secret_names_are_matched_by_whole_word() -> None:
    secret = [
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "GOOGLE_CREDENTIALS",
        "--api-key",
        "OPENAI_API_KEY",
    ]
    plain = [
        "MAX_NUM_BATCHED_TOKENS",
        "--max-num-batched-tokens",
        "PYTHONHASHSEED",
        "KEYBOARD",
        "--tool-call-parser",
        "SLURMX_JOB_MARKER",
    ]
    assert [n for n in secret if not is_secret_name(n)] == []
    assert [n for n in plain if is_secret_name(n)] == []


def test_redaction_of_env_and_argv() -> None:
    assert redact_env({"HF_TOKEN": "hf_x", "VLLM_USE_V1": "1"}) == {"HF_TOKEN": REDACTED, "VLLM_USE_V1": "1"}
    argv = [
        "vllm",
        "serve",
        "m",
        "--api-key",
        "sk-1",
        "--hf-token=hf_2",
        "--port",
        "8000",
        "--max-num-batched-tokens",
        "8192",
    ]
    assert redact_argv(argv) == [
        "vllm",
        "serve",
        "m",
        "--api-key",
        REDACTED,
        f"--hf-token={REDACTED}",
        "--port",
        "8000",
        "--max-num-batched-tokens",
        "8192",
    ]


# Each of the eight secret words alone in a name (no other secret word beside it), and a name holding its letters
# inside a longer word, which the whole-word rule leaves visible.
EACH_WORD = [
    ("TOKEN", "HF_TOKEN", "TOKENIZERS_PARALLELISM"),
    ("SECRET", "CLIENT_SECRET", "SECRETARY_NAME"),
    ("PASSWORD", "DB_PASSWORD", "PASSWORDLESS_LOGIN"),
    ("PASSWD", "MYSQL_PASSWD", "PASSWDQC_MODE"),
    ("KEY", "SSH_KEY", "MONKEY_PATCH"),
    ("APIKEY", "OPENAI_APIKEY", "APIKEYRING_DIR"),
    ("CREDENTIAL", "AZURE_CREDENTIAL", "CREDENTIALED_USERS"),
    ("CREDENTIALS", "GOOGLE_APPLICATION_CREDENTIALS", "NOCREDENTIALS_MODE"),
]


def test_the_words_under_test_are_the_eight_secret_words() -> None:
    assert sorted(word for word, _, _ in EACH_WORD) == sorted(SECRET_WORDS) and len(SECRET_WORDS) == 8


@pytest.mark.parametrize(("word", "secret", "plain"), EACH_WORD)
def test_each_secret_word_alone_is_redacted_and_its_letters_inside_a_word_are_not(
    word: str, secret: str, plain: str
) -> None:
    assert [w for w, _, _ in EACH_WORD if w in secret.split("_")] == [word]  # the one secret word of the name
    assert redact_env({secret: "s3cr3t", plain: "visible"}) == {secret: REDACTED, plain: "visible"}
    assert redact_env({secret.lower(): "s3cr3t"}) == {secret.lower(): REDACTED}  # any case
    flag, other = "--" + secret.lower().replace("_", "-"), "--" + plain.lower().replace("_", "-")
    assert redact_argv(["x", flag, "s3cr3t", f"{flag}=s3cr3t", other, "visible", f"{other}=visible"]) == [
        "x", flag, REDACTED, f"{flag}={REDACTED}", other, "visible", f"{other}=visible"
    ]  # fmt: skip
