"""Run InferenceX's own generator as an oracle: one process, many cases, one JSON line each way.

Usage: python inferencex_oracle.py UPSTREAM_DIR; then write {"configs": [paths], "runners": path} lines to
stdin and read {"rows": [...]} or {"refused": "why"} lines from stdout. It is InferenceX's
`full-sweep --no-evals` (validation, then expansion), called in this process so that each case costs
milliseconds rather than a Python start-up.
"""

from __future__ import annotations

import argparse
import json
import sys


def full_sweep_args() -> argparse.Namespace:
    """The arguments InferenceX's CLI gives `generate_full_sweep` for a plain `full-sweep`."""
    return argparse.Namespace(
        step_size=2, min_conc=None, max_conc=None, runner_type=None, model_prefix=None, precision=None,
        framework=None, seq_lens=None, runner_node_filter=None, scenario_type=None, max_tp=None, max_ep=None,
        single_node=True, multi_node=True,
    )  # fmt: skip


def main() -> int:
    sys.path.insert(0, sys.argv[1])
    import generate_sweep_configs as generator  # InferenceX's module, from the fixture directory

    for line in sys.stdin:
        case = json.loads(line)
        try:
            configs = generator.load_config_files(case["configs"])
            runners = generator.load_runner_file(case["runners"])
            answer = {"rows": generator.generate_full_sweep(full_sweep_args(), configs, runners)}
        except Exception as exc:  # any refusal, including the generator's own crashes, is a refusal
            answer = {
                "refused": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            }
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
