"""Run an upstream InferenceX agentic script for one point under recording stand-ins; return what it started.

The script, its benchmark_lib.sh and the files beside it are copied into InferenceX's tree layout (the
script sources `$(dirname $0)/../../benchmark_lib.sh` and runs siblings such as a container patch script
by `$(dirname $0)/...`) and run by bash, unchanged, with the env InferenceX's
launcher and workflow give a point, and a PATH whose first directory holds stand-ins for every
program the scripts start (slurmx/upstream/standin.py). Each started program's argv and full env is
the reference: what InferenceX really runs, from its own code.

`sleep` on that PATH sleeps 20 ms whatever it is asked: the scripts' sleeps are polls (a server
alive after SIGTERM, a log file not there yet) whose condition the stand-ins meet at once, and at a
second each they were most of the capture's wall time. No stand-in records it; it starts nothing.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from slurmx import engines
from slurmx.node import procscan
from slurmx.plan import Point
from slurmx.upstream.launcher import SANDBOX, Launch, workflow_env
from slurmx.upstream.standin import REAL_BASH, REAL_FIND, REAL_SED, write_checkpoint  # `bash` on PATH: a stand-in

# the servers the scripts start and keep running, by the slurmx process each one is: every engine's, and the
# backends' own (the stand-ins and the facts compared both read this one table)
SERVERS: dict[str, str] = {
    **{program: name for e in engines.REGISTRY.values() for program, name in e.upstream_programs.items()},
    "lmcache": "lmcache",
    "mooncake_master": "mooncake-master",
}
# a server a script starts as a program of its own has a stand-in of that name; one started by a program with leading
# arguments ("python3 -m MODULE") is that program's stand-in, which stays up as a server when those arguments lead
SERVER_STANDINS = tuple(p for p in SERVERS if " " not in p)
SERVER_COMMANDS = tuple(p for p in SERVERS if " " in p)
# the backends' own servers: a script may start one several times (one LMCache server per TP rank)
BACKEND_SERVERS = frozenset({"lmcache", "mooncake_master"})
STANDINS = tuple(dict.fromkeys((
    *SERVER_STANDINS,
    *(p.split()[0] for p in SERVER_COMMANDS),  # `mpirun` of "mpirun ... trtllm-serve" too
    "aiperf", "python3", "python", "hf", "uv", "git", "nvidia-smi", "rocm-smi", "amd-smi", "curl", "nm", "ldd", "apt-get",
    "df",  # /dev/shm as the point's cluster node has it (Upstream.shm_gib); any other path this machine's
    "bash",  # recorded, then the real bash: which of the tree's own scripts the script runs
)))  # fmt: skip
SCRIPT_PROGRAMS = ("bash", "python3", "python")  # what a script runs a file of the tree with
# a sibling script's scratch dir that defaults to a fixed path of this machine (apply_k3_container_patches.sh's
# WS=/tmp/k3_embed): under capture, in the run's own tmp
SCRATCH_ENV = (("WS", "k3_embed"),)
PORT = 8888  # the launchers' srun --export=ALL,PORT=8888
POLL_SLEEP_S = 0.02  # what every `sleep` of the scripts lasts (see above)
# The node's own files some scripts read (the RDMA rails' state under /sys): the programs that read them here
# read the capture's SANDBOX copy instead, which holds what the point's cluster node has (NODE_FILES); a path
# the point's cluster has no entry for reads as absent, as on a node without it. (A bash builtin test of such a
# path, [ -e ... ], still sees this machine's, and a glob of one expands against this machine's names before a
# reader gets them: a name only this machine has reads as absent too.)
HOST_READS = ("/sys/class/infiniband/",)
HOST_READERS = ("grep", "cat")
# The container image's own tree (its CUDA toolkit, its Python's packages), which a script searches: the DSv4 B200/B300
# SGLang scripts `find` Triton's ptxas there for TRITON_PTXAS_PATH. The capture has no image: a `find` naming it is
# recorded (standin._find), never run, and answers with a stand-in of the file it looks for (standin.STANDIN_IMAGE),
# which the script exports as production's container exports the image's (a recipe's provision.find-env). Its globs
# reach find as the script spells them (GLOBIGNORE, set through BASH_ENV, keeps bash from expanding them against this
# machine's own /usr/local/, which one machine has and another has not).
IMAGE_TREES = ("/usr/local/",)
_BASH_ENV = "GLOBIGNORE={patterns}\nshopt -u dotglob\n"  # GLOBIGNORE turns dotglob on: the scripts' globs keep theirs
# The engine image's own files a script edits in place before serving (each engine's image_dirs): `sed` naming one is
# recorded (standin._sed), never run; any other `sed` is the real one
IMAGE_FILES = tuple(dict.fromkeys(d for e in engines.REGISTRY.values() for d in e.image_dirs))
_SED = """#!/bin/sh
for a do
  case $a in {cases}) exec {python} -S -E {standin} tool {name} "$@";; esac
done
exec {program} "$@"
"""
NODE_FILES: dict[str, dict[str, str]] = {
    # InferenceX's Kimi-K3 B300 script picks the first rail whose port 1 is ACTIVE, "order starts at mlx5_0 so a
    # healthy node is unchanged" (kimik3_fp4_b300_vllm_mtp.sh): a healthy B300 node's mlx5_0, in sysfs's format
    "cluster:b300-nv": {"/sys/class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n"},
}
# a reader's argv with each host path moved under the sandbox (POSIX sh: the loop rebuilds "$@")
_READER = """#!/bin/sh
for a do
  shift
  case $a in {cases}) a="{root}$a";; esac
  set -- "$@" "$a"
done
exec {program} "$@"
"""


@dataclass(frozen=True)
class Upstream:
    """Which upstream files a key's points run, and what its launcher exports beyond the workflow's env."""

    script: Path  # the per-model agentic script
    lib: Path  # the benchmark_lib.sh it sources
    # what the key's launcher exports as MODEL_PATH; under "{work}/" a staged stand-in checkpoint (a
    # config.json and one shard: what the scripts' completeness checks look for) in the capture's work dir
    model_path: str
    # what the launcher hands the script beyond the workflow's env that the capture keeps (MODEL=MODEL_PATH
    # where it rewrites MODEL, the cache locations of launcher.CACHE_ENV); "{work}/" as in model_path
    launcher_env: tuple[tuple[str, str], ...] = ()
    launch: Launch | None = None  # the run of the point's launcher these were read from (None: not run)
    # the size of the point's cluster node's /dev/shm in GiB (its profile's node.shm-gib), which `df` reports under
    # capture (all of it free: the node is the point's); None: df of /dev/shm fails, as on a node without one
    shm_gib: int | None = None
    # the launcher's container mounts InferenceX's checkout at /workspace (its default; not for the images that
    # install their engine under /workspace, which it mounts at /ix): the capture's workspace then holds what
    # that mount has that a script tests for, the aiperf submodule (the workflow checks out with submodules).
    # False: the workspace holds no checkout, as under a launcher that mounts it elsewhere or was not run
    checkout_at_workspace: bool = False


@dataclass(frozen=True)
class Started:
    name: str  # the program's name on PATH
    argv: list[str]  # without the program name
    env: dict[str, str]  # the whole env it got
    files: dict[str, str] = field(default_factory=dict)  # a server's: the files its env names (env name -> text)
    start: tuple[int, int] = (0, 0)  # a server's fork (clock tick, pid): the order the script started it in
    reader: tuple[str, ...] = ()  # a read of an image file into a pipe: the program reading it, with its arguments

    def env_delta(self, base: dict[str, str]) -> dict[str, str]:
        """What the script (or benchmark_lib.sh) set beyond the launcher's env."""
        return {k: v for k, v in self.env.items() if base.get(k) != v and k not in _SHELL_NOISE}


def program_of(started: Started, table: Mapping[str, str] = SERVERS) -> str:
    """The key of `table` a started program is: a program with its leading arguments ("python3 -m MODULE") where
    the table has one that its argv begins with, else the program's name."""
    for command in table:
        words = command.split()
        if len(words) > 1 and [started.name, *started.argv[: len(words) - 1]] == words:
            return command
    return started.name


def process_names(started: list[Started], table: Mapping[str, str] = SERVERS) -> list[str | None]:
    """The slurmx process each started program is (`table`: program -> process; None: none): a backend server
    the script started several times is NAME.0, NAME.1, ... in the order the script forked them (their records
    land in no fixed order), as slurmx names its servers."""
    names: list[str | None] = [table.get(program_of(s, table)) for s in started]
    for program in BACKEND_SERVERS:
        runs = sorted((fork_order(s.start, [r.start for r in started if r.name == program]), i)
                      for i, s in enumerate(started) if s.name == program)  # fmt: skip
        for number, (_, i) in enumerate(runs if len(runs) > 1 else []):
            names[i] = f"{names[i]}.{number}"
    return names


# pids count up to the kernel's pid_max (32768 by default, 2**22 at most) and then start again from the bottom
_PID_LIMIT = 1 << 22


def fork_order(start: tuple[int, int], among: list[tuple[int, int]]) -> tuple[int, int]:
    """`start` (clock tick, pid) as a key that sorts forks in the order they happened: within one tick the pid
    counts up, unless it wrapped past pid_max there (pids far apart in one tick: the low ones came after)."""
    tick, pid = start
    pids = [p for t, p in among if t == tick]
    low, high = min(pids, default=pid), max(pids, default=pid)
    wrapped = high - low > 1 << 14 and pid < (low + high) // 2
    return tick, pid + _PID_LIMIT if wrapped else pid


_SHELL_NOISE = {
    "SHLVL", "_", "PWD", "OLDPWD", "BASH_ENV", "STANDIN_LOG", "STANDIN_BIN", "STANDIN_PACKAGES", "STANDIN_SHM_GIB", "STANDIN_SERVERS",
}  # fmt: skip
IMAGE_PACKAGES = ",".join(dict.fromkeys(p for e in engines.REGISTRY.values() for p in e.image_packages))


@dataclass(frozen=True)
class ScriptRun:
    """A file of InferenceX's tree the script ran (`bash "$(dirname "$0")/apply_k3_container_patches.sh"`)."""

    program: str  # bash, python3
    path: str  # relative to the tree
    args: tuple[str, ...]
    sha256: str  # of the file as staged (InferenceX's own)


@dataclass(frozen=True)
class Capture:
    started: list[Started]
    base_env: dict[str, str]
    returncode: int
    log: str
    work_dir: Path = Path()  # where this run's files lay (its result dir, the staged model, the sandbox)
    retried: str | None = None  # a first run's failure, when a second run of the same script passed
    runs: tuple[ScriptRun, ...] = ()  # the tree's own files it ran, in order

    def named(self, name: str) -> list[Started]:
        return [s for s in self.started if s.name == name]

    def failure(self) -> str:
        """Why the script failed, in one line: its exit status and the last line it printed (not a `set -x` trace
        line where there is one: the error a command wrote)."""
        lines = [line.strip() for line in self.log.splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if not line.startswith("+")), lines[-1] if lines else "no output")
        return f"upstream script exited {self.returncode} ({last[:200]})"


def launcher_env(point: Point, upstream: Upstream, result_dir: Path, home: Path) -> dict[str, str]:
    """The env InferenceX's workflow + launcher give the script for this point (INFERENCEX_FLOW.md): the
    cache locations are those its launcher hands the container (upstream.launcher_env, read from a run
    of the launcher), never a stand-in's."""
    return {
        **workflow_env(point),
        "MODEL_PATH": upstream.model_path.replace("{work}", str(home.parent)),
        "RESULT_DIR": str(result_dir),
        "PORT": str(PORT),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        **{k: v.replace("{work}", str(home.parent)) for k, v in upstream.launcher_env},
    }


def _stand_ins(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True)
    standin = Path(__file__).with_name("standin.py")
    for name in STANDINS:
        wrapper = bin_dir / name
        kind = "server" if name in SERVER_STANDINS else "tool"  # a server stand-in stays up until killed
        wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S -E {standin} {kind} {name} "$@"\n')
        wrapper.chmod(0o755)
    sleep = bin_dir / "sleep"
    sleep.write_text(f"#!/bin/sh\nexec /bin/sleep {POLL_SLEEP_S}\n")
    sleep.chmod(0o755)
    for name, program, prefixes in (("sed", REAL_SED, IMAGE_FILES), ("find", REAL_FIND, IMAGE_TREES)):
        cases = "|".join(f"{prefix}*" for prefix in prefixes)
        wrapper = bin_dir / name
        wrapper.write_text(_SED.format(cases=cases, python=sys.executable, standin=standin, name=name, program=program))
        wrapper.chmod(0o755)


def _host_reads(bin_dir: Path, root: Path, runner: str) -> None:
    """Readers of the node's own files (HOST_READS) that read the sandbox's, staged for the point's cluster."""
    for path, text in NODE_FILES.get(runner, {}).items():
        staged = root / path.lstrip("/")
        staged.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(text)
    cases = "|".join(f"{prefix}*" for prefix in HOST_READS)
    for name in HOST_READERS:
        program = shutil.which(name, path="/usr/bin:/bin")
        assert program is not None, f"{name} is not on /usr/bin:/bin"
        reader = bin_dir / name
        reader.write_text(_READER.format(cases=cases, root=root, program=program))
        reader.chmod(0o755)


def _settle(pgid: int, bound_s: float = 30.0) -> None:
    """Wait until every stand-in the script left in the background has recorded itself: a server
    stand-in records, then becomes `sleep`. On a loaded machine the script can end first."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        pending = []
        for pid in procscan.running_by_group([pgid])[pgid]:
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            if comm != "sleep":
                pending.append(pid)
        if not pending:
            return
        time.sleep(0.05)


# captures already run in this process, by what they ran (`fingerprint`): check and import of one command,
# and import's own check of the recipe it wrote, read one run of each point's script, not three
_CAPTURED: dict[str, Capture] = {}


def fingerprint(point: Point, upstream: Upstream) -> str:
    """What a capture's run depends on: the point, what the launcher hands the script, and the bytes of the
    script, the files beside it and benchmark_lib.sh (an edited tree is a new run)."""
    given = (point, upstream.model_path, upstream.launcher_env, upstream.shm_gib, upstream.checkout_at_workspace)
    digest = hashlib.sha256(repr((*given, upstream.script.name)).encode())
    for path in [*sorted(p for p in upstream.script.parent.iterdir() if p.is_file()), upstream.lib]:
        digest.update(f"\0{path.name}\0".encode() + path.read_bytes())
    return digest.hexdigest()


def capture(point: Point, upstream: Upstream, work: Path, timeout_s: float = 120) -> Capture:
    """Run the upstream script for `point` with stand-ins; every program it started, in order. A script that
    fails is run once more in a fresh directory: it is deterministic, so a second run that passes shows the
    first failed on the stand-ins' timing (seen under load), not on upstream; the first failure is kept.
    A run this process has already made of the same inputs is returned again (its paths are its own work dir's,
    gone by then: facts are read from strings, never from its files)."""
    key = fingerprint(point, upstream)
    if key not in _CAPTURED:
        _CAPTURED[key] = _capture_fresh(point, upstream, work, timeout_s)
    return _CAPTURED[key]


def _capture_fresh(point: Point, upstream: Upstream, work: Path, timeout_s: float) -> Capture:
    first = _capture_once(point, upstream, work / "run1", timeout_s)
    if first.returncode == 0:
        return first
    again = _capture_once(point, upstream, work / "run2", timeout_s)
    return replace(again, retried=first.failure()) if again.returncode == 0 else first


def _runs(started: list[Started], tree: Path) -> tuple[ScriptRun, ...]:
    """The staged tree's files among what the script started (while they are still there, for their digest)."""
    runs = []
    for s in started:
        target = Path(s.argv[0]) if s.name in SCRIPT_PROGRAMS and s.argv else None
        if target is not None and target.is_absolute() and target.is_relative_to(tree) and target.is_file():
            digest = hashlib.sha256(target.read_bytes()).hexdigest()
            runs.append(ScriptRun(s.name, str(target.relative_to(tree)), tuple(s.argv[1:]), digest))
    return tuple(runs)


AIPERF_SUBMODULE = "utils/aiperf"  # InferenceX's aiperf fork, a submodule of its checkout
CAPTURE_TREE = "ix"  # where under its work dir a capture stages the script's InferenceX files


def _capture_once(point: Point, upstream: Upstream, work: Path, timeout_s: float) -> Capture:
    tree = work / CAPTURE_TREE
    agentic = tree / "benchmarks" / "single_node" / "agentic"
    agentic.mkdir(parents=True)
    for sibling in upstream.script.parent.iterdir():  # what it runs from its own directory, as InferenceX has it
        if sibling.is_file() and sibling != upstream.script:
            shutil.copy(sibling, agentic / sibling.name)
    script = agentic / f"{point.model_prefix}_{point.precision}_script.sh"
    script.write_text(upstream.script.read_text())
    (work / "ix" / "benchmarks" / "benchmark_lib.sh").write_text(upstream.lib.read_text())
    if upstream.model_path.startswith("{work}/"):
        write_checkpoint(upstream.model_path.replace("{work}", str(work)))
    bin_dir, home, workspace = work / "bin", work / "home", work / "workspace"
    _stand_ins(bin_dir)
    _host_reads(bin_dir, Path(SANDBOX.replace("{work}", str(work))), point.runner)
    home.mkdir()
    # the lib where a multinode replay script sources it ($INFMAX_CONTAINER_WORKSPACE/benchmarks/)
    (workspace / "benchmarks").mkdir(parents=True)
    (workspace / "benchmarks" / "benchmark_lib.sh").write_text(upstream.lib.read_text())
    if upstream.checkout_at_workspace:  # the checkout's aiperf submodule, which a script tests the mount by
        (workspace / AIPERF_SUBMODULE).mkdir(parents=True)
    log = work / "standin.jsonl"
    bash_env = work / "bash_env"
    bash_env.write_text(_BASH_ENV.format(patterns=shlex.quote(":".join(f"{tree}*" for tree in IMAGE_TREES))))
    base = launcher_env(point, upstream, work / "result", home)
    env = {
        **base,
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "TMPDIR": str(work / "tmp"),
        "INFMAX_CONTAINER_WORKSPACE": str(workspace),
        "BASH_ENV": str(bash_env),
        "STANDIN_LOG": str(log),
        "STANDIN_BIN": str(bin_dir),
        "STANDIN_PACKAGES": IMAGE_PACKAGES,
        "STANDIN_SERVERS": ",".join(SERVER_COMMANDS),
        **({"STANDIN_SHM_GIB": str(upstream.shm_gib)} if upstream.shm_gib is not None else {}),
    }
    scratch = {name: str(work / "tmp" / leaf) for name, leaf in SCRATCH_ENV}
    env.update(scratch)
    (work / "tmp").mkdir()
    proc = subprocess.Popen(
        [REAL_BASH, str(script)], cwd=workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True, text=True,
    )  # fmt: skip
    timed_out = False
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        _settle(proc.pid)
    except subprocess.TimeoutExpired:  # a failed run like any other (capture() runs it once more), not a traceback
        timed_out = True
    finally:
        # the stand-in servers the script left running (its own job wrapper would kill them)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if timed_out:
            output = proc.communicate()[0] + f"\nslurmx: the script ran past {timeout_s:.0f} s under stand-ins\n"
        proc.wait()
    started = []
    for line in log.read_text().splitlines() if log.exists() else []:
        row = ast.literal_eval(line)
        started.append(Started(row["name"], row["argv"], row["env"], row.get("files", {}), row.get("start", (0, 0)),
                               tuple(row.get("reader") or ())))  # fmt: skip
    launcher_base = {**base, "PATH": env["PATH"], "TMPDIR": env["TMPDIR"],
                     "INFMAX_CONTAINER_WORKSPACE": env["INFMAX_CONTAINER_WORKSPACE"], **scratch}  # fmt: skip
    return Capture(started, launcher_base, proc.returncode, output, work, runs=_runs(started, tree))
