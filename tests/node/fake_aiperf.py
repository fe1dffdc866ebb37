"""A stand-in for `aiperf profile`, for the job-body tests: writes real aiperf 0.13 artifacts.

Answers `--version` as aiperf does; takes aiperf's argv (uses --artifact-dir and --concurrency) and copies the recorded artifacts of
tests/data/aiperf/lmcache-replay there. FAKE_AIPERF_<conc> (per concurrency) steers it:
  cancelled  artifacts of a replay aiperf cancelled (the validity gate must refuse them)
  exit       no artifacts, a last log line and exit code 4
  hang       touch $FAKE_ENGINE_DIR/replaying, then wait to be stopped (signal tests)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "aiperf" / "lmcache-replay"


def main() -> int:
    if sys.argv[1:2] == ["--version"]:  # what the job body's provisioning step asks of aiperf
        print("aiperf 0.13.0")
        return 0
    parser = argparse.ArgumentParser()
    parser.add_argument("--artifact-dir", type=Path, required=True)
    parser.add_argument("--concurrency", required=True)
    args, _other = parser.parse_known_args(sys.argv[2:])  # argv[1] is the `profile` subcommand
    mode = os.environ.get(f"FAKE_AIPERF_{args.concurrency}", "ok")
    if where := os.environ.get("FAKE_ENGINE_DIR"):  # the marker a sweep by the job's processes would match
        (Path(where) / f"replay-marker-{args.concurrency}").write_text(os.environ.get("SLURMX_JOB_MARKER", ""))
    if mode == "exit":
        print("aiperf: error: the endpoint answered 500 to every request", flush=True)
        return 4
    if mode == "hang":
        (Path(os.environ["FAKE_ENGINE_DIR"]) / "replaying").touch()
        while True:
            time.sleep(1)  # stands in for a replay that is still running when the job is stopped
    shutil.copytree(SAMPLE, args.artifact_dir, dirs_exist_ok=True)
    if mode == "cancelled":
        summary = args.artifact_dir / "profile_export_aiperf.json"
        data = json.loads(summary.read_text())
        data["was_cancelled"] = True
        summary.write_text(json.dumps(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
