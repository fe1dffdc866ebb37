"""A recording stand-in for a program an upstream InferenceX script starts (the engine, lmcache, aiperf, pip...).

Run as `python standin.py server|tool NAME ARGS...` from a wrapper named NAME on PATH. It appends one line
(name, argv, env, cwd as a Python literal, read back with `ast.literal_eval`; a server's line also holds the
files its env names in the capture's work dir) to $STANDIN_LOG, then
does the least the script needs to go on: servers stay up until killed (the script checks they are
alive), `uv venv` creates the aiperf venv's stand-ins, `pip show` names a version, the torch-lib
query prints a directory, `hf download` leaves a stand-in checkpoint, `df /dev/shm` reports the cluster node's size,
`sed` of an image file records the program its output is piped into (the script's guard of its edit), `find` of the
image's tree answers a stand-in of the file it looks for.
Everything else exits 0.

A script starts about 30 of these per point: the module imports only `os` and `sys` up front (json
and pathlib would double each start's CPU time).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C module: `signal` would import enum on every stand-in start
import os
import sys

FAKE_TORCH_LIB = "/standin/torch/lib"
REAL_SLEEP = "/bin/sleep"
REAL_BASH = "/bin/bash"
REAL_DF = "/bin/df"
REAL_SED = "/bin/sed"
REAL_FIND = "/usr/bin/find"
# where the image's files a script searches for lie under capture (`find` of the image's tree: _find)
STANDIN_IMAGE = "/standin/image"
# where a container patch script finds the image's engine packages (find_spec): a site-packages under the capture's
# sandbox (work/root, compared as the cluster path) holding $STANDIN_PACKAGES empty, never this machine's
SITE_PACKAGES = "/usr/local/lib/python3.12/dist-packages"


# a stand-in checkpoint holds what the scripts' completeness checks read: the configs, a tokenizer, one shard
# and the index naming it (glm5.2_fp4_b200_sglang_mtp.sh checks every shard the index maps)
CHECKPOINT = (
    ("config.json", "{}"), ("tokenizer_config.json", "{}"), ("tokenizer.json", "{}"), ("model.safetensors", ""),
    ("model.safetensors.index.json", '{"weight_map": {"w": "model.safetensors"}}'),
)  # fmt: skip


def write_checkpoint(directory: str) -> None:
    """A stand-in checkpoint in `directory`; files already there are kept (a download resumes into them)."""
    os.makedirs(directory, exist_ok=True)
    for name, text in CHECKPOINT:
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            with open(path, "w") as out:
                out.write(text)


def _record(name: str, argv: list[str], server: bool, extra: dict[str, object] | None = None) -> None:
    row: dict[str, object] = {"name": name, "argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), **(extra or {})}
    if server:
        row["files"] = _files_named(argv)
        row["start"] = _started()
    line = repr(row) + "\n"
    # the script may TERM a background stand-in as it records (its GPU monitor): the line goes out whole first,
    # else a torn record runs into the next one's line (a SyntaxError in the capture's reader)
    held = _signal.pthread_sigmask(_signal.SIG_BLOCK, (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP))
    fd = os.open(os.environ["STANDIN_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
        _signal.pthread_sigmask(_signal.SIG_SETMASK, held)


def _started() -> tuple[int, int]:
    """When this process was forked (its start time in clock ticks since boot, then its pid: the order of the
    script's forks within one tick): background servers record themselves in no fixed order."""
    with open("/proc/self/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return int(fields[19]), os.getpid()


def _files_named(argv: list[str]) -> dict[str, str]:
    """The files a server's env or flags name inside the capture's work dir (a config the script wrote for it), as
    the server would read them at start: env name or flag -> text (a flag's path relative to the cwd too:
    trtllm-serve's `--config ser.yaml`)."""
    work = os.path.dirname(os.environ["STANDIN_BIN"]) + os.sep
    harness = ("_", "BASH_ENV")  # the capture's own, as STANDIN_*
    named = [(n, v) for n, v in os.environ.items() if n not in harness and not n.startswith("STANDIN_")]
    named += [(flag, os.path.abspath(value)) for flag, value in zip(argv, argv[1:]) if flag.startswith("--")]
    files = {}
    for name, value in named:
        if value.startswith(work) and os.path.isfile(value):
            with open(value, errors="replace") as text:
                files[name] = text.read(1 << 16)
    return files


def _python(argv: list[str]) -> None:
    if argv[:2] == ["-m", "pip"]:
        if "show" in argv:
            print("Version: standin\nLocation: /standin/site-packages")
        elif "--help" in argv:
            print("  --break-system-packages  Allow pip to modify an EXTERNALLY-MANAGED environment.")
    elif argv[:1] == ["-c"] and "torch" in argv[1] and "'lib'" in argv[1]:
        print(FAKE_TORCH_LIB)
    elif argv[:1] == ["-c"] and "find_spec(" in argv[1]:
        site = os.path.join(os.path.dirname(os.environ["STANDIN_BIN"]), "root", SITE_PACKAGES.lstrip("/"))
        for package in os.environ["STANDIN_PACKAGES"].split(","):
            os.makedirs(os.path.join(site, package), exist_ok=True)
            with open(os.path.join(site, package, "__init__.py"), "a"):
                pass
        sys.path[:] = [site, *(p for p in sys.path if "site-packages" not in p and "dist-packages" not in p)]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    elif argv[:1] == ["-"]:
        code, work = sys.stdin.read(), os.path.dirname(os.environ["STANDIN_BIN"]) + os.sep
        if argv[1:] and all(os.path.abspath(a).startswith(work) for a in argv[1:]):
            # a program over the capture's own files only (the scripts' hub-cache snapshot check): run for real
            sys.argv = ["-", *argv[1:]]
            exec(compile(code, "<stdin>", "exec"), {"__name__": "__main__"})


def _uv(argv: list[str]) -> None:
    if argv[:1] == ["venv"]:
        from pathlib import Path

        bin_dir = Path(argv[-1]) / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        wrapper_dir = Path(os.environ["STANDIN_BIN"])
        for name in ("aiperf", "hf", "python"):
            target = bin_dir / name
            target.write_text((wrapper_dir / name).read_text())
            target.chmod(0o755)


def _hf(argv: list[str]) -> None:
    # a download into --local-dir leaves what the scripts' completeness checks look for; only inside the
    # capture's work dir (a launcher's real path, /scratch/..., is never created on this machine)
    work = os.path.dirname(os.environ["STANDIN_BIN"]) + os.sep
    cache = os.environ.get("HF_HUB_CACHE", "")
    if argv[:1] == ["download"] and "--local-dir" not in argv and cache.startswith(work):
        # into the hub cache: a complete snapshot, as the scripts' snapshot checks read it; its path printed
        repo = next(a for a in argv[1:] if not a.startswith("-"))
        kind = "datasets" if "--repo-type" in argv else "models"
        root = os.path.join(cache, f"{kind}--{repo.replace('/', '--')}")
        snapshot = os.path.join(root, "snapshots", "standin")
        os.makedirs(os.path.join(root, "refs"), exist_ok=True)
        os.makedirs(snapshot, exist_ok=True)
        with open(os.path.join(root, "refs", "main"), "w") as out:
            out.write("standin")
        write_checkpoint(snapshot)
        print(snapshot)
        return
    if argv[:1] == ["download"] and "--local-dir" in argv:
        target = os.path.abspath(argv[argv.index("--local-dir") + 1])
        if not target.startswith(work):
            return
        write_checkpoint(target)


def _rocm_smi(argv: list[str]) -> None:
    # what the AMD scripts grep for: idle GPUs (VRAM% 0: wait_for_amd_gpu_clean passes at once) and a MEC
    # firmware new enough that no scratch-reclaim workaround is exported
    for gpu in range(8):
        if "--showmemuse" in argv:
            print(f"GPU[{gpu}]\t\t: GPU Memory Allocated (VRAM%): 0")
        elif "--showfw" in argv:
            print(f"GPU[{gpu}]\t\t: MEC firmware version: 177")


def _aiperf(argv: list[str]) -> None:
    # the server-metrics export the scripts check after the replay (benchmark_lib.sh's required-prefix check):
    # one metric named with the prefix the script asks for, inside the capture's work dir only
    work = os.path.dirname(os.environ["STANDIN_BIN"]) + os.sep
    prefix = os.environ.get("AIPERF_REQUIRED_SERVER_METRIC_PREFIX", "")
    if "--output-artifact-dir" not in argv or not prefix:
        return
    target = os.path.abspath(argv[argv.index("--output-artifact-dir") + 1])
    if not target.startswith(work):
        return
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(target, "server_metrics_export.json"), "w") as out:
        out.write('{"metrics": {"' + prefix + 'standin_total": {"type": "counter"}}}\n')
    with open(os.path.join(target, "server_metrics_export.csv"), "w") as out:
        out.write("metric,value\n" + prefix + "standin_total,0\n")


def _df(argv: list[str]) -> None:
    """`df` of /dev/shm: the point's cluster node's (STANDIN_SHM_GIB, all free), in the units asked (-BG or
    --block-size=G: GiB, rounded up as df does; else 1K blocks); any other path: this machine's df."""
    operands = [a for a in argv if not a.startswith("-")]
    if "/dev/shm" not in operands:
        os.execv(REAL_DF, ["df", *argv])
    size = os.environ.get("STANDIN_SHM_GIB")
    if not size:
        sys.stderr.write("df: /dev/shm: the cluster profile names no node.shm-gib\n")
        sys.exit(1)
    gib = "-BG" in argv or "--block-size=G" in argv or "--block-size=1G" in argv
    amount = f"{size}G" if gib else str(int(size) << 20)
    if "--output=avail" in argv:
        print(f"Avail\n{amount:>6}")
    else:
        print(f"Filesystem {'1G-blocks' if gib else '1K-blocks'} Used Available Use% Mounted on")
        print(f"tmpfs {amount} 0 {amount} 0% /dev/shm")


def _pipe_reader() -> list[str] | None:
    """The program reading this process's stdout, where that is a pipe (`sed -n ... FILE | grep -q X`): its name and
    arguments once it has exec'd (the shell forks it beside this one), else None."""
    try:
        pipe = os.readlink("/proc/self/fd/1")
    except OSError:
        return None
    if not pipe.startswith("pipe:"):
        return None
    import time  # only here: a read into a pipe is rare

    me = str(os.getpid())
    for _ in range(200):  # up to 2 s: the reader is forked after this process, and execs after its fork
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if pid == me or os.readlink(f"/proc/{pid}/fd/0") != pipe:
                    continue
                with open(f"/proc/{pid}/cmdline", "rb") as raw:
                    words = [w.decode(errors="replace") for w in raw.read().split(b"\0")[:-1]]
            except OSError:
                continue
            if words and os.path.basename(words[0]) in ("sh", "dash") and len(words) > 1:
                words = words[1:]  # a wrapper script on PATH (the capture's grep): its name, then its arguments
            if words and os.path.basename(words[0]) != "bash":  # not the shell's fork before its exec
                return [os.path.basename(words[0]), *words[1:]]
        time.sleep(0.01)
    return None


def _sed(argv: list[str]) -> None:
    """`sed` of a file of the engine's image (the capture's wrapper starts this only then: capture.IMAGE_FILES):
    recorded with the program reading its output, if any; an in-place edit changes nothing, a read prints nothing
    (the capture has no image: the unpatched image is what the script's guard reads)."""
    reader = _pipe_reader() if "-i" not in argv else None
    _record("sed", argv, False, {"reader": reader} if reader else {})


def find_answer(argv: list[str]) -> str:
    """What `find` of the image's tree answers under capture: a stand-in of the file it looks for (its -name)."""
    name = argv[argv.index("-name") + 1] if "-name" in argv[:-1] else "found"
    return f"{STANDIN_IMAGE}/{name}"


def _find(argv: list[str]) -> None:
    """`find` of the container image's tree (the capture's wrapper starts this only then: capture.IMAGE_TREES): recorded,
    never run (the capture has no image), answering as an image that holds the file would."""
    _record("find", argv, False)
    print(find_answer(argv))


def _server_command(name: str, argv: list[str]) -> bool:
    """A tool started as a server ($STANDIN_SERVERS: "python3 -m MODULE", comma-separated) stays up as one."""
    for command in filter(None, os.environ.get("STANDIN_SERVERS", "").split(",")):
        words = command.split()
        if [name, *argv[: len(words) - 1]] == words:
            return True
    return False


def main() -> None:
    kind, name, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    if name == "sed":
        _sed(argv)
        return
    if name == "find":
        _find(argv)
        return
    if kind == "tool" and _server_command(name, argv):
        kind = "server"
    _record(name, argv, kind == "server")
    if name == "bash":  # recorded; the real bash runs it (the tree's own scripts act on the stand-ins too)
        os.execv(REAL_BASH, ["bash", *argv])
    if kind == "server":
        # alive until the harness ends the script's session (the real sleep: `sleep` on PATH is a stand-in)
        os.execv(REAL_SLEEP, ["sleep", "600"])
    if name in ("python3", "python"):
        _python(argv)
    elif name == "uv":
        _uv(argv)
    elif name == "hf":
        _hf(argv)
    elif name == "aiperf":
        _aiperf(argv)
    elif name == "rocm-smi":
        _rocm_smi(argv)
    elif name == "df":
        _df(argv)


if __name__ == "__main__":
    main()
