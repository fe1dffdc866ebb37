"""What provisioning reads from each step's answer: the steps' own programs run here (as the job runs them), and
their output read into what the point records (versions, the aiperf and model commits, the env of torch's
libraries), as the serving body's Provisioning reads it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from slurmx.backends.lmcache import LMCacheSpec
from slurmx.config.clusters import RuntimeProfile
from slurmx.node import provision
from slurmx.recipes.model import Replay
from slurmx.recipes.spec import ServingSpec
from slurmx.runtimes.pyxis import PyxisRuntime
from slurmx.runtimes.venv import VenvRuntime

SHA = "754356e" + "0" * 33


def _spec(**update: object) -> ServingSpec:
    backend = LMCacheSpec(name="lmcache", version="0.5.6", l1_size_gb=1, l1_fraction=1.0, chunk_size=256,
                          transfer_mode="lmcache_driven", import_check=["json"])  # fmt: skip
    spec = ServingSpec(
        recipe="r", recipe_file="r.yaml", recipe_sha256="0", launcher=["x"], model_flag=None, model="tiny",
        served_model_name="m", engine_flags=[], env={}, block_size=128, health_path="/health",
        startup_timeout_s=10, gpus=1, backend=backend, replay=Replay(kind="synthetic"), conc=2, duration_s=60,
    )  # fmt: skip
    return spec.model_copy(update=update)


def answer(step: provision.Step, *args: str) -> list[str]:
    """The step's `python -c` program run here with `args` in place of its own (or as is): its stdout lines."""
    argv = step.process.argv
    program = argv[argv.index("-c") + 1]
    rest = list(args) or argv[argv.index("-c") + 2 :]
    done = subprocess.run([sys.executable, "-c", program, *rest], capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()


def read(spec: ServingSpec, step: provision.Step, lines: list[str]) -> provision.Provisioned:
    out = provision.Provisioned()
    provision._read(spec, step, lines, out)
    return out


def test_the_aiperf_checkouts_commit_is_what_the_lock_records(tmp_path: Path) -> None:
    src = tmp_path / "aiperf"
    (src / ".git").mkdir(parents=True)
    (src / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (src / ".git" / "refs" / "heads").mkdir(parents=True)
    (src / ".git" / "refs" / "heads" / "main").write_text(SHA + "\n")
    runtime = PyxisRuntime.from_profile(RuntimeProfile(kind="pyxis", squash_dir="/sq", aiperf_source=str(src)), "i")
    spec = _spec(replay=Replay(kind="synthetic", aiperf_revision="754356e"))
    step = {s.item: s for s in provision.plan(spec, runtime)}["aiperf revision"]
    assert step.value == "754356e"
    out = read(spec, step, answer(step, str(src), "754356e"))
    assert out.aiperf_revision == SHA and out.model_revision is None and out.versions == {} and out.env == {}


def test_a_pinned_models_commit_is_what_the_lock_records(tmp_path: Path) -> None:
    model = tmp_path / "tiny"
    meta = model / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True)
    (meta / "config.json.metadata").write_text(f"{SHA}\netag\n0\n")
    runtime = VenvRuntime(engine_python=sys.executable, aiperf_bin=sys.executable, model_root=str(tmp_path))
    spec = _spec(model_revision=SHA)
    steps = {s.item: s for s in provision.plan(spec, runtime)}
    out = read(spec, steps["download model tiny"], answer(steps["download model tiny"]))
    assert out.model_revision == SHA and out.aiperf_revision is None
    unpinned = read(_spec(), steps["download model tiny"], [f"tiny: present at {model}"])
    assert unpinned.model_revision is None


def test_the_installed_version_is_what_the_lock_records() -> None:
    spec = _spec()
    runtime = VenvRuntime(engine_python=sys.executable, aiperf_bin=sys.executable, model_root="/m")
    step = {s.item: s for s in provision.plan(spec, runtime)}["version lmcache"]
    # what the version program prints when lmcache 0.5.6 is installed, then a warning on its way out
    out = read(spec, step, ['{"lmcache": "0.5.6"}', "warning: something late"])
    assert out.versions == {"lmcache": "0.5.6"}


def test_torchs_libraries_go_to_the_servers_and_the_engine(tmp_path: Path) -> None:
    spec = _spec()
    runtime = VenvRuntime(engine_python=sys.executable, aiperf_bin=sys.executable, model_root="/m")
    step = {s.item: s for s in provision.plan(spec, runtime)}["torch libraries"]
    found = {"torch_lib": "/t/lib", "ld_preload": "/t/lib/libc10.so:/t/lib/libtorch.so", "ld_library_path": "/t/lib"}
    out = read(spec, step, [json.dumps(found)])
    servers = spec.implementation.backend.server_names(spec.backend)
    assert servers and out.env == {
        **{name: {"LD_PRELOAD": found["ld_preload"], "LD_LIBRARY_PATH": "/t/lib"} for name in servers},
        "engine": {"LD_LIBRARY_PATH": "/t/lib"},
    }


def test_a_step_with_nothing_to_read_changes_nothing() -> None:
    spec = _spec()
    runtime = VenvRuntime(engine_python=sys.executable, aiperf_bin=sys.executable, model_root="/m")
    step = {s.item: s for s in provision.plan(spec, runtime)}["aiperf runs"]
    assert read(spec, step, ['{"x": 1}']) == provision.Provisioned()
    assert provision._json_line(["[1]", "not json", '{"a": 1}', "[2]", "tail"]) == {"a": 1}
    assert provision._json_line(["[1]", "nope"]) == {}


def test_every_import_check_is_named_ok_and_one_process_runs_them(tmp_path: Path) -> None:
    backend = LMCacheSpec(name="lmcache", version="0.5.6", l1_size_gb=1, l1_fraction=1.0, chunk_size=256,
                          transfer_mode="lmcache_driven", import_check=["json", "os"])  # fmt: skip
    runtime = VenvRuntime(engine_python=sys.executable, aiperf_bin=sys.executable, model_root="/m")
    steps = {s.item: s for s in provision.plan(_spec(backend=backend), runtime)}
    checks = [steps[f"import-check {m}"] for m in ("json", "os")]
    assert [s.value for s in checks] == ["ok", "ok"] and checks[0].process is checks[1].process
    assert checks[0].process.argv[-1].endswith("; import json; import os")  # after the connector's own module


def test_an_upstream_script_runs_as_a_python_program(tmp_path: Path) -> None:
    from slurmx.recipes.model import Provision, UpstreamScript

    wanted = UpstreamScript(path="benchmarks/patch.sh", args=["--quick"], sha256="0" * 64)
    spec = _spec(provision=Provision(scripts=[wanted]))
    mounted = PyxisRuntime(squash_dir="/sq", image="i", container_mounts=(f"{tmp_path}:/workspace",))
    argv = {s.item: s for s in provision.plan(spec, mounted)}["run benchmarks/patch.sh"].process.argv
    inside = argv[argv.index("python3") :]  # after the runtime's srun into the container
    assert inside[1] == "-c" and inside[3:] == ["/workspace/benchmarks/patch.sh", "0" * 64, "bash", "--quick"]


def test_an_aiperf_pin_without_a_checkout_is_named_by_the_pin() -> None:
    runtime = VenvRuntime(engine_python=sys.executable, aiperf_bin=sys.executable, model_root="/m")
    spec = _spec(replay=Replay(kind="synthetic", aiperf_revision="754356e"))
    step = {s.item: s for s in provision.plan(spec, runtime)}["aiperf revision"]
    assert step.value == "754356e" and step.timeout_s == provision.CHECK_TIMEOUT_S
