"""Real output of the local Slurm cluster's clients, captured into tests/data/slurm for the fast tests.

Regenerate (the local cluster up, nothing else queued): `python -m tests.helpers.slurm_captures [DIR]`.
Each capture is DIR/NAME.out (stdout as printed) and one manifest.json entry: the argv that printed it,
its exit status and stderr. The commands are spelled out here as a user would type them, not taken from
slurmx, so a fast test can check slurmx's argv against the one that really printed a capture.
tests/slurm/test_slurm_captures.py runs this again and checks the stored captures still match. After a
regeneration, re-read what the fast tests took off the captures by hand (elapsed times, the node a task ran on).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "slurm"
RUN = Path("/var/lib/slurmx-local/run")  # scripts/local-slurm.sh's pid files
SACCT = ["sacct", "-n", "-P", "-X", "--format", "JobID,State,NodeList,Elapsed,ExitCode,Reason", "-j"]
SQUEUE = ["squeue", "-h", "-r", "-o", "%i|%T|%N|%M|%r", "-j"]
# Tasks 0 and 1 end at once (0 succeeds, 1 exits 3); the throttle of 2 then runs 2 and 3 and leaves
# 4, 5, 8, 10 and 11 pending on it: sacct prints them as one row '<id>_[4-5,8,10-11%2]'.
ARRAY = "0-5,8,10-11%2"
BODY = 'case "$SLURM_ARRAY_TASK_ID" in 0) exit 0;; 1) exit 3;; *) exec sleep 300;; esac'
ABSENT_JOB = "4000000"  # an id this cluster never gave (its ids count up from 1)


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)


class Recorder:
    def __init__(self) -> None:
        self.outputs: dict[str, str] = {}
        self.manifest: dict[str, dict[str, object]] = {}

    def record(self, name: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
        proc = run(argv)
        self.outputs[name] = proc.stdout
        self.manifest[name] = {"argv": argv, "returncode": proc.returncode, "stderr": proc.stderr}
        return proc

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in self.outputs.items():
            (folder / f"{name}.out").write_text(text)
        (folder / "manifest.json").write_text(json.dumps(self.manifest, indent=1, sort_keys=True) + "\n")


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(1)


def sacct_settled(array: str) -> bool:
    """Tasks 0 and 1 ended, 2 and 3 running, the rest pending on the throttle, in accounting and the queue."""
    rows = {line.split("|")[0]: line.split("|")[1] for line in run([*SACCT, array]).stdout.splitlines()}
    queue = {line.split("|")[0]: line.split("|")[1] for line in run([*SQUEUE, array]).stdout.splitlines()}
    wanted_rows = {
        f"{array}_0": "COMPLETED",
        f"{array}_1": "FAILED",
        f"{array}_2": "RUNNING",
        f"{array}_3": "RUNNING",
        f"{array}_[4-5,8,10-11%2]": "PENDING",
    }
    pending = {f"{array}_{task}": "PENDING" for task in (4, 5, 8, 10, 11)}
    return rows == wanted_rows and queue == {f"{array}_2": "RUNNING", f"{array}_3": "RUNNING", **pending}


def capture(folder: Path) -> None:
    """Every capture, the cluster's own state and one throttled array's life (submitted and cancelled here)."""
    rec = Recorder()
    rec.record("scontrol-show-node", ["scontrol", "show", "node", "--oneliner"])
    rec.record("scontrol-show-partition", ["scontrol", "show", "partition", "--oneliner"])
    rec.record("scontrol-show-config", ["scontrol", "show", "config"])
    submitted = rec.record(
        "sbatch-array",
        [
            "sbatch",
            "-p",
            "local",
            "--gres=gpu:b300:1",
            "--mem=100M",
            "-t",
            "5",
            "-J",
            "slurmx-capture",
            "-o",
            "/dev/null",
            f"--array={ARRAY}",
            "--wrap",
            BODY,
        ],
    )
    match = re.fullmatch(r"Submitted batch job (\d+)\n", submitted.stdout)
    if not match:
        raise RuntimeError(f"sbatch answered {submitted.stdout!r} {submitted.stderr!r}")
    array = match.group(1)
    try:
        wait_until(lambda: sacct_settled(array), "tasks 2-3 running and the rest throttled")
        rec.record("sacct-throttled", [*SACCT, array])
        rec.record("squeue-throttled", [*SQUEUE, array])
        rec.record("squeue-throttled-ranges", ["squeue", "-h", "-o", "%i|%T|%N|%M|%r", "-j", array])
        rec.record("sacct-task", [*SACCT, f"{array}_2"])
    finally:
        run(["scancel", array])
    wait_until(lambda: not run([*SQUEUE, array]).stdout, "the cancelled array to leave the queue")
    rec.record("sacct-cancelled", [*SACCT, array])
    rec.record("squeue-gone", [*SQUEUE, array])
    rec.record("sacct-absent", [*SACCT, ABSENT_JOB])
    rec.record("squeue-absent", [*SQUEUE, ABSENT_JOB])
    (folder / "mem-requests.json").write_text(json.dumps(mem_requests(), indent=1) + "\n")
    with accounting_down():
        rec.record("sacct-accounting-down", [*SACCT, array])
    rec.write(folder)


# sbatch --mem as users spell it; the helper records the MinMemoryNode scontrol shows for each.
MEM_SPELLINGS = ("16G", "16g", "16GB", "500", "500M", "2048K", "1500K", "1T", "0")


def mem_requests() -> dict[str, str]:
    """--mem spelling -> the memory the controller holds the job to (`scontrol show job`'s MinMemoryNode)."""
    held: dict[str, str] = {}
    for spelling in MEM_SPELLINGS:
        job = run(
            [
                "sbatch",
                "--parsable",
                "--hold",
                "-p",
                "local",
                "-t",
                "1",
                f"--mem={spelling}",
                "-o",
                "/dev/null",
                "-J",
                "slurmx-capture",
                "--wrap",
                "true",
            ]
        ).stdout.strip()
        try:
            shown = run(["scontrol", "show", "job", "--oneliner", job]).stdout
            match = re.search(r"MinMemoryNode=(\S+)", shown)
            if not match:
                raise RuntimeError(f"scontrol show job {job} printed no MinMemoryNode: {shown!r}")
            held[spelling] = match.group(1)
        finally:
            run(["scancel", job])
    return held


@contextmanager
def accounting_down() -> Iterator[None]:
    """slurmdbd stopped (the controller and the jobs keep running), restarted after."""
    pid = int((RUN / "slurmdbd.pid").read_text())
    run(["kill", str(pid)])
    try:
        wait_until(lambda: not Path(f"/proc/{pid}").exists(), "slurmdbd to stop", 30)
        yield
    finally:
        subprocess.run([str(ROOT / "scripts" / "local-slurm.sh"), "up"], check=True, capture_output=True)


# What differs between two captures of the same scenario: job ids, times, which node took a task, the load.
VOLATILE = [
    (re.compile(r"^\d+(?=_|\||$)", re.M), "<job>"),
    (re.compile(r"Submitted batch job \d+"), "Submitted batch job <job>"),
    (re.compile(r"(?<=-j )\d+"), "<job>"),
    (re.compile(r"\b(\d+-)?(\d+:)?\d+:\d\d\b"), "<elapsed>"),  # 00:00:05 (sacct), 0:05 (squeue)
    (re.compile(r"\bnode0[12]\b"), "<node>"),
]


def normalized(text: str) -> list[str]:
    """A capture's lines with what VOLATILE names replaced, sorted (squeue orders by priority, not id)."""
    for pattern, replacement in VOLATILE:
        text = pattern.sub(replacement, text)
    return sorted(text.splitlines())


if __name__ == "__main__":
    capture(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
