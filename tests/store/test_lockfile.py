"""lock.json as a typed record: written whole by the node, read back equal; a broken file is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmx.config.clusters import RuntimeProfile
from slurmx.errors import UserError
from slurmx.process import Process
from slurmx.runtimes.venv import VenvRuntime
from slurmx.store.lockfile import ProvisionStep, read_lock


def test_the_node_writes_what_reads_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurmx.node import lock as run_lock

    monkeypatch.setenv("SLURMD_NODENAME", "node07")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    runtime = VenvRuntime.from_profile(RuntimeProfile(kind="venv"), None)
    shared = run_lock.node_lock("repo/img@sha256:abc", runtime, {"vllm": "0.32.0"}, {"aiperf": "0.13.0"}, ["H200"])
    shared = shared.model_copy(
        update={"numa": {"policy": "bind"}, "provision": [ProvisionStep(step="s", argv=["a"], result="ok")]}
    )
    engine = Process("engine", ["vllm", "serve", "m"], {"PYTHONHASHSEED": "0"})
    path = tmp_path / "lock.json"
    run_lock.write_lock(path, "p1", shared, [engine])
    raw = json.loads(path.read_text())
    assert raw["node"] == "node07" and raw["cuda_visible_devices"] == "2,3" and raw["image_digest"] == "sha256:abc"
    assert raw["versions"] == {"engine": {"vllm": "0.32.0"}, "aiperf": {"aiperf": "0.13.0"}}
    assert set(raw["processes"]["engine"]) == {"argv_sha256", "env_sha256"} and raw["numa"] == {"policy": "bind"}
    lock = read_lock(path)
    assert lock.point_id == "p1" and lock.versions.engine == {"vllm": "0.32.0"} and lock.provision[0].result == "ok"
    assert lock.model_dump(mode="json") == raw


def test_a_lock_that_does_not_parse_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "lock.json"
    path.write_text('{"point_id": "p1"}')
    with pytest.raises(UserError) as caught:
        read_lock(path)
    assert str(caught.value).startswith(f"{path}: not a readable lock.json: ") and "\n" not in str(caught.value)


def test_each_unreadable_lock_says_why_in_its_first_line(tmp_path: Path) -> None:
    path = tmp_path / "lock.json"
    with pytest.raises(UserError) as caught:
        read_lock(path)
    assert str(caught.value) == f"{path}: not a readable lock.json: [Errno 2] No such file or directory: '{path}'"
    path.write_text('{"point_id": "p1"}')  # image, runtime, node, slurmx_version and written_at missing
    with pytest.raises(UserError) as caught:
        read_lock(path)
    assert str(caught.value) == f"{path}: not a readable lock.json: 5 validation errors for LockFile"
