"""Run InferenceX's own result judging as an oracle: one process, many cases, one JSON line each way.

Usage: python inferencex_results_oracle.py REPO_DIR; then write {"result_dir": path, "threshold": x,
"prefix": "vllm:", "env": {...}} lines to stdin and read one answer line each: `validation` (the errors
validate_agentic_result.validate_result returns for result_dir/aiperf_artifacts), `server_metrics` (the
exit status and stderr of benchmark_lib.sh's validate_required_agentic_server_metrics, run by bash) and
`agg` (process_agentic_result's aggregate, rounded as its main() writes it) or `agg_refused` (why it
raised). Nothing of InferenceX is copied: its modules are imported from REPO_DIR.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def _aggregate(artifacts: Path) -> dict[str, Any]:
    from utils.agentic.aggregation import process_agentic_result as process
    from utils.agentic.aggregation.aggregation_common import round_floats
    from utils.agentic.aggregation.request_metrics import load_aggregate, load_records_with_accounting
    from utils.agentic.aggregation.server_metrics import load_server_metrics

    records, accounting = load_records_with_accounting(artifacts / "profile_export.jsonl")
    aggregate_path = artifacts / "profile_export_aiperf.json"
    aggregate = load_aggregate(aggregate_path) if aggregate_path.exists() else {}
    server = load_server_metrics(artifacts / "server_metrics_export.json")
    agg = process.build_agg(records, aggregate, server, request_accounting=accounting, server_log_paths=[])
    rounded: dict[str, Any] = round_floats(agg)
    return rounded


def _server_metrics(lib: Path, result_dir: Path, prefix: str) -> dict[str, Any]:
    script = 'source "$1" >/dev/null 2>&1; validate_required_agentic_server_metrics "$2"'
    env = {**os.environ, "AIPERF_REQUIRED_SERVER_METRIC_PREFIX": prefix}
    done = subprocess.run(
        ["bash", "-c", script, "_", str(lib), str(result_dir)], env=env, capture_output=True, text=True, timeout=30
    )
    return {"rc": done.returncode, "stderr": done.stderr.strip()}


def main() -> int:
    repo = Path(sys.argv[1])
    sys.path.insert(0, str(repo))
    from utils.agentic.validation.validate_agentic_result import validate_result

    for line in sys.stdin:
        case = json.loads(line)
        result_dir = Path(case["result_dir"])
        artifacts = result_dir / "aiperf_artifacts"
        with contextlib.redirect_stdout(io.StringIO()):  # its success line would break this protocol
            validation = validate_result(artifacts, float(case["threshold"]))
        answer: dict[str, Any] = {"validation": validation}
        answer["server_metrics"] = _server_metrics(repo / "benchmarks" / "benchmark_lib.sh", result_dir, case["prefix"])
        saved = dict(os.environ)
        os.environ.update(case.get("env", {}))
        try:
            answer["agg"] = _aggregate(artifacts)
        except (Exception, SystemExit) as exc:  # InferenceX refusing the artifacts is an answer too
            answer["agg_refused"] = f"{type(exc).__name__}: {exc}"
        finally:
            os.environ.clear()
            os.environ.update(saved)
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
