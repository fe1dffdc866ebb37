"""Many readers (status and collect, as users run them) against a sweep whose files are being rewritten
as fast as a job body can: every read parses, none sees a torn file. The race runs for as long as the
users' commands take (each twice) and at least until the floors of reads and writes are met."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from slurmx.inputs import load_inputs
from slurmx.results.schema import Result
from slurmx.store import atomic, ledger
from slurmx.store.state import PointState, update_state
from slurmx.store.tree import ResultsTree
from slurmx.submit.resolved import resolve_points

ROOT = Path(__file__).resolve().parents[2]
KEY = "tiny-fp32-local-vllm-agentic-lmcache"
BOUND_S = 60.0  # only a machine too loaded to race at all gets here
ROUNDS = 1  # status and collect, each this many times (the floor the test had), while the writer writes
MIN_WRITES, MIN_READS = 200, 1000

WRITER = """
import sys, time
from pathlib import Path
from slurmx.store import atomic
from slurmx.store.state import PointState, update_state
from tests.helpers.synthetic import make_result
stop, enough, points = Path(sys.argv[1]), Path(sys.argv[2]), [Path(p) for p in sys.argv[3:]]
n = 0
stages = ["preflight", "lmcache", "engine", "replay", "aggregate"]
while not stop.exists():
    if n == len(points):
        print("writing", flush=True)
    for p in points:
        stage = stages[n % len(stages)]
        update_state(p / "state.json", lambda s, stage=stage: (s or PointState(point_id=p.name)).advance(stage, "x" * (n % 500)))
        result = make_result(point_id=p.name, config_key="@KEY@", sweep_id=p.parent.parent.name, conc=2 + n % 7)
        atomic.write_json(p / "result.json", result.dump())
        n += 1
    if n >= @MIN_WRITES@ and not enough.exists():
        enough.touch()  # the readers' loop runs at least until the floor of writes is met
print(n)
"""


def test_readers_never_see_a_torn_file_while_the_sweep_is_written(tmp_path: Path) -> None:
    inputs = load_inputs(None, None, [KEY])
    resolved = resolve_points(inputs.points, inputs)
    sweep = ResultsTree(tmp_path).sweep(KEY, ledger.sweep_id_for(KEY, inputs.points))
    record = ledger.new_sweep(sweep, inputs.points, inputs.masters.files, inputs.clusters.path, resolved[0].profile)
    ledger.write_sweep(sweep, record)
    for item in resolved:
        ledger.queue_point(sweep.point(item.point.point_id), item.record(sweep.sweep_id))
    points = [sweep.point(item.point.point_id).path for item in resolved]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    stop, enough = tmp_path / "stop", tmp_path / "enough-writes"
    code = WRITER.replace("@KEY@", KEY).replace("@MIN_WRITES@", str(MIN_WRITES))
    writer = subprocess.Popen(
        [sys.executable, "-c", code, str(stop), str(enough), *map(str, points)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert writer.stdout is not None and writer.stdout.readline() == "writing\n"  # the race is on
    reads = torn = 0
    failures: list[str] = []
    commands: list[str] = []
    deadline = time.monotonic() + BOUND_S

    def users() -> None:
        """The commands users run, each from a fresh process, while the writer writes."""
        for _ in range(ROUNDS):
            for argv in (["status", "--json"], ["collect", "--json", "--no-plots", "--no-report"]):
                proc = subprocess.run([sys.executable, "-m", "slurmx", *argv, "--results", str(tmp_path)],
                                      capture_output=True, text=True, env=env, check=False)  # fmt: skip
                commands.append(argv[0])
                if proc.returncode != 0 or "Traceback" in proc.stderr:
                    failures.append(f"{argv[0]}: {proc.stderr.strip()[-300:]}")
                else:
                    json.loads(proc.stdout)

    thread = threading.Thread(target=users)
    thread.start()
    while (thread.is_alive() or reads < MIN_READS or not enough.exists()) and time.monotonic() < deadline:
        # in process: every file of the sweep, parsed as the readers parse it
        for p in points:
            for name, parse in (
                ("state.json", PointState.model_validate_json),
                ("result.json", Result.model_validate_json),
            ):
                try:
                    text = (p / name).read_text()
                except FileNotFoundError:
                    continue
                reads += 1
                try:
                    parse(text)
                except ValueError as exc:
                    torn += 1
                    failures.append(f"{p / name}: {exc}"[:200])
    thread.join(120)
    stop.touch()
    writes = int((writer.communicate(timeout=60)[0] or "0").strip())
    assert writer.returncode == 0
    print(f"{reads} reads and {len(commands)} commands against {writes} writes: {torn} torn")
    assert torn == 0 and not failures, failures[:5]
    assert writes >= MIN_WRITES and reads >= MIN_READS and len(commands) == 2 * ROUNDS  # the race really ran
    # the files are whole at the end too
    assert all(atomic.read_json(p / "result.json")["slurmx"]["point_id"] == p.name for p in points)
    assert update_state(points[0] / "state.json", lambda s: s or PointState(point_id="x")).stage in (
        "preflight", "lmcache", "engine", "replay", "aggregate",
    )  # fmt: skip
