"""The pyxis preamble's image import, run for real in bash with recording stand-ins for enroot and
unsquashfs: a missing or torn squash file is (re)imported under a temporary name, a whole one is reused."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from slurmx.runtimes.pyxis import PyxisRuntime

IMAGE = "vllm/vllm-openai:v1@sha256:abc"
# enroot stand-in: writes a squashfs magic number to -o's file (or a torn file when told to die midway)
ENROOT = """#!/bin/sh
echo "enroot $*" >> "$STANDIN_LOG"
out=$3
if [ "${STANDIN_ENROOT_DIES:-0}" = 1 ]; then printf 'hs' > "$out"; exit 9; fi
printf 'hsqs-image' > "$out"
"""
# unsquashfs stand-in: -s succeeds only on a file that starts with squashfs's magic
UNSQUASHFS = """#!/bin/sh
[ "$(head -c 4 "$2" 2>/dev/null)" = hsqs ]
"""


def _run(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("enroot", ENROOT), ("unsquashfs", UNSQUASHFS)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "standin.log"
    log.unlink(missing_ok=True)
    runtime = PyxisRuntime(image=IMAGE, squash_dir=str(tmp_path / "squash"))
    script = "\n".join(runtime.setup_lines()) + "\necho setup-done\n"
    full_env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STANDIN_LOG": str(log),
                "SLURM_JOB_ID": "77", **env}  # fmt: skip
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=full_env, timeout=30, check=False)
    return proc, log.read_text().splitlines() if log.exists() else []


def test_a_missing_image_is_imported_to_a_temporary_name_then_renamed(tmp_path: Path) -> None:
    proc, calls = _run(tmp_path)
    squash = Path(PyxisRuntime(image=IMAGE, squash_dir=str(tmp_path / "squash")).squash_path())
    assert proc.returncode == 0 and proc.stdout.strip() == "setup-done", proc.stderr
    assert calls == [f"enroot import -o {squash}.partial.77 docker://{IMAGE}"]
    assert squash.read_text() == "hsqs-image" and not Path(f"{squash}.partial.77").exists()


def test_a_whole_squash_file_is_reused_and_a_torn_one_imported_again(tmp_path: Path) -> None:
    _run(tmp_path)
    proc, calls = _run(tmp_path)
    assert proc.returncode == 0 and calls == []  # reused: no import
    squash = Path(PyxisRuntime(image=IMAGE, squash_dir=str(tmp_path / "squash")).squash_path())
    squash.write_text("hs")  # what an import killed mid-write left under the final name (older slurmx, by hand)
    proc, calls = _run(tmp_path)
    assert proc.returncode == 0 and len(calls) == 1 and squash.read_text() == "hsqs-image"


def test_a_failed_import_ends_the_job_before_any_process_starts(tmp_path: Path) -> None:
    proc, calls = _run(tmp_path, STANDIN_ENROOT_DIES="1")
    squash = Path(PyxisRuntime(image=IMAGE, squash_dir=str(tmp_path / "squash")).squash_path())
    assert proc.returncode == 1 and "setup-done" not in proc.stdout
    assert "did not import to a valid squash file" in proc.stderr
    assert not squash.exists()  # the torn partial file never takes the final name


def test_every_container_step_runs_on_the_node_whose_task_starts_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # a step without a node list lands on the allocation's first node: another node's ranks would run on the head
    monkeypatch.setenv("SLURMD_NODENAME", "node07")
    argv = PyxisRuntime(image=IMAGE).wrap(["vllm", "serve"], "engine")
    assert argv[0] == "srun" and "--nodelist=node07" in argv and argv[-2:] == ["vllm", "serve"]
    monkeypatch.delenv("SLURMD_NODENAME")
    assert "--nodelist=$SLURMD_NODENAME" in PyxisRuntime(image=IMAGE).wrap(["x"], "x")  # render: read on the node
