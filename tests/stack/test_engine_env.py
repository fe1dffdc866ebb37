"""The stack's real engine environment (no Slurm): provisioning verifies what is installed there and
import-checks the LMCache connector. Moved out of tests/node: they start the engine venv's torch (about 10 s each)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from slurmx.backends.lmcache import CONNECTOR_MODULE, LMCacheSpec
from slurmx.node import provision
from slurmx.node.recorder import PointFailed
from slurmx.node.supervisor import Supervisor
from slurmx.recipes.model import Replay
from slurmx.recipes.spec import ServingSpec
from slurmx.runtimes.venv import VenvRuntime

pytestmark = pytest.mark.stack


def _spec(version: str = "0.5.6") -> ServingSpec:
    backend = LMCacheSpec(name="lmcache", version=version, l1_size_gb=1, l1_fraction=1.0, chunk_size=256,
                          transfer_mode="lmcache_driven", import_check=["json"])  # fmt: skip
    return ServingSpec(
        recipe="r", recipe_file="r.yaml", recipe_sha256="0", launcher=["x"], model_flag=None, model="tiny",
        served_model_name="m", engine_flags=[], env={"PYTHONHASHSEED": "0"}, block_size=128, health_path="/health",
        startup_timeout_s=10, gpus=1, backend=backend, replay=Replay(kind="synthetic"), conc=2, duration_s=60,
    )  # fmt: skip


def _venv(tmp_path: Path, engine_python: Path) -> VenvRuntime:
    return VenvRuntime(engine_python=str(engine_python), aiperf_bin=sys.executable, model_root=str(tmp_path))


def test_the_engine_venv_is_provisioned_for_real(tmp_path: Path, engine_python: Path) -> None:
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text("{}")
    runtime = _venv(tmp_path, engine_python)
    with Supervisor(tmp_path, f"prov-2-{os.getpid()}") as sup, pytest.raises(PointFailed) as caught:
        provision.run(_spec("0.0.1"), runtime, sup)
    assert str(caught.value) == (
        "provision: version lmcache failed: lmcache 0.5.6 is installed in the engine environment, the config pins 0.0.1"
    )
    with Supervisor(tmp_path / "ok", f"prov-3-{os.getpid()}") as sup:
        done = provision.run(_spec(), runtime, sup)
    assert done.versions == {"lmcache": "0.5.6"}
    preload = done.env["lmcache"]["LD_PRELOAD"].split(":")
    assert [Path(p).name for p in preload][:3] == list(provision.TORCH_LIBS) and all(Path(p).is_file() for p in preload)
    assert done.env["engine"]["LD_LIBRARY_PATH"].split(":")[0] == str(Path(preload[0]).parent)
    steps = [r["step"] for r in done.record]
    assert f"import-check {CONNECTOR_MODULE}" in steps and steps[-1] == "download model tiny"
