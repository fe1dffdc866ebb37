"""The stand-ins let an unchanged InferenceX script run to its end: a script that requires the replay's
server-metrics export (benchmark_lib.sh's required-prefix check) finds one, written in the capture's work dir."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import subprocess
import sys
from pathlib import Path

from slurmx.inputs import load_inputs
from slurmx.upstream import standin as standin_module
from slurmx.upstream.capture import ScriptRun, Started, capture, fork_order, process_names, program_of
from slurmx.upstream.facts import capture_paths, upstream_facts
from slurmx.upstream.inferencex import upstream_for
from slurmx.upstream.standin import SITE_PACKAGES

KEY = "minimaxm3-fp8-h200-vllm-agentic-mtp"  # its script sets AIPERF_REQUIRED_SERVER_METRIC_PREFIX


def test_a_script_that_checks_the_server_metrics_export_runs_to_the_end(fixtures: Path, tmp_path: Path) -> None:
    tree = fixtures / "repo-main"
    point = load_inputs(None, None, [KEY], inferencex=tree).key_points(KEY)[0]
    upstream = upstream_for(tree, point)
    assert "AIPERF_REQUIRED_SERVER_METRIC_PREFIX" in upstream.script.read_text() + upstream.lib.read_text()
    cap = capture(point, upstream, tmp_path / "work")
    assert cap.returncode == 0, cap.log[-1500:]
    (replay,) = cap.named("aiperf")
    prefix = replay.env["AIPERF_REQUIRED_SERVER_METRIC_PREFIX"]
    exports = list(cap.work_dir.rglob("server_metrics_export.json"))
    assert exports and all(f'"{prefix}' in e.read_text() for e in exports)
    assert "Validated required AIPerf server metrics prefix" in cap.log
    # the script writes into the cluster's hub cache (a lock, a snapshot): inside the capture's sandbox only
    sandbox = cap.work_dir / "root" / "mnt" / "hf_hub_cache"
    assert (sandbox / ".minimaxm3-download.lock").exists()
    assert (sandbox / "models--MiniMaxAI--MiniMax-M3-MXFP8" / "snapshots" / "standin" / "config.json").exists()


def test_the_amd_scripts_gpu_checks_pass_and_the_container_patch_script_acts_on_a_sandbox(
    fixtures: Path, tmp_path: Path
) -> None:
    """rocm-smi's stand-in answers what the scripts grep (idle VRAM, the MEC firmware) under set -euo pipefail;
    kimik3_fp4_mi355x_mtp.sh then runs its sibling apply_k3_container_patches.sh, staged beside it: the patch
    script resolves the image's packages to a sandbox site-packages (never this machine's), writes its diffs in
    the run's own tmp, and the run is recorded with the digest of InferenceX's file."""
    tree, key = fixtures / "repo-main", "kimik3-fp4-mi355x-vllm-agentic-mtp"
    point = load_inputs(None, None, [key], inferencex=tree).key_points(key)[0]
    upstream = upstream_for(tree, point)
    cap = capture(point, upstream, tmp_path / "work")
    assert "GPUs clean (vram%max=0" in cap.log
    assert cap.returncode == 0, cap.failure()
    patch = upstream.script.parent / "apply_k3_container_patches.sh"
    digest = hashlib.sha256(patch.read_bytes()).hexdigest()
    assert cap.runs == (ScriptRun("bash", "benchmarks/single_node/agentic/apply_k3_container_patches.sh", (), digest),)
    site = cap.work_dir / "root" / SITE_PACKAGES.lstrip("/")
    assert f"[embed] ROOT={site}" in cap.log and (site / "vllm").is_dir() and (site / "aiter").is_dir()
    assert (cap.work_dir / "tmp" / "k3_embed" / "MLA_GLUON.diff").is_file()  # its WS, not this machine's /tmp
    assert "APPLIED (git apply)" in cap.log and "[embed] DONE" in cap.log
    facts = upstream_facts(cap, capture_paths(str(cap.work_dir), upstream.model_path))
    assert facts[("provision", "run benchmarks/single_node/agentic/apply_k3_container_patches.sh")] == (
        f"bash sha256:{digest}"
    )


def test_a_script_runs_its_siblings_staged_and_a_missing_one_names_its_cause(fixtures: Path, tmp_path: Path) -> None:
    from slurmx.upstream.capture import Upstream

    point = load_inputs(None, None, [KEY], inferencex=fixtures / "repo-main").key_points(KEY)[0]
    agentic = tmp_path / "ix" / "benchmarks" / "single_node" / "agentic"
    agentic.mkdir(parents=True)
    script, helper, lib = agentic / "s.sh", agentic / "helper.sh", tmp_path / "lib.sh"
    script.write_text('set -e\nbash "$(dirname "$0")/helper.sh" --quick\nvllm serve m >/dev/null 2>&1 &\n')
    helper.write_text('[ "$1" = --quick ] && python3 -m pip install tabulate\n')
    lib.write_text("")
    cap = capture(point, Upstream(script, lib, ""), tmp_path / "work")
    assert cap.returncode == 0, cap.log
    digest = hashlib.sha256(helper.read_bytes()).hexdigest()
    assert cap.runs == (ScriptRun("bash", "benchmarks/single_node/agentic/helper.sh", ("--quick",), digest),)
    assert [s.name for s in cap.started] == ["bash", "python3", "vllm"]  # the helper ran, on the stand-ins
    helper.unlink()  # not there upstream: the failure names it, in one line
    failed = capture(point, Upstream(script, lib, ""), tmp_path / "again")
    assert failed.returncode == 127 and "helper.sh" in failed.failure() and failed.runs == ()


def test_a_script_failing_once_on_timing_is_captured_again_and_says_so(fixtures: Path, tmp_path: Path) -> None:
    from slurmx.upstream.capture import Upstream

    tree = fixtures / "repo-main"
    point = load_inputs(None, None, [KEY], inferencex=tree).key_points(KEY)[0]
    mark = tmp_path / "ran-once"
    script, lib = tmp_path / "s.sh", tmp_path / "lib.sh"
    script.write_text(
        f'if [ ! -e {mark} ]; then touch {mark}; echo "not ready in time" >&2; exit 1; fi\nvllm serve m >/dev/null 2>&1 &\n'
    )
    lib.write_text("")
    cap = capture(point, Upstream(script, lib, ""), tmp_path / "work")
    assert cap.returncode == 0 and [s.name for s in cap.started] == ["vllm"]
    assert cap.retried == "upstream script exited 1 (not ready in time)"
    assert cap.work_dir.name == "run2"
    mark.unlink()
    script.write_text("exit 3\n")  # fails every time: the first failure stands
    failed = capture(point, Upstream(script, lib, ""), tmp_path / "again")
    assert failed.returncode == 3 and failed.retried is None


def test_a_script_that_runs_past_the_time_limit_is_a_failed_run_not_a_traceback(fixtures: Path, tmp_path: Path) -> None:
    from slurmx.upstream.capture import Upstream

    point = load_inputs(None, None, [KEY], inferencex=fixtures / "repo-main").key_points(KEY)[0]
    mark = tmp_path / "ran-once"
    script, lib = tmp_path / "s.sh", tmp_path / "lib.sh"
    # hangs on its first run (as a loaded machine's slow stand-ins once did), passes on the second
    script.write_text(f"if [ ! -e {mark} ]; then touch {mark}; echo waiting; while :; do :; done; fi\nvllm serve m &\n")
    lib.write_text("")
    cap = capture(point, Upstream(script, lib, ""), tmp_path / "work", timeout_s=2)
    assert cap.returncode == 0 and [s.name for s in cap.started] == ["vllm"]
    assert cap.retried == "upstream script exited -9 (slurmx: the script ran past 2 s under stand-ins)"


def test_a_server_started_as_python_dash_m_is_the_engine_and_stays_up(tmp_path: Path) -> None:
    """A server a script starts as `python3 -m MODULE` (the table's key with its leading arguments) is that
    process, and python3's stand-in stays up for it as a server; any other python3 run is a tool that exits."""
    table = {"python3 -m toy.launch_server": "engine", "vllm": "engine"}
    server = Started("python3", ["-m", "toy.launch_server", "--port", "8888"], {})
    other = Started("python3", ["-m", "pip", "install", "x"], {})
    assert [program_of(s, table) for s in (server, other)] == ["python3 -m toy.launch_server", "python3"]
    assert process_names([server, other, Started("vllm", ["serve"], {})], table) == ["engine", None, "engine"]
    bin_dir, log = tmp_path / "bin", tmp_path / "standin.jsonl"
    bin_dir.mkdir()
    env = {"STANDIN_LOG": str(log), "STANDIN_BIN": str(bin_dir), "STANDIN_SERVERS": "python3 -m toy.launch_server",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    standin = [sys.executable, "-S", "-E", str(Path(standin_module.__file__)), "tool", "python3"]
    done = subprocess.run([*standin, "-m", "pip", "--version"], env=env, timeout=30, check=False)
    assert done.returncode == 0
    running = subprocess.Popen([*standin, "-m", "toy.launch_server", "--port", "8888"], env=env)
    try:
        with contextlib.suppress(subprocess.TimeoutExpired):
            running.wait(timeout=1.0)
        assert running.poll() is None  # a server stand-in: up until the harness ends it
    finally:
        running.kill()
        running.wait()
    rows = [ast.literal_eval(line) for line in log.read_text().splitlines()]
    assert ["start" in row for row in rows] == [False, True]  # the server's record holds its fork time


def test_an_image_files_guarded_sed_is_recorded_with_its_guard_and_any_other_sed_runs(tmp_path: Path) -> None:
    """qwen3.5_fp8_h200_mtp.sh edits SGLang's multi_tokenizer_mixin.py in the image unless a read of it piped into grep
    finds the edit done: under capture that sed is recorded, never run, its read with the grep reading it, and the
    script goes on; a sed of any other file is the real one (benchmark_lib.sh repairs its metrics CSV with one)."""
    from slurmx.upstream.capture import _host_reads, _stand_ins
    from slurmx.upstream.facts import image_edits, provision_facts

    bin_dir, log = tmp_path / "bin", tmp_path / "standin.jsonl"
    _stand_ins(bin_dir)
    _host_reads(bin_dir, tmp_path / "root", "cluster:h200-dgxc")  # grep is the capture's sandbox reader here
    image = "/sgl-workspace/sglang/python/sglang/srt/managers/multi_tokenizer_mixin.py"
    own = tmp_path / "own.csv"
    own.write_text("a\nb\n")
    script = tmp_path / "script.sh"
    script.write_text(
        "set -euo pipefail\n"
        f"if ! sed -n '/x/,/y/p' {image} | grep -q 'done=1'; then\n"
        f"  sed -i '/x/a\\\n  done=1' {image}\n"
        "fi\n"
        f"sed '$d' {own} > {tmp_path}/repaired\n"
        "echo reached-the-end\n"
    )
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STANDIN_LOG": str(log), "STANDIN_BIN": str(bin_dir)}
    done = subprocess.run(["/bin/bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "reached-the-end\n", done.stdout + done.stderr
    assert (tmp_path / "repaired").read_text() == "a\n"  # the real sed ran on the script's own file
    assert not Path(image).exists()  # nothing of this machine touched
    rows = [ast.literal_eval(line) for line in log.read_text().splitlines()]
    started = [Started(r["name"], r["argv"], r["env"], reader=tuple(r.get("reader") or ())) for r in rows]
    assert [(s.name, s.argv[0]) for s in started] == [("sed", "-n"), ("sed", "-i")]  # only the image's file's
    assert started[0].reader == ("grep", "-q", "done=1")
    assert image_edits(started) == {image: (["-i", "/x/a\\\n  done=1"], (["-n", "/x/,/y/p"], ["grep", "-q", "done=1"]))}
    assert provision_facts(started, {})[("provision", f"edit {image}")] == (
        "sed -i '/x/a\\\n  done=1' unless sed -n /x/,/y/p | grep -q done=1"
    )


def test_a_find_of_the_images_tree_is_recorded_as_spelled_and_its_answer_exported(
    fixtures: Path, tmp_path: Path
) -> None:
    """dsv4_fp4_b200_sglang_mtp.sh sets TRITON_PTXAS_PATH to the first ptxas a `find` of the image's /usr/local/cuda* and
    Python nvidia packages finds, exported only when found. Under capture that find is recorded with its globs as the
    script spells them (whatever this machine's own /usr/local/ holds), answers a stand-in, and the engine gets it:
    the facts name the search and the engine's env as slurmx's provisioning and render name them."""
    from slurmx.node.provision import find_search
    from slurmx.upstream.facts import image_finds

    tree, key = fixtures / "repo-main", "dsv4-fp4-b200-sglang-agentic-hicache-mtp"
    point = load_inputs(None, None, [key], inferencex=tree).key_points(key)[0]
    cap = capture(point, upstream_for(tree, point), tmp_path / "work")
    assert cap.returncode == 0, cap.failure()
    roots = [
        "/usr/local/cuda*",
        "/usr/local/lib/python*/dist-packages/nvidia",
        "/usr/local/lib/python*/site-packages/nvidia",
    ]
    tests = ["-type", "f", "-name", "ptxas", "-perm", "-u+x"]
    (find,) = cap.named("find")
    assert find.argv == [*roots, *tests, "-print", "-quit"]
    assert "Using ptxas for Triton: /standin/image/ptxas" in cap.log
    (engine,) = [s for s, name in zip(cap.started, process_names(cap.started), strict=True) if name == "engine"]
    assert engine.env["TRITON_PTXAS_PATH"] == "/standin/image/ptxas"
    assert set(image_finds(cap.started)) == {"TRITON_PTXAS_PATH"}
    facts = upstream_facts(cap, capture_paths(str(cap.work_dir), "{work}/model"))
    assert (
        facts[("provision", "find-env TRITON_PTXAS_PATH")]
        == find_search(roots, tests)
        == (
            "find /usr/local/cuda* /usr/local/lib/python*/dist-packages/nvidia /usr/local/lib/python*/site-packages/nvidia"
            " -type f -name ptxas -perm -u+x -print -quit 2>/dev/null || true"
        )
    )
    assert facts[("engine", "env TRITON_PTXAS_PATH")] == "$TRITON_PTXAS_PATH"  # as render shows what the node finds
    assert not any(item == "file BASH_ENV" for _, item in facts)  # the capture's own glob setting is no fact


def test_a_find_of_anything_but_the_images_tree_is_the_real_one(tmp_path: Path) -> None:
    """benchmark_lib.sh finds its results with find: only a search of the image's tree is a stand-in's."""
    from slurmx.upstream.capture import _stand_ins

    bin_dir, log = tmp_path / "bin", tmp_path / "standin.jsonl"
    _stand_ins(bin_dir)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "a.json").write_text("{}")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STANDIN_LOG": str(log), "STANDIN_BIN": str(bin_dir)}
    done = subprocess.run(
        [str(bin_dir / "find"), str(tmp_path / "results"), "-name", "*.json"], env=env, capture_output=True, text=True
    )
    assert done.stdout == f"{tmp_path}/results/a.json\n" and not log.exists()


def test_backend_servers_are_numbered_in_fork_order_across_a_pid_wrap() -> None:
    """Eight LMCache shards forked in one clock tick while the pids wrapped (pid_max 32768 on this machine: the full
    suite forks more than that): 32766, 32767, then 300.. (the kernel's first pid after a wrap). Their records land
    in any order; the names follow the forks, and ticks still order forks of different ticks."""
    pids = [32766, 32767, 300, 301, 302, 303, 304, 305]
    forked = [
        Started("lmcache", ["server", "--port", str(5555 + k)], {}, start=(900, pid)) for k, pid in enumerate(pids)
    ]
    landed = [forked[k] for k in (5, 0, 7, 2, 1, 6, 3, 4)]
    names = process_names(landed)
    by_port = {s.argv[2]: n for s, n in zip(landed, names, strict=True)}
    assert [by_port[str(5555 + k)] for k in range(8)] == [f"lmcache.{k}" for k in range(8)]
    assert fork_order((900, 20000), [(900, 20000), (900, 20001)]) == (900, 20000)  # no wrap: pid as is
    later_tick = Started("lmcache", ["server", "--port", "1"], {}, start=(901, 299))
    earlier_tick = Started("lmcache", ["server", "--port", "2"], {}, start=(900, 32000))
    assert process_names([later_tick, earlier_tick]) == ["lmcache.1", "lmcache.0"]
