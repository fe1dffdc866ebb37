"""Stand-in Slurm clients for fast tests: each answers with what the real one printed (tests/data/slurm).

`install(bin_dir, answers)` writes `sacct`, `squeue`, `scontrol` and `sbatch` into bin_dir (put it first on
PATH). `answers` maps a command and a job id to the capture that answers it: ("sacct", "93") ->
"sacct-throttled". A call is answered only when its argv is the captured one but for its -j list; a job list
gets each id's capture in the order asked (as sacct and squeue print one job after the other); any other argv
exits 2 saying so, so a changed argv fails the test instead of reading the wrong output. `sbatch` answers its
capture to any script and keeps the script. Every call's argv is appended to bin_dir/calls.jsonl.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from tests.helpers.slurm_captures import DATA

STANDIN = """\
import json, sys
from pathlib import Path
here = Path(__file__).parent
name, args = Path(sys.argv[0]).name, sys.argv[1:]
with open(here / "calls.jsonl", "a") as log:
    log.write(json.dumps([name, *args]) + "\\n")
table = json.loads((here / "answers.json").read_text())
manifest = json.loads(Path(table["data"], "manifest.json").read_text())

def answer(capture):
    entry = manifest[capture]
    return Path(table["data"], capture + ".out").read_text(), entry["stderr"], entry["returncode"], entry["argv"]

if name == "sbatch":
    (here / "sbatch-script.sh").write_text(Path(args[-1]).read_text())
    out, err, code, _ = answer(table["sbatch"])
    sys.stdout.write(out); sys.stderr.write(err); sys.exit(code)
if name == "scontrol":
    for capture, entry in manifest.items():
        if entry["argv"] == [name, *args]:
            out, err, code, _ = answer(capture)
            sys.stdout.write(out); sys.stderr.write(err); sys.exit(code)
    sys.exit(f"stand-in {name}: no capture printed by {[name, *args]}")
if "-j" not in args:
    sys.exit(f"stand-in {name}: no -j in {args}")
at = args.index("-j")
outs, errs, codes = [], [], []
for job in args[at + 1].split(","):
    capture = table["answers"].get(name + " " + job)
    if capture is None:
        sys.exit(f"stand-in {name}: no capture answers job {job}")
    out, err, code, argv = answer(capture)
    if argv[: argv.index("-j")] != [name, *args[:at]]:  # the capture's argv up to its job list
        sys.exit(f"stand-in {name}: {capture} was printed by {argv}, not {[name, *args]}")
    outs.append(out); errs.append(err); codes.append(code)
sys.stdout.write("".join(outs)); sys.stderr.write("".join(errs)); sys.exit(max(codes))
"""


def install(
    bin_dir: Path, answers: dict[tuple[str, str], str], sbatch: str = "sbatch-array", sacct_files: tuple[Path, ...] = ()
) -> Path:
    """The stand-ins in bin_dir. `sacct_files`: more real sacct output kept elsewhere in tests/data, each
    answering as capture NAME (its file's stem) to the argv sacct-throttled was printed by."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    data = bin_dir / "data"
    shutil.copytree(DATA, data)
    if sacct_files:
        manifest = json.loads((data / "manifest.json").read_text())
        for path in sacct_files:
            shutil.copy(path, data / f"{path.stem}.out")
            manifest[path.stem] = {**manifest["sacct-throttled"], "argv": manifest["sacct-throttled"]["argv"][:-1]}
        (data / "manifest.json").write_text(json.dumps(manifest))
    table = {
        "data": str(data),
        "sbatch": sbatch,
        "answers": {f"{cmd} {job}": cap for (cmd, job), cap in answers.items()},
    }
    (bin_dir / "answers.json").write_text(json.dumps(table))
    for name in ("sacct", "squeue", "scontrol", "sbatch"):
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{STANDIN}")
        path.chmod(0o755)
    return bin_dir


def calls(bin_dir: Path) -> list[list[str]]:
    """The argv of every call the stand-ins answered (or refused), in order."""
    log = bin_dir / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def captured_job(name: str) -> str:
    """The job id the capture `name` was asked about (its argv's -j value)."""
    argv: list[str] = json.loads((DATA / "manifest.json").read_text())[name]["argv"]
    return argv[argv.index("-j") + 1]
