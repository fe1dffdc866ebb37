"""Run a point's InferenceX launcher (runners/launch_<runner>.sh), unchanged, under recording stand-ins.

InferenceX's workflow (.github/workflows/benchmark-tmpl.yml, step "Launch job script") runs
`bash ./runners/launch_${RUNNER_NAME%%_*}.sh` in its checkout with the job's env. Here the step's own lines
run up to that one, in a workspace whose entries link to DIR's, with the point's workflow env
(workflow_env: its inputs; the literal entries of the workflow's `env:` block and the step's `env:` read
from DIR's file when it has one), the first runner of the cluster's label in DIR's configs/runners.yaml as
RUNNER_NAME, and a PATH whose first directory holds stand-ins for Slurm, enroot and the few tools a
launcher runs around them (LAUNCH_STANDINS). Each stand-in records its argv and env and does the least the
launcher needs: salloc grants allocation STANDIN_JOB_ID, squeue by job name prints it, sbatch submits it,
everything else exits 0. No srun runs its command: the script the container srun starts is what
`capture` runs on its own.

From the records: the Slurm request (each salloc/sbatch option), the container (each --container-* flag of
the srun that starts the benchmark script; mounts by target) and the env that srun hands the container
(with --export=ALL, the launcher's whole env, plus the assignments --export names).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from slurmx import engines
from slurmx.config.srt import minutes
from slurmx.plan import Point

WORKFLOW = Path(".github/workflows/benchmark-tmpl.yml")
RUNNERS = Path("configs/runners.yaml")
STANDIN_JOB_ID = "4242"  # the allocation salloc grants (a launcher's PORT or cache dirs may be made from it)
LAUNCH_STANDINS = (
    "salloc", "sbatch", "srun", "scancel", "squeue", "sinfo", "scontrol", "sbcast",
    "enroot", "unsquashfs", "docker", "flock", "tar", "sudo", "nvidia-smi", "rocm-smi", "amd-smi",
)  # fmt: skip
# the cache locations a launcher hands the container, which every process of the script inherits: compared
# as env facts of each upstream process (everything else the script gets from outside is its base)
# the hub cache, aiperf's dataset cache and each engine's own (engines' cache_env)
CACHE_ENV = (
    "HF_HUB_CACHE",
    "AIPERF_DATASET_MMAP_CACHE_DIR",
    *(n for e in engines.REGISTRY.values() for n in e.cache_env),
)
MODEL_PATH = "$MODEL_PATH"  # as facts.MODEL_PATH: where each side keeps the weights
LAUNCHER = "launcher"  # the process name of the launcher-level facts
# options that name, log or shape the allocation's bookkeeping, not what it asks for: not compared
SLURM_PLUMBING = {
    "--job-name", "--no-shell", "--output", "--error", "--open-mode", "--array", "--wckey", "--parsable", "--quiet",
}  # fmt: skip
_SHORT = {
    "-N": "--nodes", "-n": "--ntasks", "-p": "--partition", "-A": "--account", "-t": "--time",
    "-c": "--cpus-per-task", "-w": "--nodelist", "-x": "--exclude", "-C": "--constraint", "-J": "--job-name",
    "-G": "--gpus", "-q": "--qos", "-o": "--output", "-e": "--error",
}  # fmt: skip
_NOISE = {"SHLVL", "_", "PWD", "OLDPWD", "PATH", "LAUNCH_LOG", "SHELLOPTS", "PS4"}
_LAUNCH_LINE = re.compile(r"bash \./runners/launch_")

_STANDIN = """#!/bin/sh
rec="$LAUNCH_LOG/$(date +%s%N).$$.{name}"
printf '%s\\0' "$@" > "$rec.argv"
env -0 > "$rec.env"
{action}exit 0
"""
_ACTIONS = {
    "salloc": f'echo "salloc: Granted job allocation {STANDIN_JOB_ID}" >&2\n',
    "sbatch": f'echo "Submitted batch job {STANDIN_JOB_ID}"\n',
    "squeue": f'case " $* " in *" --name"*|*" -n "*) echo {STANDIN_JOB_ID};; esac\n',
}


def workflow_env(point: Point) -> dict[str, str]:
    """What InferenceX's workflow (benchmark-tmpl.yml) makes of this point's inputs: its job env's entries
    built from them, and the launch step's RESULT_FILENAME and GPU_COUNT (INFERENCEX_FLOW.md). The
    workflow's literal entries (HF_HUB_CACHE, RESULT_DIR, ...) are read from DIR's file (workflow_constants)."""
    backend = point.kv_offload_backend
    agentic = point.scenario == "agentic-coding"
    return {
        "MODEL": point.model,
        "MODEL_PREFIX": point.model_prefix,
        "PRECISION": point.precision,
        "FRAMEWORK": point.framework,
        "IMAGE": point.image,
        "TP": str(point.tp),
        "GPU_COUNT": str(point.tp * point.pp * point.pcp_size),  # the step's GPU_COUNT=$((TP * PP_SIZE * PCP_SIZE))
        "PP_SIZE": str(point.pp),
        "DCP_SIZE": str(point.dcp_size),
        "PCP_SIZE": str(point.pcp_size),
        "EP_SIZE": str(point.ep),
        "DP_ATTENTION": "true" if point.dp_attn else "false",
        "CONC": str(point.conc),
        "SPEC_DECODING": point.spec_decoding,
        "KV_OFFLOADING": point.kv_offloading,
        "KV_OFFLOAD_BACKEND": backend.name if backend else "",
        "KV_OFFLOAD_BACKEND_METADATA": json.dumps(backend.model_dump() if backend else {}),
        "ROUTER_METADATA": "",
        "TOTAL_CPU_DRAM_GB": str(point.total_cpu_dram_gb),
        "DURATION": str(point.duration_s or 3600),
        "RESULT_FILENAME": point.exp_name,
        "EXP_NAME": point.exp_name,
        "RUNNER_TYPE": point.runner.removeprefix("cluster:"),
        "SCENARIO_TYPE": point.scenario,
        "SCENARIO_SUBDIR": "agentic/" if agentic else "fixed_seq_len/",
        "IS_AGENTIC": "1" if agentic else "0",
        "HF_TOKEN": "hf_standin",
        "EVAL_ONLY": "false",
    }


@dataclass(frozen=True)
class Call:
    name: str
    argv: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class Srun:
    """An srun's options (in order, short ones by their long names), and the command it starts."""

    options: list[tuple[str, str | None]]
    command: list[str]

    def get(self, name: str) -> str | None:
        return next((v for k, v in self.options if k == name), None)

    def has(self, name: str) -> bool:
        return any(k == name for k, _ in self.options)


@dataclass(frozen=True)
class Launch:
    """What one run of a launcher did: every stand-in call, in order, and the env it was started with."""

    launcher: Path
    given: dict[str, str]  # the env the workflow's step gave it
    calls: list[Call]
    returncode: int
    log: str
    work: str = ""  # the run's work dir, with the runner's home and workspace in it (gone after the run)
    workflow: bool = False  # DIR's workflow was read (its constants and launch step); else the point's env alone
    why_not: str | None = None  # why no facts: the launcher did not reach its container srun

    @property
    def paths(self) -> dict[str, str]:
        """The run's own paths as placeholders: the staged model the launcher points MODEL_PATH at (as the
        script capture compares it), the runner's workspace and home, the work dir."""
        model = self.handed().get("MODEL_PATH")
        staged = {model.rstrip("/"): MODEL_PATH} if model and model.startswith("/") else {}
        work = {f"{self.work}/workspace": "$GITHUB_WORKSPACE", f"{self.work}/home": "$HOME", self.work: "<launch>"}
        return {**staged, **work} if self.work else staged

    def container(self) -> tuple[Call, Srun] | None:
        """The srun that starts the benchmark script in the container."""
        for call in self.calls:
            if call.name != "srun":
                continue
            srun = parse_options(call.argv)
            if srun.has("--container-image") and srun.command[:1] == ["bash"] and len(srun.command) > 1:
                return call, srun
        return None

    def handed(self) -> dict[str, str]:
        """The env the container srun hands the script: with --export=ALL its own env plus the named
        assignments; with a list, only the variables it names (Slurm's own SLURM_* are not modelled)."""
        found = self.container()
        if found is None:
            return {}
        call, srun = found
        parts = (srun.get("--export") or "ALL").split(",")
        env = dict(call.env) if "ALL" in parts else {}
        for part in parts:
            name, eq, value = part.partition("=")
            if eq:
                env[name] = value
            elif part not in ("ALL", "NONE", "NIL") and part in call.env:
                env[part] = call.env[part]
        return {k: v for k, v in env.items() if k not in _NOISE}

    def exports(self) -> dict[str, str]:
        """What the launcher hands the container beyond the env it was given."""
        return {k: v for k, v in self.handed().items() if self.given.get(k) != v}

    def mounts(self) -> dict[str, str]:
        """The container srun's mounts, target -> source (trailing slashes dropped; a bare path mounts itself)."""
        found = self.container()
        mounts: dict[str, str] = {}
        for mount in (found[1].get("--container-mounts") or "").split(",") if found else []:
            source, _, rest = mount.partition(":")
            if source:
                mounts[_path(rest.partition(":")[0] or source)] = _path(source)
        return mounts

    def checkout_at(self, target: str) -> bool:
        """Whether the container srun mounts the workflow's checkout ($GITHUB_WORKSPACE, checked out with its
        submodules: utils/aiperf) at `target`."""
        checkout = self.given.get("GITHUB_WORKSPACE")
        return checkout is not None and self.mounts().get(target) == _path(checkout)

    def script(self) -> str | None:
        """The benchmark script the container srun runs (relative to the workspace)."""
        found = self.container()
        return found[1].command[1] if found else None


def runner_name(tree: Path, point: Point) -> str:
    """The workflow's RUNNER_NAME: the first runner of the point's label in DIR's runners.yaml (else the
    cluster name with a _0, the runners' own naming)."""
    cluster = point.runner.removeprefix("cluster:")
    with contextlib.suppress(OSError, yaml.YAMLError, AttributeError, TypeError, IndexError):
        labels = yaml.safe_load((tree / RUNNERS).read_text()).get("labels", {})
        runners = labels.get(point.runner) or labels.get(cluster)
        if runners:
            return str(runners[0])
    return f"{cluster}_0"


def launcher_path(tree: Path, point: Point) -> Path:
    """The launcher the workflow runs for this point: runners/launch_${RUNNER_NAME%%_*}.sh."""
    return tree / "runners" / f"launch_{runner_name(tree, point).split('_')[0]}.sh"


def _workflow(tree: Path) -> dict[str, object] | None:
    try:
        data = yaml.safe_load((tree / WORKFLOW).read_text())
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def workflow_constants(workflow: dict[str, object]) -> dict[str, str]:
    """The literal entries of the workflow's job-level `env:` block (HF_HUB_CACHE, RESULT_DIR, ...); the
    entries made from inputs are the point's (workflow_env)."""
    env = workflow.get("env")
    return {str(k): str(v) for k, v in env.items() if "${{" not in str(v)} if isinstance(env, dict) else {}


_EXPR = re.compile(r"\$\{\{\s*([\w.-]+)\s*\}\}")


def launch_step(workflow: dict[str, object], known: Mapping[str, str]) -> tuple[dict[str, str], str] | None:
    """The workflow's launch step: its env (the entries whose expressions are only `env.X`, `runner.name` or
    `inputs.runner`, filled from `known`) and its lines up to the launcher's start. None: no such step, or an
    expression before the launch this does not evaluate."""
    jobs = workflow.get("jobs")
    benchmark = jobs.get("benchmark") if isinstance(jobs, dict) else None
    steps = benchmark.get("steps") if isinstance(benchmark, dict) else None
    for step in steps if isinstance(steps, list) else []:
        run = step.get("run") if isinstance(step, dict) else None
        if not isinstance(run, str) or not _LAUNCH_LINE.search(run):
            continue
        lines = run.splitlines()
        end = next(i for i, line in enumerate(lines) if _LAUNCH_LINE.search(line))
        if any("${{" in line for line in lines[: end + 1]):
            return None
        env = {}
        for name, value in (step.get("env") or {}).items():
            text = _EXPR.sub(lambda m: known.get(m.group(1), m.group(0)), str(value))
            if "${{" not in text:
                env[str(name)] = text
        return env, "\n".join(lines[: end + 1]) + "\n"
    return None


def _stand_ins(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True)
    for name in LAUNCH_STANDINS:
        wrapper = bin_dir / name
        wrapper.write_text(_STANDIN.replace("{name}", name).replace("{action}", _ACTIONS.get(name, "")))
        wrapper.chmod(0o755)
    sleep = bin_dir / "sleep"  # a launcher's polls end at once (their condition is met by the stand-ins)
    sleep.write_text("#!/bin/sh\nexit 0\n")
    sleep.chmod(0o755)


def _workspace(tree: Path, workspace: Path) -> None:
    """The workflow's checkout: each entry of DIR linked (the launcher reads benchmarks/, runners/, ...), so
    what a launcher writes into its workspace lands here, never in DIR."""
    workspace.mkdir(parents=True)
    for entry in tree.iterdir():
        (workspace / entry.name).symlink_to(entry.resolve())


def _env0(data: bytes) -> dict[str, str]:
    pairs = data.decode(errors="replace").split("\0")
    return dict(p.split("=", 1) for p in pairs if "=" in p)


def _calls(log: Path) -> list[Call]:
    calls = []
    for argv_file in sorted(log.glob("*.argv"), key=lambda p: (int(p.name.split(".")[0]), p.name)):
        name = argv_file.name.split(".")[2]
        argv = argv_file.read_bytes().decode(errors="replace").split("\0")[:-1]
        env_file = argv_file.with_suffix(".env")
        calls.append(Call(name, argv, _env0(env_file.read_bytes()) if env_file.exists() else {}))
    return calls


def run_launcher(tree: Path, point: Point, timeout_s: float = 60) -> Launch:
    """Run the point's launcher as the workflow's launch step does; what it started."""
    launcher = launcher_path(tree, point)
    workflow = _workflow(tree)
    runner = runner_name(tree, point)
    with tempfile.TemporaryDirectory(prefix="slurmx-launch-") as work_dir:
        work = Path(work_dir)
        bin_dir, home, workspace, log = work / "bin", work / "home", work / "workspace", work / "log"
        job = {**workflow_env(point), **(workflow_constants(workflow) if workflow else {})}
        known = {**{f"env.{k}": v for k, v in job.items()}, "runner.name": runner, "inputs.runner": point.runner}
        step = launch_step(workflow, known) if workflow else None
        step_env, lines = step or ({}, f"bash ./runners/{launcher.name}\n")
        given = {
            **job,
            **step_env,
            "RUNNER_NAME": runner,
            "GITHUB_WORKSPACE": str(workspace),
            "GITHUB_ENV": str(work / "github_env"),
            "HOME": str(home),
            "USER": "runner",
            "LANG": "C.UTF-8",
            "TMPDIR": str(work / "tmp"),
        }
        if point.multinode:
            return Launch(launcher, given, [], 0, "", why_not=f"{launcher.name}: a multinode point (not run)")
        if not launcher.is_file():
            return Launch(launcher, given, [], 0, "", why_not=f"{launcher.name}: not in {tree / 'runners'}")
        _stand_ins(bin_dir)
        _workspace(tree, workspace)
        for directory in (home, log, work / "tmp"):
            directory.mkdir()
        # the env the step hands the launcher (after its own exports: RESULT_FILENAME, GPU_COUNT)
        dump = work / "given.env"
        launch_line = lines.rstrip("\n").rsplit("\n", 1)
        script = "\n".join([*launch_line[:-1], f"env -0 > {dump}", launch_line[-1]]) + "\n"
        env = {**given, "PATH": f"{bin_dir}:/usr/bin:/bin", "LAUNCH_LOG": str(log)}
        proc = subprocess.Popen(
            ["bash", "-e", "-c", script], cwd=workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, text=True,
        )  # fmt: skip
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            output = f"(timed out after {timeout_s:.0f} s)"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if dump.exists():
            given = {k: v for k, v in _env0(dump.read_bytes()).items() if k not in _NOISE}
        launch = Launch(launcher, given, _calls(log), proc.returncode, output, str(work), workflow is not None)
    if launch.container() is None:
        return replace(launch, why_not=_why_not(launch))
    return launch


def _why_not(launch: Launch) -> str:
    """One line: the launcher, that it reached no container srun, and the last step it took."""
    traced = [line for line in launch.log.splitlines() if line.startswith("+")]
    last = traced[-1] if traced else next(iter(launch.log.strip().splitlines()[-1:]), "")
    if not last and launch.calls:
        last = " ".join([launch.calls[-1].name, *launch.calls[-1].argv])
    return f"{launch.launcher.name}: exited {launch.returncode} before a container srun; last step: {last[:200]}"


def parse_options(argv: list[str]) -> Srun:
    """Options up to the first word that is not one (the command); `--x=v`, `--x v`, `-N 1`, `-N1`."""
    options: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        token = argv[i]
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            options.append((name, value if eq else None))
        else:
            name = _SHORT.get(token[:2], token[:2])
            if len(token) > 2:
                options.append((name, token[2:].lstrip("=")))
            elif token[:2] in _SHORT and i + 1 < len(argv):
                options.append((name, argv[i + 1]))
                i += 1
            else:
                options.append((name, None))
        i += 1
    return Srun(options, argv[i + (1 if i < len(argv) and argv[i] == "--" else 0) :])


def slurm_facts(options: list[tuple[str, str | None]]) -> dict[tuple[str, str], str]:
    """`slurm --option` = value ('' for a bare flag) of an allocation's request; bookkeeping left out."""
    facts: dict[tuple[str, str], str] = {}
    for name, value in options:
        if name in SLURM_PLUMBING:
            continue
        text = "" if value is None else minutes(value) if name == "--time" else value
        item = f"slurm {name}"
        while (LAUNCHER, item) in facts:
            item += "#"
        facts[(LAUNCHER, item)] = text
    return facts


def _path(value: str) -> str:
    """A path without its trailing slash (a mount's source or target means the same either way)."""
    return (value.rstrip("/") or "/") if value.startswith("/") else value


def container_facts(srun: Srun, paths: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """`container --container-X` per pyxis flag (a switch as yes/no, whichever spelling), each mount as
    `container --container-mounts TARGET` = source[:options] (a set: order and trailing slashes not
    compared), and the srun's --export mode."""
    facts: dict[tuple[str, str], str] = {}
    for name, value in srun.options:
        if name == "--export":
            facts[(LAUNCHER, "srun --export")] = ",".join(p for p in (value or "ALL").split(",") if "=" not in p)
        elif name == "--container-mounts":
            for mount in (value or "").split(","):
                source, _, rest = _replace(mount, paths).partition(":")
                target, _, options = rest.partition(":")
                text = _path(source) + (f":{options}" if options else "")
                facts[(LAUNCHER, f"container --container-mounts {_path(target or source)}")] = text
        elif name.startswith("--no-container-"):
            facts[(LAUNCHER, "container --" + name.removeprefix("--no-"))] = "no"
        elif name.startswith("--container-"):
            text = "yes" if value is None else _path(_replace(value, paths))
            facts[(LAUNCHER, f"container {name}")] = text
    return facts


def _replace(value: str, paths: Mapping[str, str]) -> str:
    for real, placeholder in paths.items():
        value = value.replace(real, placeholder)
    return value


def launch_facts(launch: Launch) -> dict[tuple[str, str], str]:
    """The launcher-level facts of an upstream run: its Slurm request, the container, the env it exports."""
    facts: dict[tuple[str, str], str] = {}
    for call in launch.calls:
        if call.name in ("salloc", "sbatch"):
            facts.update(slurm_facts(parse_options(call.argv).options))
    found = launch.container()
    if found is not None:
        facts.update(container_facts(found[1], launch.paths))
    for name, value in launch.exports().items():
        facts[(LAUNCHER, f"env {name}")] = _replace(value, launch.paths)
    return facts


def inherited(launch: Launch) -> dict[str, str]:
    """The cache locations the container gets (CACHE_ENV), with the run's paths as the capture's: the
    runner's home and workspace are the capture's own ({work}/home, {work}/workspace)."""
    handed = launch.handed()
    own = {f"{launch.work}/{name}": "{work}/" + name for name in ("home", "workspace")} if launch.work else {}
    return {k: sandboxed(_replace(handed[k], own)) for k in CACHE_ENV if k in handed}


SANDBOX = "{work}/root"  # a cluster path a script may write to (mkdir, a lock file), inside the capture's work dir


def sandboxed(value: str) -> str:
    """A cluster path under the capture's SANDBOX, so a script never touches this machine's /mnt or /raid (facts
    compare it as the cluster path again: facts.capture_paths)."""
    return SANDBOX + value if value.startswith("/") else value
