"""Upstream capture vs `slurmx render`, as facts: (process, item) -> value, and the differences between them.

A fact is one flag, one env variable or one provisioning action of one process:
`engine --port` = "8888", `engine env PYTHONHASHSEED` = "0", `engine --kv-transfer-config
/kv_connector_module_path` = "lmcache...", `provision pip install` = "lmcache==0.5.1 ...".
JSON flag values are compared leaf by leaf; numbers compare by value (0.10 == 0.1, 300 == 300.0);
flag order does not matter to vLLM, LMCache or aiperf and is not compared.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from slurmx.node import provision
from slurmx.node.provision import edit_value, find_search, script_value
from slurmx.process import Process
from slurmx.runtimes.pyxis import PyxisRuntime
from slurmx.slurm.sbatch import render_sbatch
from slurmx.submit.arrays import array_plans
from slurmx.submit.resolved import Resolved
from slurmx.upstream.capture import SERVERS, Capture, Started, process_names
from slurmx.upstream.launcher import CACHE_ENV, LAUNCHER, SANDBOX, container_facts, parse_options, slurm_facts
from slurmx.upstream.standin import find_answer

# Upstream program -> slurmx process name.
PROCESS = {**SERVERS, "aiperf": "replay"}
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE]-?\d+)?")
_EXPORT = re.compile(r"export (\w+)=(\S*)$")
# the torch lib dir the stand-in python3 reports (standin.FAKE_TORCH_LIB)
STANDIN_TORCH_LIB = "/standin/torch/lib"

Facts = dict[tuple[str, str], str]


def number(text: str) -> str:
    if _NUMBER.fullmatch(text):
        value = float(text)
        return str(int(value)) if value.is_integer() else repr(value)
    return text


def _leaves(prefix: str, value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for key, sub in value.items():
            out.update(_leaves(f"{prefix}/{key}", sub))
        return out
    if isinstance(value, bool) or value is None:
        return {prefix: json.dumps(value)}
    if isinstance(value, (int, float)):
        return {prefix: number(str(value))}
    if isinstance(value, str):
        return {prefix: value}
    return {prefix: json.dumps(value, separators=(",", ":"))}


MULTI_VALUE_FLAGS = frozenset({"--server-metrics"})  # aiperf's: one flag, several URLs


def argv_facts(process: str, argv: list[str], paths: Mapping[str, str]) -> Facts:
    """Flags as facts ('' for a bare flag); positionals by index; JSON values leaf by leaf."""
    facts: Facts = {}
    positional = 0
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            if not eq and name in MULTI_VALUE_FLAGS:  # every value up to the next flag, as one fact
                values = list(itertools.takewhile(lambda a: not a.startswith("--"), argv[i + 1 :]))
                value, i = " ".join(values), i + len(values)
            elif not eq:
                has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
                value = argv[i + 1] if has_value else ""
                i += 1 if has_value else 0
            item = name
            while (process, item) in facts:
                item += "#"  # a repeated flag
            if value[:1] in "{[" and value:
                leaves = _leaves(item, json.loads(value)).items()  # a path inside JSON (a draft model) too
                facts.update({(process, k): _paths(v, paths) for k, v in leaves})
            else:
                facts[(process, item)] = number(_paths(value, paths))
        else:
            facts[(process, f"arg{positional}")] = _paths(token, paths)
            positional += 1
        i += 1
    return facts


def _paths(value: str, paths: Mapping[str, str]) -> str:
    for real, placeholder in paths.items():
        value = value.replace(real, placeholder)
    return value


def env_facts(process: str, env: Mapping[str, str], paths: Mapping[str, str]) -> Facts:
    return {(process, f"env {k}"): _paths(v, paths) for k, v in env.items()}


def _parsed(text: str) -> Any:
    """A config file's content: JSON, else YAML (trtllm-serve's --config), else its text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def file_facts(process: str, files: Mapping[str, str], paths: Mapping[str, str]) -> Facts:
    """The files a process's env or flags name (env name or flag -> text): a JSON or YAML mapping leaf by leaf
    (`file NAME/key`), any other as its whole text (`file NAME`)."""
    facts: Facts = {}
    for name, text in files.items():
        value = _parsed(text)
        leaves = _leaves(f"file {name}", value) if isinstance(value, dict) else {f"file {name}": text}
        facts.update({(process, k): _paths(v, paths) for k, v in leaves.items()})
    return facts


# the value of a flag that names a file each side writes where it likes (trtllm-serve's `--config ser.yaml` beside
# the script, slurmx's in the point's run dir): its content is compared key by key (`file FLAG/...`), not its path
NAMED_FILE = "<file compared by its content>"


def named_file_flags(process: str, flags: Mapping[str, str], facts: Facts) -> Facts:
    """The facts of the flags among `flags` (flag -> text of the file it names) with the path as NAMED_FILE."""
    return {(process, f): NAMED_FILE for f in flags if f.startswith("--") and (process, f) in facts}


def _is_import_check(code: str) -> list[str]:
    """The modules a `python -c` of import statements only checks (`import m` or `from m import name`)."""
    statements = [s.strip() for s in code.split(";") if s.strip()]
    if statements and all(re.fullmatch(r"import [\w.]+|from [\w.]+ import \w+", s) for s in statements):
        return [s.split()[1] for s in statements]
    return []


PIP_VALUE_OPTIONS = frozenset({"--find-links", "-f", "--index-url", "-i", "--extra-index-url", "--constraint", "-c"})


def _pip_words(args: list[str]) -> list[str]:
    """pip's arguments with each option that takes a value joined to it (`--find-links=URL`): never a package."""
    words: list[str] = []
    it = iter(args)
    for arg in it:
        words.append(f"{arg}={next(it, '')}" if arg in PIP_VALUE_OPTIONS else arg)
    return words


def provision_facts(started: list[Started], paths: Mapping[str, str]) -> Facts:
    """What the script installs, checks and downloads before serving (the provisioning step's work)."""
    facts: Facts = {}
    for s in started:
        argv = s.argv
        if s.name == "python3" and argv[:3] == ["-m", "pip", "install"] and "--help" not in argv:
            words = _pip_words(argv[3:])
            options = sorted(a for a in words if a.startswith("-") and a != "--break-system-packages")
            for spec in (a for a in words if not a.startswith("-")):
                facts[("provision", f"pip install {spec.split('==')[0]}")] = " ".join([spec, *options])
        elif s.name == "python3" and argv[:1] == ["-c"]:
            for module in _is_import_check(argv[1]):
                facts[("provision", f"import-check {module}")] = "ok"
        elif s.name == "hf" and argv[:1] == ["download"]:
            repo = next(a for a in argv[1:] if not a.startswith("-") and a not in ("dataset",))
            where = argv[argv.index("--local-dir") + 1] if "--local-dir" in argv else "hf cache"
            kind = "dataset" if "--repo-type" in argv else "model"
            facts[("provision", f"download {kind} {repo}")] = _paths(where, paths)
        elif s.name == "uv" and argv[:2] == ["pip", "install"]:
            facts[("provision", "aiperf")] = "isolated venv from the workspace's utils/aiperf (uv)"
        elif s.name in ("nvidia-smi",):
            facts[("provision", s.name)] = "run"
    for path, (sed, guard) in image_edits(started).items():
        facts[("provision", f"edit {path}")] = edit_value(sed, guard)
    for name, found in image_finds(started).items():
        facts[("provision", f"find-env {name}")] = found.value()
    return facts


@dataclass(frozen=True)
class ImageFind:
    """A `find` of the image's tree whose answer the script exports (recorded only for the image: capture.IMAGE_TREES):
    where it starts, its expression, and the stand-in it answered with under capture."""

    roots: list[str]
    tests: list[str]  # without the -print -quit that stops at the first file
    answer: str

    def value(self) -> str:
        """As both sides of `recipes check` name it: the search as the node runs it (node/provision.py)."""
        return find_search(self.roots, self.tests)


def image_finds(started: list[Started]) -> dict[str, ImageFind]:
    """The env the script sets to what a `find` of the image finds, name -> the search: the variable a later process
    holds the find's stand-in answer in (the script's `NAME=$(find ... -print -quit ...)`, then `export NAME`)."""
    found: dict[str, ImageFind] = {}
    for s in (s for s in started if s.name == "find"):
        answer = find_answer(s.argv)
        first = next((i for i, a in enumerate(s.argv) if a[:1] in ("-", "(", "!")), len(s.argv))
        tests = s.argv[first:]
        tests = tests[:-2] if tests[-2:] == ["-print", "-quit"] else [*tests, "-print"]  # -print: no -quit, not alike
        names = [k for later in started for k, v in later.env.items() if v == answer]
        if names:
            found.setdefault(names[0], ImageFind(s.argv[:first], tests, answer))
    return found


def found_paths(started: list[Started]) -> dict[str, str]:
    """The stand-in answer of each image find a variable holds, as slurmx renders what the node's search finds."""
    return {found.answer: provision.review_found(name) for name, found in image_finds(started).items()}


Guard = tuple[list[str], list[str]]


def image_edits(started: list[Started]) -> dict[str, tuple[list[str], Guard | None]]:
    """The image's files the script edits in place (`sed -i`, recorded only for an image file: capture.IMAGE_FILES),
    file -> (sed's arguments before it, the guard: sed's arguments of a read of the same file and the argv of the program
    its output is piped into, where the script read it first)."""
    reads: dict[str, Guard] = {}
    edits: dict[str, tuple[list[str], Guard | None]] = {}
    for s in (s for s in started if s.name == "sed" and s.argv):
        *args, path = s.argv
        if "-i" in args:
            edits[path] = (args, reads.get(path))
        elif s.reader:
            reads[path] = (args, list(s.reader))
    return edits


def upstream_facts(capture: Capture, paths: Mapping[str, str]) -> Facts:
    facts: Facts = {}
    paths = {**found_paths(capture.started), **paths}
    for s, name in zip(capture.started, process_names(capture.started, PROCESS), strict=True):
        if name is None:
            continue
        facts[(name, "program")] = s.name
        facts.update(argv_facts(name, s.argv, paths))
        inherited = {k: s.env[k] for k in CACHE_ENV if k in s.env}  # the launcher's cache locations
        facts.update(env_facts(name, {**inherited, **s.env_delta(capture.base_env)}, paths))
        facts.update(file_facts(name, s.files, paths))
        facts.update(named_file_flags(name, s.files, facts))
    facts.update(provision_facts(capture.started, paths))
    for run in capture.runs:  # the tree's own scripts it ran (a container patch script): provisioning steps
        facts[("provision", f"run {run.path}")] = script_value(run.program, [_paths(a, paths) for a in run.args],
                                                               run.sha256)  # fmt: skip
    return facts


def _unwrap(argv: list[str]) -> list[str]:
    """The program argv inside the runtime's `srun --container-*` wrapper (the launcher's srun upstream)."""
    if argv[:1] != ["srun"]:
        return argv
    i = 1
    while argv[i].startswith("-"):
        i += 1
    return argv[i:]


def slurmx_facts(
    processes: list[Process], job_env: Mapping[str, str], provision: Facts, paths: Mapping[str, str] | None = None
) -> Facts:
    paths = paths or {}
    facts: Facts = {}
    for process in processes:
        argv = _unwrap(process.argv)
        if Path(argv[0]).name == "numactl":  # the NUMA placement launcher (node/numa.py): one fact of its own
            i = 1
            while argv[i].startswith("-"):
                i += 1
            facts[(process.name, "numa placement")] = " ".join(argv[:i])
            argv = argv[i:]
        facts[(process.name, "program")] = Path(argv[0]).name
        facts.update(argv_facts(process.name, argv[1:], paths))
        facts.update(env_facts(process.name, {**job_env, **process.env}, paths))
        named = {k: process.files[v] for k, v in process.env.items() if v in process.files}  # as upstream's
        named |= {
            flag: process.files[v] for flag, v in zip(argv, argv[1:]) if flag.startswith("--") and v in process.files
        }
        facts.update(file_facts(process.name, named, paths))
        facts.update(named_file_flags(process.name, named, facts))
    facts.update(provision)
    return facts


@dataclass(frozen=True)
class Difference:
    process: str
    item: str
    upstream: str | None  # None: upstream does not have it
    slurmx: str | None

    def line(self) -> str:
        return f"{self.process} {self.item}: upstream {self.upstream!r}, slurmx {self.slurmx!r}"


def differences(upstream: Facts, ours: Facts) -> list[Difference]:
    out = []
    for key in sorted(set(upstream) | set(ours)):
        a, b = upstream.get(key), ours.get(key)
        if a != b:
            out.append(Difference(key[0], key[1], a, b))
    return out


def job_env(item: Resolved) -> dict[str, str]:
    """What the sbatch preamble exports for every process of the job."""
    lines = item.runtime.setup_lines()
    return {m.group(1): m.group(2) for line in lines if (m := _EXPORT.match(line))}


def slurmx_provision_facts(item: Resolved) -> Facts:
    """The job body's provisioning step (slurmx.node.provision), as facts: what it installs, checks and
    downloads, named as the upstream capture names the script's own actions."""
    assert item.serving is not None
    steps = provision.plan(item.serving, item.runtime)
    return {("provision", s.item): s.value for s in steps}


MODEL_PATH = "$MODEL_PATH"  # where each side keeps the weights (cluster layout): compared as this placeholder


def capture_paths(work: str, model_path: str) -> dict[str, str]:
    """Run-specific paths of a capture, as placeholders: the staged model, its result dir, its work dir,
    the stand-in torch (most specific first: they are replaced in order)."""
    staged = {model_path.replace("{work}", work): MODEL_PATH} if model_path.startswith("{work}/") else {}
    return {
        **staged,
        f"{work}/result": "$RESULT_DIR",
        f"{work}/home": "$HOME",
        SANDBOX.replace("{work}", work): "",  # a cluster path the capture ran sandboxed: compared as itself
        work: "<work>",
        STANDIN_TORCH_LIB: provision.REVIEW_TORCH_LIB,
    }


def point_facts(item: Resolved, processes: list[Process], staged: bool) -> Facts:
    """slurmx's facts of one resolved point: its processes (render's point_processes), job env, provisioning;
    `staged` (the capture staged the model): the model's path in the runtime as MODEL_PATH too (a runtime that
    loads by hub id has no such path: its id stays itself)."""
    assert item.serving is not None
    model = item.runtime.model_path(item.serving.model)
    paths = {model: MODEL_PATH} if staged and model.startswith("/") else {}
    return slurmx_facts(processes, job_env(item), slurmx_provision_facts(item), paths)


SWEEP = Path("$SWEEP")  # the sweep directory an sbatch script names (its log paths: not compared)


CHECKOUT = "$INFERENCEX"  # the --inferencex DIR slurmx mounts at /workspace (config/load.py with_workspace)


def slurmx_launch_facts(item: Resolved, given: Mapping[str, str], tree: Path | None = None) -> Facts:
    """slurmx's side of the launcher level: the #SBATCH request of the point's array script (render's), the
    pyxis container flags every step of the job starts with (the checkout `tree` named as CHECKOUT), and the
    env the job's preamble exports beyond `given` (the env the upstream launcher started with: what both
    sides' processes get anyway)."""
    (plan,) = array_plans([item], SWEEP)
    options = []
    for line in render_sbatch(plan).splitlines():
        if line.startswith("#SBATCH "):
            options += parse_options(shlex.split(line)[1:]).options
    facts = slurm_facts(options)
    if isinstance(item.runtime, PyxisRuntime):
        paths = {str(tree.resolve()): CHECKOUT} if tree is not None else {}
        facts.update(container_facts(parse_options(item.runtime.srun_container_prefix("engine")[1:]), paths))
    for name, value in job_env(item).items():
        if given.get(name) != value:
            facts[(LAUNCHER, f"env {name}")] = value
    return facts
