"""Provisioning: the job body's one step between preflight and the first server, on every runtime.

It makes the point's environment hold what the arm needs and records what really landed:
install the pinned backend (runtimes whose environment is disposable, the container; the venv
runtime only verifies), read back the installed version, import-check what the arm's engine and
server import, find torch's libraries for LMCache's compiled extension, make sure aiperf runs, and
fetch (or, where the runtime may not download, find) the model, the draft model and the dataset.
Each action is a supervised process started through the runtime, so the pyxis runtime runs them
in the job's container and the venv runtime in the engine's environment, for real, on the local
stack. `plan` is pure (render and the upstream-parity test read it); `run` executes it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmx.node.recorder import PointFailed
from slurmx.node.supervisor import Managed, Supervisor
from slurmx.process import COMMON_ENV, Process
from slurmx.recipes.spec import ServingSpec
from slurmx.runtimes import Runtime

# A fresh wheel of the pinned version even when the image holds one (an already-satisfied pin installs
# nothing, PR #2597's two no-op sweeps), without touching the image's torch/vLLM, logged (not --quiet).
PIP_FLAGS = ("--force-reinstall", "--no-cache-dir", "--no-deps")
ROUTER_PIP_FLAGS = ("--quiet",)  # as 01e9e73a2 installs vllm-router
TORCH_LIBS = ("libc10.so", "libtorch_cpu.so", "libtorch.so")  # PR #2597's LD_PRELOAD, in its order
TORCH_CUDA_LIBS = ("libc10_cuda.so", "libtorch_cuda.so")  # added where the build has them
REVIEW_TORCH_LIB = "$TORCH_LIB_DIR"  # what render shows for the directory found on the node
# benchmark_lib.sh's resolve_trace_source: aiperf loader name -> the HF dataset it reads
DATASETS = {
    "semianalysis_cc_traces_weka_062126": "semianalysisai/cc-traces-weka-062126",
    "semianalysis_cc_traces_weka_062126_256k": "semianalysisai/cc-traces-weka-062126-256k",
    "semianalysis_cc_traces_weka_with_subagents": "semianalysisai/cc-traces-weka-061526",
    "semianalysis_cc_traces_weka_with_subagents_256k": "semianalysisai/cc-traces-weka-061526-256k",
}
INSTALL_TIMEOUT_S = 1800.0
CHECK_TIMEOUT_S = 300.0
DOWNLOAD_TIMEOUT_S = 6 * 3600.0

_VERSION = (
    "import sys, json, importlib.metadata as m\n"
    "name, pinned = sys.argv[1:3]\n"
    "try:\n"
    "    found = m.version(name)\n"
    "except m.PackageNotFoundError:\n"
    "    sys.exit(f'{name} is not installed in the engine environment (the config pins {pinned})')\n"
    "print(json.dumps({name: found}))\n"
    "if found != pinned:\n"
    "    sys.exit(f'{name} {found} is installed in the engine environment, the config pins {pinned}')\n"
)
# torch's directory from its import spec: the same directory `torch.__file__` names, found without importing
# torch (tens of seconds on a cold node; the import checks and the servers import it anyway)
_TORCH_LIBS = (
    "import importlib.util, json, os, sys\n"
    "found = importlib.util.find_spec('torch')\n"
    "if found is None or not found.origin: sys.exit('torch is not installed in the engine environment')\n"
    "lib = os.path.join(os.path.dirname(found.origin), 'lib')\n"
    "base, cuda = sys.argv[1].split(','), sys.argv[2].split(',')\n"
    "pre = [os.path.join(lib, n) for n in base]\n"
    "if os.path.isfile(os.path.join(lib, cuda[0])):\n"
    "    pre += [os.path.join(lib, n) for n in cuda]\n"
    "old = os.environ.get('LD_LIBRARY_PATH', '')\n"
    "print(json.dumps({'torch_lib': lib, 'ld_preload': ':'.join(pre), 'ld_library_path': lib + (':' + old if old else '')}))\n"
)
# With a pinned revision (a full commit) the snapshot fetched must be that commit: in the hub cache its snapshot
# directory is named by it; in a local directory every file's download record (huggingface_hub's
# .cache/huggingface/download/*.metadata, first line) names it. Prints {"model_revision": sha} then.
_FETCH = (
    "import json, os, sys\n"
    "kind, repo, where, may_download, pin = sys.argv[1:6]\n"
    "def recorded(d):\n"
    "    meta = os.path.join(d, '.cache', 'huggingface', 'download')\n"
    "    return {open(os.path.join(r, f)).readline().strip() for r, _, fs in os.walk(meta) for f in fs if f.endswith('.metadata')}\n"
    "def checked(found):\n"
    '    if found != {pin}: sys.exit(f\'{repo} at {where} is revision {", ".join(sorted(found)) or "unrecorded"}, the recipe pins {pin}\')\n'
    "    print(json.dumps({'model_revision': pin}))\n"
    "if kind == 'model' and os.path.isdir(where) and os.listdir(where):\n"
    "    print(f'{repo}: present at {where}')\n"
    "    if pin: checked(recorded(where))\n"
    "    sys.exit(0)\n"
    "if may_download != '1' and kind == 'model' and where != '-':\n"
    "    sys.exit(f'model {repo} is not at {where} (this runtime does not download)')\n"
    "from huggingface_hub import snapshot_download\n"
    "local = None if where == '-' else where\n"
    "path = snapshot_download(repo, repo_type=kind, local_dir=local, local_files_only=may_download != '1', revision=pin or None)\n"
    "print(f'{repo}: {path}')\n"
    "if pin: checked(recorded(local) if local else {os.path.basename(os.path.normpath(path))})\n"
)

# The commit of a source checkout (a submodule's .git is a file naming its gitdir), read without git (the image
# may have none); with a pin, anything else fails the point. Prints {"aiperf_revision": sha}.
_REVISION = (
    "import json, os, sys\n"
    "src, pin = sys.argv[1:3]; git = os.path.join(src, '.git'); sha = ''\n"
    "if os.path.isfile(git): git = os.path.join(src, open(git).read().partition('gitdir:')[2].strip())\n"
    "head = open(os.path.join(git, 'HEAD')).read().strip() if os.path.isdir(git) else ''\n"
    "ref = os.path.join(git, head[5:]) if head.startswith('ref: ') else ''\n"
    "sha = (open(ref).read().strip() if os.path.isfile(ref) else '') if ref else head\n"
    "if pin and not sha.startswith(pin): sys.exit(f'aiperf at {src} is at {sha or \"no git revision\"}, the recipe pins {pin}')\n"
    "print(json.dumps({'aiperf_revision': sha or None}))\n"
)

# An upstream script of the checkout, run as the InferenceX script runs it once it is the file the recipe was
# imported from (a patch script that changed upstream would patch something no one reviewed).
_RUN = (
    "import hashlib, os, sys\n"
    "path, digest, program, *args = sys.argv[1:]\n"
    "if not os.path.isfile(path): sys.exit(f'{path} is not in the InferenceX checkout')\n"
    "found = hashlib.sha256(open(path, 'rb').read()).hexdigest()\n"
    "if found != digest: sys.exit(f'{path} has sha256 {found}, the recipe was imported from {digest}')\n"
    "os.execvp(program, [program, path, *args])\n"
)

# A recipe's find-env: the script's `NAME=$(find ROOTS TESTS -print -quit 2>/dev/null || true)`, run by bash in the
# job's runtime (its globs expand there, as the script's do); prints {"NAME": path}, or {} where it finds nothing.
_FIND = (
    "import json, subprocess, sys\n"
    "name, search = sys.argv[1:3]\n"
    "found = subprocess.run(['bash', '-c', search], capture_output=True, text=True).stdout.strip()\n"
    "print(json.dumps({name: found} if found else {}))\n"
)


def find_search(roots: Sequence[str], tests: Sequence[str]) -> str:
    """The search as the script's bash runs it (roots unquoted: their globs expand in the job's runtime), which is also
    how `recipes check` names it."""
    return f"find {' '.join(roots)} {shlex.join(tests)} -print -quit 2>/dev/null || true"


def script_value(program: str, args: Sequence[str], sha256: str) -> str:
    """How an upstream script's run is named (both sides of `recipes check`): its program, arguments and digest."""
    return " ".join([program, *args, f"sha256:{sha256}"])


def edit_value(sed: Sequence[str], guard: tuple[Sequence[str], Sequence[str]] | None) -> str:
    """How an edit of an image file is named (both sides of `recipes check`; the item names the file): the sed that
    edits it and, if any, the guard: the read of the file and the program (with its arguments) that finds it edited."""
    done = f" unless sed {shlex.join(guard[0])} | {shlex.join(guard[1])}" if guard else ""
    return f"sed {shlex.join(sed)}{done}"


def edit_command(path: str, sed: Sequence[str], guard: tuple[Sequence[str], Sequence[str]] | None) -> str:
    """The edit as the script's bash runs it (`set -euo pipefail`: a file the image lacks fails the read and the
    edit)."""
    edit = f"sed {shlex.join(sed)} {shlex.quote(path)}"
    if guard:
        read = f"sed {shlex.join(guard[0])} {shlex.quote(path)} | {shlex.join(guard[1])}"
        edit = f"if ! {read}; then {edit}; fi"
    return f"set -euo pipefail; {edit}"


@dataclass(frozen=True)
class Step:
    """One provisioning action. `item`/`value` name it as docs/upstream-differences.yaml does."""

    item: str
    value: str
    process: Process
    timeout_s: float = CHECK_TIMEOUT_S


@dataclass
class Provisioned:
    """What provisioning found: the versions installed, the env it computed per process, its record."""

    versions: dict[str, str] = field(default_factory=dict)
    env: dict[str, dict[str, str]] = field(default_factory=dict)
    record: list[dict[str, Any]] = field(default_factory=list)
    aiperf_revision: str | None = None  # the commit of the aiperf source the replay was installed from
    model_revision: str | None = None  # the model's commit provisioning checked (a recipe's model-revision)


def _step(runtime: Runtime, item: str, value: str, argv: list[str], timeout_s: float = CHECK_TIMEOUT_S) -> Step:
    name = "provision-" + "".join(c if c.isalnum() else "-" for c in item).strip("-")
    env = dict(COMMON_ENV)
    if runtime.hf_home:
        env["HF_HOME"] = runtime.hf_home
    if argv[:1] == [runtime.engine_python] and runtime.engine_pythonpath:
        env["PYTHONPATH"] = runtime.engine_pythonpath  # the engine's Python checks what the engine will import
    return Step(item, value, Process(name, runtime.wrap(argv, name), env), timeout_s)


def plan(spec: ServingSpec, runtime: Runtime) -> list[Step]:
    """Every provisioning action of a point, in order (pure: render and the parity test read it)."""
    backend = spec.implementation.backend
    py = runtime.engine_python
    steps: list[Step] = []
    # (distribution, version, pip options, what the same pip installs beside it)
    pins: list[tuple[str, str, tuple[str, ...], list[str]]] = []
    distribution = backend.distribution_of(spec.backend)
    if distribution and spec.backend.version:
        index = (f"--find-links={spec.backend.find_links}",) if spec.backend.find_links else ()
        pins.append((distribution, spec.backend.version, (*PIP_FLAGS, *index), spec.backend.requires))
    elif spec.backend.requires:  # they pin against a wheel this point does not install: fail before serving
        why = f"the arm installs {', '.join(spec.backend.requires)} beside its wheel, but the point pins no version"
        steps.append(_step(runtime, "pip install", why, [py, "-c", f"import sys; sys.exit({why!r})"]))
    if spec.router is not None and spec.router.version:
        pins.append((spec.router.name, spec.router.version, ROUTER_PIP_FLAGS, []))
    for dist, version, flags, beside in pins:
        if runtime.installs:
            packages = [f"{dist}=={version}", *beside]
            argv = [py, "-m", "pip", "install", *flags, *packages]
            first = _step(
                runtime, f"pip install {dist}", " ".join([packages[0], *sorted(flags)]), argv, INSTALL_TIMEOUT_S
            )
            steps.append(first)
            # one pip installs the arm's requirements with its wheel (as the scripts do: one resolver, no deps)
            steps += [Step(f"pip install {p.split('==')[0]}", " ".join([p, *sorted(flags)]), first.process,
                           INSTALL_TIMEOUT_S) for p in beside]  # fmt: skip
        steps.append(_step(runtime, f"version {dist}", version, [py, "-c", _VERSION, dist, version]))
    steps += _recipe_steps(spec, runtime)
    modules = backend.import_checks(spec.backend, spec.engine)
    if modules:
        code = "; ".join(f"import {m}" for m in modules)
        steps += [_step(runtime, f"import-check {m}", "ok", [py, "-c", code]) for m in modules[:1]]
        steps += [Step(f"import-check {m}", "ok", steps[-1].process) for m in modules[1:]]  # one process checks all
    if backend.preloads_torch:
        argv = [py, "-c", _TORCH_LIBS, ",".join(TORCH_LIBS), ",".join(TORCH_CUDA_LIBS)]
        steps.append(_step(runtime, "torch libraries", REVIEW_TORCH_LIB, argv))
    if runtime.installs and runtime.aiperf_source:
        venv = str(Path(runtime.aiperf_python).parent.parent)
        steps.append(_step(runtime, "aiperf venv", venv, [py, "-m", "venv", "--clear", venv]))
        argv = [runtime.aiperf_python, "-m", "pip", "install", runtime.aiperf_source]
        steps.append(_step(runtime, "aiperf", f"isolated venv from {runtime.aiperf_source}", argv, INSTALL_TIMEOUT_S))
    pin = spec.replay.aiperf_revision or ""
    if runtime.installs and runtime.aiperf_source and runtime.aiperf_source.startswith("/"):
        # a checkout (InferenceX's utils/aiperf), not a pip requirement: its commit is checked and recorded
        argv = [py, "-c", _REVISION, runtime.aiperf_source, pin]
        steps.append(_step(runtime, "aiperf revision", pin or "recorded", argv))
    elif pin:  # nothing here could show which aiperf runs: the point fails before any server starts
        why = f"the recipe pins aiperf {pin}, but this runtime installs aiperf from no checkout (aiperf-source)"
        steps.append(_step(runtime, "aiperf revision", pin, [py, "-c", f"import sys; sys.exit({why!r})"]))
    steps.append(_step(runtime, "aiperf runs", runtime.aiperf_bin, [runtime.aiperf_bin, "--version"]))
    may = "1" if runtime.downloads else "0"
    fetch_timeout = DOWNLOAD_TIMEOUT_S if runtime.downloads else CHECK_TIMEOUT_S
    models = [spec.model, *([spec.draft_model] if spec.draft_model else [])]
    for model in models:
        # no model root: the engine loads the hub id from the hub cache, fetched here first (as the scripts do)
        where = runtime.model_path(model) if runtime.model_root is not None else "-"
        revision = spec.model_revision if model == spec.model else None
        steps.append(_step(runtime, f"download model {model}", "hf cache" if where == "-" else where,
                           [py, "-c", _FETCH, "model", model, where, may, revision or ""], fetch_timeout))  # fmt: skip
        if revision:  # checked by the download's own process
            steps.append(Step("model revision", revision, steps[-1].process, fetch_timeout))
    if spec.replay.kind == "production":
        dataset = DATASETS.get(spec.replay.public_dataset)
        if dataset:
            steps.append(_step(runtime, f"download dataset {dataset}", "hf cache",
                               [py, "-c", _FETCH, "dataset", dataset, "-", may, ""], fetch_timeout))  # fmt: skip
    return steps


def _recipe_steps(spec: ServingSpec, runtime: Runtime) -> list[Step]:
    """The recipe's own provisioning: its pip installs (where the runtime installs), then the upstream scripts it
    runs from the runtime's InferenceX checkout, then its edits of the image's files (a runtime that installs
    nothing or has no checkout fails the point: serving unpatched would measure another engine)."""
    py = runtime.engine_python
    steps: list[Step] = []
    for pip in spec.provision.pip if runtime.installs else ():
        first = len(steps)
        for package in pip.packages:
            item, value = f"pip install {package.split('==')[0]}", " ".join([package, *sorted(pip.flags)])
            if len(steps) == first:
                argv = [py, "-m", "pip", "install", *pip.flags, *pip.packages]
                steps.append(_step(runtime, item, value, argv, INSTALL_TIMEOUT_S))
            else:  # one pip process installs the group
                steps.append(Step(item, value, steps[first].process, INSTALL_TIMEOUT_S))
    checkout = runtime.inferencex_dir()
    for script in spec.provision.scripts:
        item, value = f"run {script.path}", script_value(script.program, script.args, script.sha256)
        if runtime.installs and checkout:
            argv = [py, "-c", _RUN, f"{checkout}/{script.path}", script.sha256, script.program, *script.args]
        else:
            why = f"the recipe runs {script.path} from InferenceX's checkout; this runtime " + (
                "mounts none" if runtime.installs else "installs nothing (its environment is not the job's own)"
            )
            argv = [py, "-c", f"import sys; sys.exit({why!r})"]
        steps.append(_step(runtime, item, value, argv, INSTALL_TIMEOUT_S))
    for edit in spec.provision.edits:
        guard = (edit.unless.sed, ["grep", *edit.unless.grep]) if edit.unless else None
        item, value = f"edit {edit.path}", edit_value(edit.sed, guard)
        if runtime.installs:
            argv = ["bash", "-c", edit_command(edit.path, edit.sed, guard)]
        else:
            why = f"the recipe edits the image's {edit.path}; this runtime installs nothing (its environment is not the job's own)"
            argv = [py, "-c", f"import sys; sys.exit({why!r})"]
        steps.append(_step(runtime, item, value, argv))
    for find in spec.provision.find_env:  # a read of the image, on every runtime: the engine's own environment
        search = find_search(find.roots, find.tests)
        steps.append(_step(runtime, f"find-env {find.name}", search, [py, "-c", _FIND, find.name, search]))
    return steps


def review_env(spec: ServingSpec) -> dict[str, dict[str, str]]:
    """The env provisioning gives each process, as render shows it (the directory or file found on the node named)."""
    env = _torch_env(spec, {
        "ld_preload": ":".join(f"{REVIEW_TORCH_LIB}/{name}" for name in TORCH_LIBS),
        "ld_library_path": REVIEW_TORCH_LIB,
    })  # fmt: skip
    found = {find.name: review_found(find.name) for find in spec.provision.find_env}
    return _merged(env, {"engine": found} if found else {})


def review_found(name: str) -> str:
    """What render shows for a find-env's file, which only the search on the node knows (set only where it finds one)."""
    return f"${name}"


def _merged(env: dict[str, dict[str, str]], more: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    return {name: {**env.get(name, {}), **more.get(name, {})} for name in {**env, **more}}


def _torch_env(spec: ServingSpec, found: dict[str, str]) -> dict[str, dict[str, str]]:
    """LMCache's compiled extension links torch's libraries, which are not on the loader's path: the server
    preloads them (its forked workers import lmcache afresh) and both it and the engine's connector find
    them on LD_LIBRARY_PATH (PR #2597)."""
    if not spec.implementation.backend.preloads_torch:
        return {}
    path = {"LD_LIBRARY_PATH": found["ld_library_path"]}
    servers = spec.implementation.backend.server_names(spec.backend)
    return {**{name: {"LD_PRELOAD": found["ld_preload"], **path} for name in servers}, "engine": dict(path)}


# What the servers' start needs answered first: the env of torch's libraries and of a find-env, the model the engine
# loads. Pip installs and upstream scripts change the environment, so they run before anything else, one after another.
_BEFORE_SERVERS = ("torch libraries", "download model ", "find-env ")
_INSTALLS = ("pip install", "aiperf venv", "run ")


def _installs(step: Step) -> bool:
    return step.item.startswith(_INSTALLS) or step.item == "aiperf"


@dataclass
class _Started:
    step: Step
    managed: Managed
    deadline: float  # monotonic


@dataclass
class Provisioning:
    """Provisioning under way: the installs done, the checks started side by side. `provisioned.env` is known
    once `start` returns (the servers' start needs it); `finish` waits for the rest and fills the record."""

    spec: ServingSpec
    supervisor: Supervisor
    started: list[_Started] = field(default_factory=list)  # one per process, in plan order
    provisioned: Provisioned = field(default_factory=Provisioned)
    codes: dict[int, int] = field(default_factory=dict)  # exit codes of the started steps waited for, by index

    def _code(self, index: int) -> int:
        if index not in self.codes:
            item = self.started[index]
            try:
                code = self.supervisor.wait(item.managed, timeout_s=max(0.0, item.deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise PointFailed(f"provision: {item.step.item} took over {item.step.timeout_s:.0f} s") from None
            self.codes[index] = code
            if code == 0:
                _read(self.spec, item.step, _lines(item), self.provisioned)
        return self.codes[index]

    def wait_for(self, indexes: list[int]) -> None:
        """Wait for these started steps. When one failed, the first failed step in plan order fails the point,
        as if they had run one after another (a version mismatch, not the import it breaks, is the cause)."""
        failed = [i for i in indexes if self._code(i) != 0]
        if failed:
            first = next(i for i in range(min(failed) + 1) if self._code(i) != 0)
            item = self.started[first]
            raise PointFailed(
                f"provision: {item.step.item} failed: {(_lines(item) or [f'exit {self.codes[first]}'])[-1]}"
            )

    def finish(self) -> Provisioned:
        """Every step's answer, one record per process in plan order (the lock's); the first failed step fails the
        point."""
        self.wait_for(list(range(len(self.started))))
        self.provisioned.record = [
            {"step": item.step.item, "argv": item.step.process.argv, "result": (_lines(item) or [""])[-1]}
            for item in self.started
        ]
        return self.provisioned


def _lines(item: _Started) -> list[str]:
    return item.managed.log_tail(20).strip().splitlines()


def _read(spec: ServingSpec, step: Step, lines: list[str], out: Provisioned) -> None:
    """What a step's output says, into `out`."""
    if step.item.startswith("version "):
        out.versions.update(_json_line(lines))
    elif step.item == "aiperf revision":
        out.aiperf_revision = _json_line(lines).get("aiperf_revision")
    elif step.item.startswith("download model "):
        out.model_revision = _json_line(lines).get("model_revision", out.model_revision)
    elif step.item == "torch libraries":
        found = _json_line(lines)
        out.env = _merged(out.env, _torch_env(spec, {k: str(v) for k, v in found.items()}))
    elif step.item.startswith("find-env "):
        out.env = _merged(out.env, {"engine": {k: str(v) for k, v in _json_line(lines).items()}})


def start(spec: ServingSpec, runtime: Runtime, supervisor: Supervisor) -> Provisioning:
    """Run the installs one after another, then start every check at once (each answers on its own), and wait
    for those the servers' start needs (`_BEFORE_SERVERS`); the others answer in `finish`."""
    provisioning = Provisioning(spec, supervisor)
    started = provisioning.started
    names: set[str] = set()
    for step in plan(spec, runtime):
        if step.process.name in names:  # one import check covers several modules; one pip installs a group
            continue
        names.add(step.process.name)
        if _installs(step):  # no check reads the environment while an install changes it
            provisioning.wait_for(list(range(len(started))))
        managed = supervisor.start(step.process.name, step.process.argv, step.process.env, base_env=dict(os.environ))
        started.append(_Started(step, managed, time.monotonic() + step.timeout_s))
        if _installs(step):  # the environment the next steps check is the one this step leaves
            provisioning.wait_for(list(range(len(started))))
    provisioning.wait_for([i for i, item in enumerate(started) if item.step.item.startswith(_BEFORE_SERVERS)])
    return provisioning


def run(spec: ServingSpec, runtime: Runtime, supervisor: Supervisor) -> Provisioned:
    """Every step, its checks side by side; the first step in plan order that fails fails the point with its
    last line."""
    return start(spec, runtime, supervisor).finish()


def _json_line(lines: list[str]) -> dict[str, Any]:
    for line in reversed(lines):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            return data
    return {}
