"""lock.json's probes with real interpreters and a stand-in nvidia-smi: the versions an environment reports,
its GPU models, and the digests and fields the lock records."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import slurmx
from slurmx.node import lock as run_lock
from slurmx.node.procscan import kill_survivors
from slurmx.node.supervisor import Supervisor
from slurmx.process import Process
from slurmx.runtimes.venv import VenvRuntime
from slurmx.store import lockfile

H200 = Path(__file__).resolve().parents[1] / "data" / "gpu" / "h200"


@pytest.fixture
def sup(tmp_path: Path) -> Iterator[Supervisor]:
    marker = f"lock-{uuid.uuid4().hex[:10]}"
    with Supervisor(tmp_path / "run", marker, grace_s=1) as supervisor:
        yield supervisor
    kill_survivors(marker)


def runtime(tmp_path: Path) -> VenvRuntime:
    return VenvRuntime(
        engine_python=sys.executable, lmcache_bin="lmcache", aiperf_bin=sys.executable, model_root=str(tmp_path)
    )


def script(path: Path, body: str) -> str:
    path.write_text(body)
    path.chmod(0o755)
    return str(path)


def test_the_environment_reports_what_is_installed(sup: Supervisor, tmp_path: Path) -> None:
    found = run_lock.probe_versions(sup, runtime(tmp_path), "probe", sys.executable, ("pytest", "no-such-dist-xyz"))
    assert found == {"pytest": pytest.__version__}  # the missing one is left out


def test_the_probe_runs_unbuffered(sup: Supervisor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    python = script(
        tmp_path / "python", f'#!/bin/sh\necho "unbuffered=$PYTHONUNBUFFERED" >&2\nexec {sys.executable} "$@"\n'
    )
    assert run_lock.probe_versions(sup, runtime(tmp_path), "probe", python, ("pytest",)) == {
        "pytest": pytest.__version__
    }
    assert "unbuffered=1" in (tmp_path / "run" / "logs" / "probe.log").read_text()


def test_the_versions_line_is_found_under_later_output(sup: Supervisor, tmp_path: Path) -> None:
    # an interpreter whose environment prints after the probe (a site hook's warning, then a JSON list)
    python = script(
        tmp_path / "python",
        f'#!/bin/sh\n{sys.executable} "$@"\necho \'["not", "versions"]\'\necho "warning: a trailing line"\n',
    )
    found = run_lock.probe_versions(sup, runtime(tmp_path), "probe", python, ("pytest",))
    assert found == {"pytest": pytest.__version__}


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ('echo \'{"pytest": "1"}\'\nexit 1', "a failed probe"),
        ("echo 'no json here'", "no versions line"),
        ("echo '[1, 2]'", "JSON, but not a mapping"),
    ],
)
def test_a_probe_without_an_answer_leaves_the_versions_unknown(
    sup: Supervisor, tmp_path: Path, body: str, why: str
) -> None:
    python = script(tmp_path / "python", f"#!/bin/sh\n{body}\n")
    assert run_lock.probe_versions(sup, runtime(tmp_path), "probe", python, ("pytest",)) == {}, why


def test_a_probe_that_hangs_leaves_the_versions_unknown(
    sup: Supervisor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_lock, "PROBE_TIMEOUT_S", 0.2)
    python = script(tmp_path / "python", "#!/bin/sh\nexec sleep 30\n")
    assert run_lock.probe_versions(sup, runtime(tmp_path), "probe", python, ("pytest",)) == {}


def test_gpu_models_from_the_nodes_nvidia_smi(sup: Supervisor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # `nvidia-smi --query-gpu=name --format=csv,noheader` on the H200: its name, as nvidia-smi -L shows it
    script(
        bin_dir / "nvidia-smi",
        '#!/bin/sh\n[ "$1 $2" = "--query-gpu=name --format=csv,noheader" ] || exit 3\necho "NVIDIA H200"\necho\n',
    )
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert run_lock.gpu_models(sup) == ["NVIDIA H200"]
    assert "NVIDIA H200" in (H200 / "nvidia-smi-L.txt").read_text()


def test_gpu_models_unknown_when_nvidia_smi_fails_or_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script(bin_dir / "nvidia-smi", "#!/bin/sh\necho 'NVIDIA-SMI has failed'\nexit 9\n")
    monkeypatch.setenv("PATH", str(bin_dir))
    marker = f"lock-{uuid.uuid4().hex[:10]}"
    with Supervisor(tmp_path / "a", marker, grace_s=1) as sup:
        assert run_lock.gpu_models(sup) == []
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    with Supervisor(tmp_path / "c", marker, grace_s=1) as sup:
        assert run_lock.gpu_models(sup) == [] and sup.processes == ()


def test_interpreter_of_a_console_script(tmp_path: Path) -> None:
    assert run_lock.interpreter_of(script(tmp_path / "aiperf", "#!/opt/venv/bin/python3.12 -u\nimport x\n")) == (
        "/opt/venv/bin/python3.12"
    )
    assert run_lock.interpreter_of(script(tmp_path / "sh", "#!/bin/sh\nexec x\n")) == "python3"
    assert run_lock.interpreter_of(script(tmp_path / "plain", "python is mentioned, no shebang\n")) == "python3"
    assert run_lock.interpreter_of(str(tmp_path / "missing")) == "python3"


def test_image_digest_and_process_digests() -> None:
    assert run_lock.image_digest("nvcr.io/nvidia/vllm@sha256:ab12 extra") == "sha256:ab12"
    assert run_lock.image_digest("vllm/vllm-openai:v0.32.0") is None and run_lock.image_digest(None) is None
    # sha256 of the canonical JSON, by `printf '%s' '{"a":1,"b":[2]}' | sha256sum`
    assert run_lock.digest({"b": [2], "a": 1}) == "0855bfc20eb6cfaa4be7d6b510c63dd22997718bddadcb1a4915cec3a16145b9"
    engine = Process("engine", ["vllm", "serve", "--port", "8000"], {"b": [2], "a": 1})  # type: ignore[dict-item]  # any JSON
    assert run_lock.process_digests([engine]) == {
        "engine": {
            # printf '%s' '["vllm","serve","--port","8000"]' | sha256sum
            "argv_sha256": "00cd2e2e1ce55f93cc7966324dbe242170c82aa8c83aa766a8796c3e043ebb74",
            "env_sha256": "0855bfc20eb6cfaa4be7d6b510c63dd22997718bddadcb1a4915cec3a16145b9",
        }
    }


def test_the_lock_written_for_a_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-node-07")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    shared = run_lock.node_lock(
        "repo@sha256:ff00", runtime(tmp_path), {"vllm": "0.32.0"}, {"aiperf": "0.4.0"}, ["NVIDIA H200"]
    )
    path = tmp_path / "lock.json"
    run_lock.write_lock(path, "5a3c0ffee123", shared, [Process("engine", ["vllm"], {})])
    lock = lockfile.read_lock(path)
    assert (lock.image, lock.image_digest, lock.runtime, lock.node) == (
        "repo@sha256:ff00",
        "sha256:ff00",
        "venv",
        "gpu-node-07",
    )
    assert lock.versions.engine == {"vllm": "0.32.0"} and lock.versions.aiperf == {"aiperf": "0.4.0"}
    assert (lock.gpu_models, lock.cuda_visible_devices, lock.slurmx_version) == (
        ["NVIDIA H200"],
        "2,3",
        slurmx.__version__,
    )
    assert lock.point_id == "5a3c0ffee123" and set(lock.processes) == {"engine"}


def test_the_gpu_models_query_is_recorded_under_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script(bin_dir / "nvidia-smi", '#!/bin/sh\necho "NVIDIA H200"\n')
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with Supervisor(tmp_path / "run", f"lock-{uuid.uuid4().hex[:10]}", grace_s=1) as sup:
        assert run_lock.gpu_models(sup) == ["NVIDIA H200"]
    assert (tmp_path / "run" / "commands" / "gpu-models.txt").is_file()
    assert (tmp_path / "run" / "logs" / "gpu-models.log").read_text() == "NVIDIA H200\n"
