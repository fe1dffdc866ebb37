"""Many readers (status and collect, as users run them) against a sweep whose files are being rewritten
as fast as a job body can: every read parses, none sees a torn file. Bounded to a few seconds."""

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
WRITE_S = 4.0

WRITER = """
import sys, time
from pathlib import Path
from slurmx.store import atomic
from slurmx.store.state import PointState, update_state
from tests.helpers.synthetic import make_result
points = [Path(p) for p in sys.argv[2:]]
deadline = time.monotonic() + float(sys.argv[1])
n = 0
stages = ["preflight", "lmcache", "engine", "replay", "aggregate"]
while time.monotonic() < deadline:
    for p in points:
        stage = stages[n % len(stages)]
        update_state(p / "state.json", lambda s, stage=stage: (s or PointState(point_id=p.name)).advance(stage, "x" * (n % 500)))
        result = make_result(point_id=p.name, config_key="@KEY@", sweep_id=p.parent.parent.name, conc=2 + n % 7)
        atomic.write_json(p / "result.json", result.dump())
        n += 1
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
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER.replace("@KEY@", KEY), str(WRITE_S), *map(str, points)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    reads = torn = 0
    failures: list[str] = []
    commands: list[str] = []
    deadline = time.monotonic() + WRITE_S

    def users() -> None:
        """The commands users run, each from a fresh process, for as long as the writer writes."""
        while time.monotonic() < deadline:
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
    while time.monotonic() < deadline:
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
    writes = int((writer.communicate(timeout=60)[0] or "0").strip())
    assert writer.returncode == 0
    print(f"{reads} reads and {len(commands)} commands against {writes} writes: {torn} torn")
    assert torn == 0 and not failures, failures[:5]
    assert writes > 50 and reads > 200 and len(commands) >= 2  # the race really ran
    # the files are whole at the end too
    assert all(atomic.read_json(p / "result.json")["slurmx"]["point_id"] == p.name for p in points)
    assert update_state(points[0] / "state.json", lambda s: s or PointState(point_id="x")).stage in (
        "preflight", "lmcache", "engine", "replay", "aggregate",
    )  # fmt: skip
