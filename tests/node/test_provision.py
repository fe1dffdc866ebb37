"""The provisioning step (slurmx.node.provision): what it plans per runtime, that it runs for real and fails
the point with a one-line reason, and LMCache's fallback guard once its server is ready."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from slurmx.backends.lmcache import CONNECTOR_MODULE, LMCacheSpec
from slurmx.config.clusters import RuntimeProfile
from slurmx.inputs import load_inputs
from slurmx.node import provision, serving_body
from slurmx.node.launch import launch_plan
from slurmx.node.recorder import PointFailed, StageRecorder
from slurmx.node.serving_body import Member, start_servers
from slurmx.node.supervisor import Supervisor
from slurmx.process import ServerPorts
from slurmx.recipes.model import PipInstall, Provision, Replay
from slurmx.recipes.spec import ServingSpec
from slurmx.runtimes.pyxis import PyxisRuntime
from slurmx.runtimes.venv import VenvRuntime
from slurmx.store.ledger import PointRecord, queue_point
from slurmx.store.tree import PointDir, ResultsTree
from slurmx.submit.resolved import resolve_points


def _spec(version: str | None = "0.5.6", replay: str = "synthetic") -> ServingSpec:
    backend = LMCacheSpec(name="lmcache", version=version, l1_size_gb=1, l1_fraction=1.0, chunk_size=256,
                          transfer_mode="lmcache_driven", import_check=["json"])  # fmt: skip
    return ServingSpec(
        recipe="r", recipe_file="r.yaml", recipe_sha256="0", launcher=["x"], model_flag=None, model="tiny",
        served_model_name="m", engine_flags=[], env={"PYTHONHASHSEED": "0"}, block_size=128, health_path="/health",
        startup_timeout_s=10, gpus=1, backend=backend, replay=Replay(kind=replay), conc=2, duration_s=60,
    )  # fmt: skip


def _venv(tmp_path: Path, python: str = sys.executable) -> VenvRuntime:
    return VenvRuntime(engine_python=python, aiperf_bin=sys.executable, model_root=str(tmp_path))


def test_the_venv_runtime_verifies_and_the_container_installs(tmp_path: Path) -> None:
    venv = {s.item: s for s in provision.plan(_spec(), _venv(tmp_path))}
    assert "pip install lmcache" not in venv  # the engine venv is shared: verify only
    assert venv["version lmcache"].process.argv[-2:] == ["lmcache", "0.5.6"]
    assert {f"import-check {CONNECTOR_MODULE}", "import-check json", "torch libraries", "aiperf runs"} <= set(venv)
    assert venv["download model tiny"].process.argv[-2:] == ["0", ""]  # find it, never download; no pinned revision

    pyxis = provision.plan(_spec(replay="production"), PyxisRuntime(model_root="/models", squash_dir="/sq", image="i"))
    first = pyxis[0]
    assert first.item == "pip install lmcache" and first.process.argv[0] == "srun"  # in the job's container
    assert first.process.argv[-6:] == ["-m", "pip", "install", *provision.PIP_FLAGS, "lmcache==0.5.6"][-6:]
    assert [s.item for s in pyxis].index("version lmcache") == 1  # read back right after the install
    assert pyxis[-1].item == "download dataset semianalysisai/cc-traces-weka-062126"
    assert "aiperf venv" not in [s.item for s in pyxis]  # no aiperf-source: the image's aiperf, checked only


def test_the_container_installs_aiperf_from_the_profiles_source_into_its_own_venv() -> None:
    profile = RuntimeProfile(
        kind="pyxis", squash_dir="/sq", model_root="/models", aiperf_source="/workspace/utils/aiperf"
    )
    runtime = PyxisRuntime.from_profile(profile, "img")
    steps = {s.item: s.process.argv for s in provision.plan(_spec(), runtime)}
    venv = "/tmp/slurmx-aiperf"
    assert steps["aiperf venv"][-5:] == ["python3", "-m", "venv", "--clear", venv]
    assert steps["aiperf"][-5:] == [f"{venv}/bin/python", "-m", "pip", "install", "/workspace/utils/aiperf"]
    assert steps["aiperf runs"][-2:] == [f"{venv}/bin/aiperf", "--version"]
    items = list(steps)
    assert items.index("aiperf venv") < items.index("aiperf") < items.index("aiperf runs")
    assert all(argv[0] == "srun" for argv in steps.values())  # in the job's container, never the engine's env
    assert runtime.aiperf_bin == f"{venv}/bin/aiperf"  # the replay runs the one provisioning installed


def test_a_version_other_than_the_pin_fails_the_point_in_one_line(tmp_path: Path) -> None:
    # this interpreter's environment has no lmcache at all: provisioning says so before any server starts
    with Supervisor(tmp_path, f"prov-1-{os.getpid()}") as sup, pytest.raises(PointFailed) as caught:
        provision.run(_spec(), _venv(tmp_path), sup)
    assert str(caught.value) == (
        "provision: version lmcache failed: lmcache is not installed in the engine environment (the config pins 0.5.6)"
    )


def test_an_engine_environment_without_the_connector_fails_the_point_before_any_server(tmp_path: Path) -> None:
    # no version pin to read back: the connector import check is the first to find lmcache missing
    with Supervisor(tmp_path, f"prov-0-{os.getpid()}") as sup, pytest.raises(PointFailed) as caught:
        provision.run(_spec(version=None), _venv(tmp_path), sup)
    assert str(caught.value) == (
        f"provision: import-check {CONNECTOR_MODULE} failed: ModuleNotFoundError: No module named 'lmcache'"
    )


FAKE_LMCACHE = """#!{python}
import http.server, sys
port = int(sys.argv[sys.argv.index("--http-port") + 1])
print("[LMCache WARNING] cuda_ops compiled extension not found; CudaDeviceOps stays on the torch baseline", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _queued_lmcache_point(tmp_path: Path) -> tuple[PointDir, PointRecord]:
    """The local key's first LMCache point, queued in a results tree under tmp_path as submit leaves it."""
    key = "tiny-fp32-local-vllm-agentic-lmcache"
    inputs = load_inputs(None, None, [key])
    item = next(r for r in resolve_points(inputs.points, inputs) if r.point.backend_name == "lmcache")
    point = ResultsTree(tmp_path / "results").sweep(key, "s1").point(item.point.point_id)
    record = item.record("s1")
    queue_point(point, record)
    return point, record


def test_lmcache_falling_back_to_torch_ops_fails_the_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    point, record = _queued_lmcache_point(tmp_path)
    fake = tmp_path / "lmcache"
    fake.write_text(FAKE_LMCACHE.format(python=sys.executable))
    fake.chmod(0o755)
    runtime = VenvRuntime(engine_python=sys.executable, lmcache_bin=str(fake), aiperf_bin=sys.executable)
    monkeypatch.setattr(serving_body, "preflight", lambda *a, **k: [])  # no GPUs or model here
    monkeypatch.setattr(provision, "start", lambda spec, _, sup: provision.Provisioning(spec, sup))  # tested above
    with Supervisor(point.path, f"guard-1-{os.getpid()}") as sup, pytest.raises(PointFailed) as caught:
        start_servers(Member(point, record, StageRecorder(point)), runtime, sup)
    assert str(caught.value) == "LMCache fell back to torch ops (no compiled extension) (lmcache.log:1)"


def test_without_a_model_root_the_hub_id_is_fetched_into_the_hub_cache() -> None:
    # as the scripts do (`hf download "$MODEL"` when the launcher stages no MODEL_PATH): the engine then loads
    # the hub id from the cache, and a failed download fails provisioning, not the engine's start an hour later
    steps = {s.item: s for s in provision.plan(_spec(), PyxisRuntime(squash_dir="/sq", image="i"))}
    fetch = steps["download model tiny"]
    assert fetch.value == "hf cache"
    assert fetch.process.argv[-5:] == ["model", "tiny", "-", "1", ""]  # no local dir; this runtime downloads; no pin


def _checkout(root: Path, sha: str, submodule: bool) -> Path:
    """A source checkout as the job sees it: HEAD in .git, or (a submodule) a .git file naming its gitdir."""
    src = root / "workspace" / "utils" / "aiperf"
    src.mkdir(parents=True)
    gitdir = root / "workspace" / ".git" / "modules" / "utils" / "aiperf" if submodule else src / ".git"
    gitdir.mkdir(parents=True)
    (gitdir / "HEAD").write_text(sha + "\n")
    if submodule:
        (src / ".git").write_text("gitdir: ../../.git/modules/utils/aiperf\n")
    return src


@pytest.mark.parametrize("submodule", [True, False])
def test_the_aiperf_checkouts_commit_is_checked_against_the_pin_and_recorded(tmp_path: Path, submodule: bool) -> None:
    import subprocess

    sha = "754356e" + "0" * 33
    src = _checkout(tmp_path, sha, submodule)
    runtime = PyxisRuntime.from_profile(RuntimeProfile(kind="pyxis", squash_dir="/sq", aiperf_source=str(src)), "i")
    for pin, ok in (("754356e", True), ("", True), ("0d2aa05", False)):
        spec = _spec(replay="production").model_copy(
            update={"replay": Replay(kind="production", aiperf_revision=pin or None)}
        )
        step = {s.item: s for s in provision.plan(spec, runtime)}["aiperf revision"]
        code = step.process.argv[step.process.argv.index("-c") + 1]
        done = subprocess.run([sys.executable, "-c", code, str(src), pin], capture_output=True, text=True)
        assert (done.returncode == 0) is ok, done.stderr
        if ok:
            assert json.loads(done.stdout) == {"aiperf_revision": sha}
        else:
            assert f"is at {sha}, the recipe pins 0d2aa05" in done.stderr


SHA, OTHER = "9f62e4e9" + "0" * 32, "1" * 40


def _fetch(step: provision.Step, python: str = sys.executable) -> list[str]:
    """The step's own python -c program and arguments, run here by `python`."""
    argv = step.process.argv
    return [python, *argv[argv.index("-c") :]]


def _hub_python() -> str:
    """An interpreter with huggingface_hub, as the engine's image has: the CPU stack's engine venv."""
    python = Path(os.environ.get("SLURMX_STACK", "/opt/slurmx-stack")) / "venvs" / "engine" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no engine venv at {python} (scripts/local-stack.sh build)")
    return str(python)


@pytest.mark.parametrize("recorded, ok", [([SHA, SHA], True), ([SHA, OTHER], False), ([], False)])
def test_a_pinned_model_in_a_model_root_must_be_that_commit_in_every_files_download_record(
    tmp_path: Path, recorded: list[str], ok: bool
) -> None:
    import subprocess

    model = tmp_path / "tiny"
    meta = model / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    for i, sha in enumerate(recorded):  # huggingface_hub's local-dir record: commit, etag, time
        (meta / f"f{i}.metadata").write_text(f"{sha}\netag\n0\n")
    steps = {s.item: s for s in provision.plan(_spec().model_copy(update={"model_revision": SHA}), _venv(tmp_path))}
    assert steps["model revision"].value == SHA
    assert steps["model revision"].process is steps["download model tiny"].process  # one process fetches and checks
    done = subprocess.run(_fetch(steps["download model tiny"]), capture_output=True, text=True)
    assert (done.returncode == 0) is ok, done.stderr
    if ok:
        assert json.loads(done.stdout.splitlines()[-1]) == {"model_revision": SHA}
    else:
        found = ", ".join(sorted(set(recorded))) or "unrecorded"
        assert done.stderr.strip() == f"tiny at {model} is revision {found}, the recipe pins {SHA}"


def test_a_pinned_model_in_the_hub_cache_is_fetched_at_that_commit_and_recorded(tmp_path: Path) -> None:
    import subprocess

    hub = tmp_path / "hub"
    for sha in (SHA, OTHER):  # the pinned snapshot and a newer main
        snapshot = hub / "models--org--tiny" / "snapshots" / sha
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text("{}")
    (hub / "models--org--tiny" / "refs").mkdir()
    (hub / "models--org--tiny" / "refs" / "main").write_text(OTHER)
    spec = _spec().model_copy(update={"model": "org/tiny", "model_revision": SHA})
    runtime = VenvRuntime(engine_python=sys.executable, aiperf_bin=sys.executable)  # no model root: the hub cache
    step = {s.item: s for s in provision.plan(spec, runtime)}["download model org/tiny"]
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(_fetch(step, _hub_python()), capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == [f"org/tiny: {hub}/models--org--tiny/snapshots/{SHA}",
                                             json.dumps({"model_revision": SHA})]  # fmt: skip


def test_a_recipe_pin_makes_the_engine_load_that_revision(tmp_path: Path) -> None:
    from slurmx.node.launch import launch_plan
    from slurmx.process import ServerPorts

    spec = _spec().model_copy(update={"model_revision": SHA})
    ports = ServerPorts(engine=1, named={"lmcache": 2, "lmcache-http": 3})
    (engine,) = [p for p in launch_plan(spec, ports, _venv(tmp_path), run_dir=tmp_path).servers if p.name == "engine"]
    assert engine.argv[engine.argv.index("--revision") + 1] == SHA


def test_a_pin_with_no_checkout_to_check_fails_the_point_at_provisioning(tmp_path: Path) -> None:
    import subprocess

    spec = _spec().model_copy(update={"replay": Replay(kind="synthetic", aiperf_revision="754356e")})
    steps = [s for s in provision.plan(spec, _venv(tmp_path))]
    step = next(s for s in steps if s.item == "aiperf revision")
    assert [s.item for s in steps].index("aiperf revision") < [s.item for s in steps].index("aiperf runs")
    done = subprocess.run(step.process.argv, capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "the recipe pins aiperf 754356e, but this runtime installs aiperf from no checkout (aiperf-source)"
    )


def test_the_production_replay_reads_the_dataset_from_the_provisioned_hub_cache() -> None:
    from slurmx.node.launch import replay_process
    from slurmx.process import ServerPorts

    spec = _spec(replay="production")
    runtime = PyxisRuntime(squash_dir="/sq", image="i", hf_home="/hf")
    ports = ServerPorts(engine=1, named={"lmcache": 2, "lmcache-http": 3})
    replay = replay_process(spec, ports, runtime, Path("/a"), None, 0)
    assert replay.env["HF_HOME"] == "/hf"  # where provisioning's "download dataset" put it


def test_an_upstream_script_runs_from_the_mounted_checkout_once_it_is_the_file_imported(tmp_path: Path) -> None:
    """A recipe's provision script (a container patch script) runs, by its program and arguments, from the
    checkout the container mounts at /workspace, after its sha256 is checked; the recipe's pip group is one pip."""
    import hashlib
    import subprocess

    from slurmx.recipes.model import PipInstall, Provision, UpstreamScript

    script = tmp_path / "benchmarks" / "patch.sh"
    script.parent.mkdir()
    script.write_text('echo "patched $1" > "$(dirname "$0")/done"\n')
    digest = hashlib.sha256(script.read_bytes()).hexdigest()
    wanted = UpstreamScript(path="benchmarks/patch.sh", args=["--quick"], sha256=digest)
    spec = _spec().model_copy(update={"provision": Provision(
        pip=[PipInstall(packages=["Pillow", "fastapi"], flags=["--quiet"])], scripts=[wanted])})  # fmt: skip
    mounted = PyxisRuntime(squash_dir="/sq", image="i", container_mounts=(f"{tmp_path}:/workspace",))
    steps = {s.item: s for s in provision.plan(spec, mounted)}
    assert (
        steps["pip install Pillow"].value == "Pillow --quiet"
        and steps["pip install fastapi"].value == "fastapi --quiet"
    )
    assert steps["pip install Pillow"].process is steps["pip install fastapi"].process  # one pip installs the group
    assert steps["pip install Pillow"].process.argv[-5:] == ["pip", "install", "--quiet", "Pillow", "fastapi"]
    run = steps["run benchmarks/patch.sh"]
    assert run.value == f"bash --quick sha256:{digest}"
    argv = run.process.argv[run.process.argv.index("python3") :]
    assert argv[3:] == ["/workspace/benchmarks/patch.sh", digest, "bash", "--quick"]
    # the step's own program, here on this machine's checkout (the container's /workspace is tmp_path)
    local = [sys.executable, "-c", argv[2], str(script), *argv[4:]]
    done = subprocess.run(local, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (script.parent / "done").read_text() == "patched --quick\n"
    script.write_text(script.read_text() + "# moved upstream\n")  # another file than the one imported: refused
    done = subprocess.run(local, capture_output=True, text=True)
    assert done.returncode == 1 and f"the recipe was imported from {digest}" in done.stderr
    # no checkout mounted, or a runtime that installs nothing: the point fails rather than serve unpatched
    bare = {s.item: s for s in provision.plan(spec, PyxisRuntime(squash_dir="/sq", image="i"))}
    assert "mounts none" in bare["run benchmarks/patch.sh"].process.argv[-1]
    venv = {s.item: s for s in provision.plan(spec, _venv(tmp_path))}
    assert "pip install Pillow" not in venv
    failed = subprocess.run(venv["run benchmarks/patch.sh"].process.argv, capture_output=True, text=True)
    assert failed.returncode == 1 and "installs nothing" in failed.stderr


def test_an_image_edit_is_made_once_as_the_script_guards_it_and_a_missing_file_fails(tmp_path: Path) -> None:
    """A recipe's edit of an image file (qwen3.5_fp8_h200_mtp.sh's sed -i of SGLang's multi_tokenizer_mixin.py) runs
    in the job's container as the script runs it: made where the guard's read finds it not done, left alone where it
    is done (a second edit would repeat the lines), failing the point where the image lacks the file."""
    import subprocess

    from slurmx.recipes.model import EditGuard, ImageEdit, Provision

    target = tmp_path / "mixin.py"
    target.write_text("def f(output, i):\n    return dict(\n        cached_tokens=1,\n    )\n")
    edit = ImageEdit(path=str(target), sed=["-i", "/cached_tokens=1,/a\\\n        details=2,"],
                     unless=EditGuard(sed=["-n", "/def f/,/^    )$/p"], grep=["-q", "details=2"]))  # fmt: skip
    spec = _spec().model_copy(update={"provision": Provision(edits=[edit])})
    steps = {s.item: s for s in provision.plan(spec, PyxisRuntime(squash_dir="/sq", image="i"))}
    step = steps[f"edit {target}"]
    assert (
        step.value
        == "sed -i '/cached_tokens=1,/a\\\n        details=2,' unless sed -n '/def f/,/^    )$/p' | grep -q details=2"
    )
    argv = step.process.argv[step.process.argv.index("bash") :]  # inside the runtime's srun into the container
    for _ in range(2):  # the second run finds the edit done and leaves the file as it is
        done = subprocess.run(argv, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert (
            target.read_text()
            == "def f(output, i):\n    return dict(\n        cached_tokens=1,\n        details=2,\n    )\n"
        )
    target.unlink()
    assert subprocess.run(argv, capture_output=True, text=True).returncode != 0  # an image without the file
    venv = {s.item: s for s in provision.plan(spec, _venv(tmp_path))}
    failed = subprocess.run(venv[f"edit {target}"].process.argv, capture_output=True, text=True)
    assert failed.returncode == 1 and "installs nothing" in failed.stderr


def test_an_arms_requirements_install_with_its_wheel_from_its_page_in_one_pip() -> None:
    page = "https://github.com/LMCache/LMCache/releases/expanded_assets/v0.5.3-rocm"
    spec = _spec(version="0.5.3")
    spec = spec.model_copy(update={"backend": spec.backend.model_copy(
        update={"find_links": page, "requires": ["sortedcontainers==2.4.0", "cupy-rocm-7-0==14.1.1"]})})  # fmt: skip
    steps = {s.item: s for s in provision.plan(spec, PyxisRuntime(squash_dir="/sq", image="i"))}
    wheel = steps["pip install lmcache"]
    assert wheel.process.argv[-7:] == [*provision.PIP_FLAGS, f"--find-links={page}", "lmcache==0.5.3",
                                       "sortedcontainers==2.4.0", "cupy-rocm-7-0==14.1.1"]  # fmt: skip
    for name in ("sortedcontainers", "cupy-rocm-7-0"):
        assert steps[f"pip install {name}"].process is wheel.process  # one resolver, as the script's one pip
        assert f"--find-links={page}" in steps[f"pip install {name}"].value.split()
    unpinned = spec.model_copy(update={"backend": spec.backend.model_copy(update={"version": None})})
    import subprocess

    refusal = {s.item: s for s in provision.plan(unpinned, _venv(Path("/tmp")))}["pip install"]
    done = subprocess.run(refusal.process.argv, capture_output=True, text=True)
    assert done.returncode == 1 and "beside its wheel, but the point pins no version" in done.stderr


BARRIER = """#!/bin/sh
# a check that runs only when every check of the point runs beside it: each leaves a mark, then waits for all
touch "{marks}/$$"
for _ in $(seq 200); do
    [ "$(ls "{marks}" | wc -l)" -ge {count} ] && exec {python} "$@"
    sleep 0.1
done
echo "ran alone: the checks ran one after another"
exit 1
"""


def test_the_checks_run_side_by_side_and_the_first_failure_in_plan_order_is_the_cause(tmp_path: Path) -> None:
    # version lmcache, the import checks, torch's libraries, aiperf and the model: five processes, each held
    # until all five run; one after another, the first would wait alone and fail saying so
    marks = tmp_path / "marks"
    marks.mkdir()
    fake = tmp_path / "python"
    fake.write_text(BARRIER.format(marks=marks, count=5, python=sys.executable))
    fake.chmod(0o755)
    runtime = VenvRuntime(engine_python=str(fake), aiperf_bin=str(fake), model_root=str(tmp_path))
    with Supervisor(tmp_path, f"prov-4-{os.getpid()}") as sup, pytest.raises(PointFailed) as caught:
        provision.run(_spec(), runtime, sup)
    assert len(list(marks.iterdir())) == 5
    # every check fails here (no lmcache, no torch, no model tiny); the version read back is named, as when
    # the version probe ran first and alone
    assert str(caught.value) == (
        "provision: version lmcache failed: lmcache is not installed in the engine environment (the config pins 0.5.6)"
    )


def test_the_lmcache_server_starts_beside_the_checks_and_a_failed_check_is_the_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    point, record = _queued_lmcache_point(tmp_path)
    assert record.serving is not None
    # what the servers' start needs is found: a torch package on the engine's path (its libraries' directory)
    # and the model; lmcache's version and its connector are not (no lmcache in this environment)
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    server = tmp_path / "lmcache"
    server.write_text("#!/bin/sh\necho 'lmcache: started'\nexit 3\n")
    server.chmod(0o755)
    runtime = VenvRuntime(engine_python=sys.executable, engine_pythonpath=str(site), lmcache_bin=str(server),
                          aiperf_bin=sys.executable, model_root=str(tmp_path / "models"))  # fmt: skip
    model = Path(runtime.model_path(record.serving.model))
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    monkeypatch.setattr(serving_body, "preflight", lambda *a, **k: [])  # no GPUs here
    with Supervisor(point.path, f"beside-1-{os.getpid()}") as sup, pytest.raises(PointFailed) as caught:
        start_servers(Member(point, record, StageRecorder(point)), runtime, sup)
    assert "lmcache: started" in (point.path / "logs" / "lmcache.log").read_text()  # not held for the check
    # the server's own failure is not the cause: the first failed check in plan order is
    assert str(caught.value) == (
        "provision: version lmcache failed: lmcache is not installed in the engine environment (the config pins 0.5.6)"
    )


SPAN = """#!/bin/sh
# logs when each provisioning process runs; pip "installs" nothing, every other process runs for real
kind=check; [ "$1 $2 $3" = "-m pip install" ] && kind=install
echo "$$ start $(date +%s.%N) $kind" >> "{log}"
sleep 0.3
if [ $kind = install ]; then code=0; else {python} "$@"; code=$?; fi
echo "$$ end $(date +%s.%N)" >> "{log}"
exit $code
"""


class _InstallingVenv(VenvRuntime):
    installs: ClassVar[bool] = True  # as a container does: the pin and the recipe's packages are installed


def test_no_check_runs_while_an_install_changes_the_environment(tmp_path: Path) -> None:
    log = tmp_path / "spans.log"
    fake = tmp_path / "python"
    fake.write_text(SPAN.format(log=log, python=sys.executable))
    fake.chmod(0o755)
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text("{}")
    # the engine's environment as installed: lmcache 0.5.6 (its connector module) and torch
    site = tmp_path / "site"
    (site / "lmcache-0.5.6.dist-info").mkdir(parents=True)
    (site / "lmcache-0.5.6.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: lmcache\nVersion: 0.5.6\n")
    connector = site / Path(*CONNECTOR_MODULE.split("."))
    connector.parent.mkdir(parents=True)
    for package in [connector.parent, *connector.parent.parents][: len(CONNECTOR_MODULE.split(".")) - 1]:
        (package / "__init__.py").write_text("")
    connector.with_suffix(".py").write_text("")
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("")
    runtime = _InstallingVenv(engine_python=str(fake), engine_pythonpath=str(site), aiperf_bin=str(fake),
                              model_root=str(tmp_path))  # fmt: skip
    spec = _spec().model_copy(update={"provision": Provision(pip=[PipInstall(packages=["x==1"])])})
    with Supervisor(tmp_path, f"prov-5-{os.getpid()}") as sup:
        done = provision.run(spec, runtime, sup)
    assert done.versions == {"lmcache": "0.5.6"}
    spans: dict[str, list[float]] = {}
    installs: set[str] = set()
    for line in log.read_text().splitlines():
        pid, what, at, *kind = line.split()
        spans.setdefault(pid, []).append(float(at))
        if kind == ["install"]:
            installs.add(pid)
    assert len(installs) == 2 and len(spans) >= 6, spans  # the pin, the recipe's packages; the checks
    for install in installs:
        begun, ended = spans[install]
        for pid, (start, end) in spans.items():
            assert pid == install or end <= begun or start >= ended, f"{pid} ran during install {install}: {spans}"


# dsv4_fp4_b200_sglang_mtp.sh:174-178's search for Triton's ptxas, its roots moved under a fake image root
PTXAS_TESTS = ["-type", "f", "-name", "ptxas", "-perm", "-u+x"]


def _ptxas_spec(image: Path) -> ServingSpec:
    from slurmx.backends.none import NoneSpec
    from slurmx.recipes.model import FindEnv

    roots = [f"{image}/usr/local/cuda*", f"{image}/usr/local/lib/python*/dist-packages/nvidia",
             f"{image}/usr/local/lib/python*/site-packages/nvidia"]  # fmt: skip
    find = FindEnv(name="TRITON_PTXAS_PATH", roots=roots, tests=PTXAS_TESTS)
    return _spec().model_copy(update={"backend": NoneSpec(name="none"), "provision": Provision(find_env=[find])})


def _venv_with_model(tmp_path: Path) -> VenvRuntime:
    (tmp_path / "tiny").mkdir()  # the model provisioning finds
    (tmp_path / "tiny" / "config.json").write_text("{}")
    return _venv(tmp_path)


def test_a_find_env_exports_the_file_the_search_finds_in_the_job_environment(tmp_path: Path) -> None:
    """Where the image holds a ptxas under one of the script's roots (a glob matching cuda-12.9, a second root that is
    only a directory), provisioning runs the script's search in the runtime and the engine starts with its path."""
    image = tmp_path / "image"
    ptxas = image / "usr/local/cuda-12.9/bin/ptxas"
    ptxas.parent.mkdir(parents=True)
    ptxas.write_text("#!/bin/sh\n")
    ptxas.chmod(0o755)
    (image / "usr/local/lib/python3.12/dist-packages/nvidia").mkdir(parents=True)
    (image / "usr/local/cuda-12.9/bin/readme").write_text("not ptxas")
    spec = _ptxas_spec(image)
    runtime = _venv_with_model(tmp_path)
    steps = {s.item: s for s in provision.plan(spec, runtime)}
    assert steps["find-env TRITON_PTXAS_PATH"].value == (
        f"find {image}/usr/local/cuda* {image}/usr/local/lib/python*/dist-packages/nvidia "
        f"{image}/usr/local/lib/python*/site-packages/nvidia -type f -name ptxas -perm -u+x -print -quit 2>/dev/null || true"
    )
    with Supervisor(tmp_path, f"find-env-a-{os.getpid()}") as sup:
        provisioning = provision.start(spec, runtime, sup)
        env = provisioning.provisioned.env
        provisioning.finish()
    assert env == {"engine": {"TRITON_PTXAS_PATH": str(ptxas)}}
    (engine,) = [p for p in launch_plan(spec, ServerPorts(engine=8000), runtime, env).servers if p.name == "engine"]
    assert engine.env["TRITON_PTXAS_PATH"] == str(ptxas)  # what the node starts the engine with
    record = next(r for r in provisioning.provisioned.record if r["step"] == "find-env TRITON_PTXAS_PATH")
    assert json.loads(record["result"]) == {"TRITON_PTXAS_PATH": str(ptxas)}  # the point's lock records it


def test_a_find_env_that_finds_nothing_exports_nothing(tmp_path: Path) -> None:
    """An image without a ptxas (one that is not executable does not count, as -perm -u+x has it): nothing exported,
    and the record says so."""
    image = tmp_path / "image"
    plain = image / "usr/local/cuda-12.9/bin/ptxas"
    plain.parent.mkdir(parents=True)
    plain.write_text("")
    plain.chmod(0o644)
    with Supervisor(tmp_path, f"find-env-b-{os.getpid()}") as sup:
        provisioning = provision.start(_ptxas_spec(image), _venv_with_model(tmp_path), sup)
        env = provisioning.provisioned.env
        provisioning.finish()
    assert "TRITON_PTXAS_PATH" not in env.get("engine", {})
    record = next(r for r in provisioning.provisioned.record if r["step"] == "find-env TRITON_PTXAS_PATH")
    assert json.loads(record["result"]) == {}


def test_render_shows_a_find_env_as_found_on_the_node_beside_torchs_libraries() -> None:
    spec = _ptxas_spec(Path("/img")).model_copy(update={"backend": _spec().backend})
    env = provision.review_env(spec)
    assert env["engine"] == {"LD_LIBRARY_PATH": provision.REVIEW_TORCH_LIB, "TRITON_PTXAS_PATH": "$TRITON_PTXAS_PATH"}
    assert provision.review_env(_spec())["engine"] == {"LD_LIBRARY_PATH": provision.REVIEW_TORCH_LIB}


def test_a_find_env_root_that_is_not_a_plain_path_is_refused() -> None:
    from pydantic import ValidationError

    from slurmx.recipes.model import FindEnv

    with pytest.raises(ValidationError, match=r"/usr/local/cuda\*; rm -rf /: not an absolute path"):
        FindEnv(name="X", roots=["/usr/local/cuda*; rm -rf /"], tests=["-name", "x"])
