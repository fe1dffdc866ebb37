"""The seed keys' rendered production commands, as kept in tests/golden/ (reviewed like code).

The test only compares; `scripts/update-golden` is the one way to rewrite the files, and it prints
the diff of what it changes so the change is reviewed, not slipped in by an environment variable.
"""

from __future__ import annotations

import difflib
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from slurmx.commands.common import load_points
from slurmx.plan import Point
from slurmx.submit.render import render_key

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
FIXTURES = Path(os.environ.get("SLURMX_FIXTURES", GOLDEN.parents[2] / "shared" / "fixtures" / "inferencex"))
KEYS = (
    "kimik3-fp4-b300-vllm-agentic-dspark-lmcache",
    "dsv4-fp4-b200-vllm-agentic-lmcache",
    "kimik3-fp4-h200-vllm-agentic",  # aggregated multinode: TP8xDP4 rendered per node, TP16xDP2 refused
    "dsv4-fp4-gb300-dynamo-vllm-agentic",  # Dynamo disaggregated: rendered for review, refused by submit
    "glm5.2-fp8-mi325x-sglang-agentic-mtp",  # SGLang, no offload arm (an InferenceX main key)
    "qwen3.5-fp8-b300-sglang-agentic-mtp",  # SGLang with and without its HiCache arm, TP2-EP2 and TP4
    "kimik3-fp4-mi355x-atom-agentic-mtp",  # ATOM with and without its in-process LMCache arm (budget / TP a rank)
    "minimaxm3-fp4-b300-trtllm-agentic-mtp",  # TRT-LLM: trtllm-serve under mpirun, its --config YAML per point
    # Dynamo rows whose srt-slurm recipe serves directly (config/srt.py's served_framework), one point each:
    "kimik3-fp4-b200-dynamo-vllm-agentic",  # `vllm serve`, one TP8 x PP2 rank over two nodes
    "kimik3-fp4-b200-dynamo-vllm-agentic-dspark",  # Mooncake over a rank of two nodes: refused, named
    "kimik3-fp4-gb200-dynamo-vllm-agentic-dspark-mooncake-tp8pp2",  # the same over four GB200 nodes: refused
    "qwen3.5-fp4-gb200-dynamo-sglang-agentic-mtp",  # sglang.launch_server, TP2 x EP2 with HiCache at 2.5 x
    "qwen3.5-fp4-gb300-dynamo-sglang-agentic-agg",  # sglang.launch_server, TP2 with HiCache at 0.9 x
    # Dynamo rows whose srt-slurm recipe has Dynamo's frontend (recipes/srt.py), one point each:
    "dsv4-fp4-gb200-dynamo-vllm-agentic-mtp-agg",  # dynamo.vllm DEP8 over two 4-GPU nodes behind dynamo.frontend
    "dsv4-fp8-h200-dynamo-sglang-agentic-agg",  # dynamo.sglang TP8 with HiCache at ratio 6 (the file's), one node
    # dynamo.vllm TP8 over two 4-GPU nodes, one Mooncake master on the head, 150 GB segments (the file's)
    "kimik3-fp4-gb300-dynamo-vllm-agentic-mooncake-dcp8-agg",
)
# keys rendered from an InferenceX fixture tree (`slurmx render --inferencex DIR KEY`): its master configs
TREES = {
    "glm5.2-fp8-mi325x-sglang-agentic-mtp": "repo-main", "qwen3.5-fp8-b300-sglang-agentic-mtp": "repo-main",
    "kimik3-fp4-mi355x-atom-agentic-mtp": "repo-main", "minimaxm3-fp4-b300-trtllm-agentic-mtp": "repo-main",
    "kimik3-fp4-b200-dynamo-vllm-agentic": "repo-main", "kimik3-fp4-b200-dynamo-vllm-agentic-dspark": "repo-main",
    "kimik3-fp4-gb200-dynamo-vllm-agentic-dspark-mooncake-tp8pp2": "repo-main",
    "qwen3.5-fp4-gb200-dynamo-sglang-agentic-mtp": "repo-main", "qwen3.5-fp4-gb300-dynamo-sglang-agentic-agg": "repo-main",
    "dsv4-fp4-gb200-dynamo-vllm-agentic-mtp-agg": "repo-main", "dsv4-fp8-h200-dynamo-sglang-agentic-agg": "repo-main",
    "kimik3-fp4-gb300-dynamo-vllm-agentic-mooncake-dcp8-agg": "repo-main",
}  # fmt: skip
# keys kept as one point's render (by its exp-name): the rest of the key differs only in figures its tests check
ONE_POINT = {
    "kimik3-fp4-b200-dynamo-vllm-agentic": "kimik3_p1x8_d0x8_conc1",
    "kimik3-fp4-b200-dynamo-vllm-agentic-dspark": "kimik3_p1x8_d0x8_conc1_kvdram-mooncake",
    "kimik3-fp4-gb200-dynamo-vllm-agentic-dspark-mooncake-tp8pp2": "kimik3_p1x8_d0x8_conc16_kvdram-mooncake",
    "qwen3.5-fp4-gb200-dynamo-sglang-agentic-mtp": "qwen3.5_p1x2ep2_d0x2ep2_conc22_kvdram-hicache",
    "qwen3.5-fp4-gb300-dynamo-sglang-agentic-agg": "qwen3.5_p1x2_d0x2_conc24_kvdram-hicache",
    "dsv4-fp4-gb200-dynamo-vllm-agentic-mtp-agg": "dsv4_p1x8ep8dpa_d0x8ep8dpa_conc8",
    "dsv4-fp8-h200-dynamo-sglang-agentic-agg": "dsv4_p1x8_d0x8_conc1_kvdram-hicache",
    "kimik3-fp4-gb300-dynamo-vllm-agentic-mooncake-dcp8-agg": "kimik3_p1x8_d0x8_conc48_kvdram-mooncake",
}  # fmt: skip


class _DefaultInputs:
    """`slurmx render`'s options left at their defaults: the shipped configs and recipes (and the InferenceX
    checkout a key of TREES is read from)."""

    config = None
    clusters = None

    def __init__(self, inferencex: Path | None = None) -> None:
        self.inferencex = inferencex


def _normalise(text: str, results: Path, tree: Path | None = None) -> str:
    # Machine-specific paths become placeholders; everything else must match byte for byte.
    text = text.replace(str(tree.resolve()), "<inferencex>").replace(str(tree), "<inferencex>") if tree else text
    return (
        text.replace(str(results.resolve()), "<results>")
        .replace(sys.executable, "<python>")
        .replace(str(Path(sys.executable).resolve()), "<python>")
    )


def render(key: str, results: Path) -> str:
    """What `slurmx render KEY` prints for the shipped configs (a TREES key: its fixture tree's), with machine
    paths as placeholders."""
    tree = FIXTURES / TREES[key] if key in TREES else None
    loaded = load_points(_DefaultInputs(tree), [key])  # type: ignore[arg-type]  # reads only .config, .clusters and .inferencex
    only = None
    if key in ONE_POINT:
        only = next(p.point_id for p in loaded.key_points(key) if p.exp_name == ONE_POINT[key])
    return _normalise(render_key(key, loaded, results, only), results, tree)


def points(key: str) -> list[Point]:
    """The key's points as render reads them (a TREES key: from its fixture tree)."""
    tree = FIXTURES / TREES[key] if key in TREES else None
    loaded = load_points(_DefaultInputs(tree), [key])  # type: ignore[arg-type]  # reads only .config, .clusters and .inferencex
    return [p for p in loaded.points if p.config_key == key]


def golden_path(key: str) -> Path:
    return GOLDEN / f"{key}.txt"


def diff(key: str, rendered: str) -> str:
    """Unified diff from the golden file to `rendered` (empty when equal)."""
    path = golden_path(key)
    old = path.read_text() if path.exists() else ""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), rendered.splitlines(keepends=True), f"a/{path.name}", f"b/{path.name}"
    )
    return "".join(lines)


def update_requested_in_ci(environ: Mapping[str, str]) -> bool:
    """CI must never be asked to rewrite goldens: a green run would then prove nothing."""
    return bool(environ.get("CI")) and "UPDATE_GOLDEN" in environ


def main() -> int:
    """Rewrite every golden file from the current code and print what changed."""
    changed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for key in KEYS:
            rendered = render(key, Path(tmp) / "results")
            delta = diff(key, rendered)
            if delta:
                sys.stdout.write(delta)
                golden_path(key).write_text(rendered)
                changed += 1
    print(f"update-golden: {changed} of {len(KEYS)} golden file(s) rewritten; review the diff above", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
