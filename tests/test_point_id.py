"""Point ids are deterministic, ignore YAML key order and comments, and change with what runs."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slurmx.config.load import load_clusters, load_masters
from slurmx.plan import Point, dram_budget_gb, expand

CLUSTERS = """
hardware:
  cluster:t:
    available-cpu-dram-mib: 2_964_436
    gpus-per-node: 8
"""

KEY_A = """
k:
  image: img
  model: m
  model-prefix: p
  runner: cluster:t
  precision: fp4
  framework: vllm
  multinode: false
  scenarios:
    agentic-coding:
    - dram-utilization: 0.63
      search-space:
      - { tp: 8, ep: 1, kv-offloading: dram, kv-offload-backend: { name: lmcache, version: "1" }, conc-list: [4, 8] }
"""

# Same meaning: keys reordered, comments added, defaults spelled out.
KEY_B = """
k:
  # a comment that changes nothing
  scenarios:
    agentic-coding:
    - search-space:
      - { conc-list: [4, 8], kv-offload-backend: { version: "1", name: lmcache }, kv-offloading: dram, ep: 1, tp: 8, pp: 1 }
      dram-utilization: 0.63
  framework: vllm
  precision: fp4
  multinode: false
  runner: cluster:t
  model-prefix: p
  model: m
  image: img
"""


def _ids(tmp_path: Path, text: str, name: str) -> list[str]:
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    (tmp_path / name).write_text(text)
    masters = load_masters([tmp_path / name])
    return [p.point_id for p in expand(["k"], masters, load_clusters(tmp_path / "clusters.yaml"))]


def test_point_id_ignores_key_order_comments_and_defaults(tmp_path: Path) -> None:
    assert _ids(tmp_path, KEY_A, "a.yaml") == _ids(tmp_path, KEY_B, "b.yaml")


# Recorded when results trees were first written with these ids: a change here means every
# existing result.json, state.json and `submit` skip decision stops matching its point.
RECORDED_IDS = ["db1478a20959", "957511704796"]


def test_point_id_matches_the_recorded_value(tmp_path: Path) -> None:
    assert _ids(tmp_path, KEY_A, "a.yaml") == RECORDED_IDS


def test_point_id_is_the_same_in_another_process_with_another_hash_seed(tmp_path: Path) -> None:
    """Nothing process-local (str hashing, dict order of a fresh interpreter) leaks into the id."""
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    (tmp_path / "b.yaml").write_text(KEY_B)
    script = (
        "import sys; from pathlib import Path; "
        "from slurmx.config.load import load_clusters, load_masters; from slurmx.plan import expand; "
        "d = Path(sys.argv[1]); "
        "print(' '.join(p.point_id for p in expand(['k'], load_masters([d / 'b.yaml']), load_clusters(d / 'clusters.yaml'))))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == RECORDED_IDS


def test_point_id_changes_with_what_runs(tmp_path: Path) -> None:
    base = _ids(tmp_path, KEY_A, "a.yaml")
    assert base != _ids(tmp_path, KEY_A.replace("0.63", "0.5"), "d.yaml")
    assert base != _ids(tmp_path, KEY_A.replace("image: img", "image: img2"), "e.yaml")
    assert len(set(base)) == 2


def test_dram_budget_matches_inferencex_formula() -> None:
    assert dram_budget_gb(2_964_436, 8, 0.63, 8) == 1889
    assert dram_budget_gb(3_095_781, 8, 0.80, 8) == 2399  # capped at 2,861,022 MiB
    assert dram_budget_gb(2_964_436, 8, 0.63, 4) == 944


def _alone(point: Point) -> str:
    """The id from the point's own row, encoded whole: the definition expand's shared encoding must match."""
    hashed = {k: v for k, v in point.row().items() if k not in ("exp-name", "run-eval")} | {
        "config-key": point.config_key
    }
    return hashlib.sha256(json.dumps(hashed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]


def test_every_fixture_point_id_is_its_own_rows_hash(fixtures: Path) -> None:
    """expand encodes one row per search-space entry and puts each further concurrency in conc's place."""
    masters = load_masters([fixtures / "nvidia-master.yaml", fixtures / "amd-master.yaml"])
    points = expand(list(masters.configs), masters, load_clusters(fixtures / "runners.yaml"))
    assert len(points) == 1820
    # the shared encoding served most of them: far fewer entries than points
    assert len({(p.config_key, p.exp_name.replace(f"conc{p.conc}", "")) for p in points}) < len(points) / 2
    assert [p.point_id for p in points] == [_alone(p) for p in points]


MULTINODE_AGENTIC = """
k:
  image: img
  model: m
  model-prefix: p
  runner: cluster:t
  precision: fp4
  framework: dynamo-vllm
  multinode: true
  disagg: true
  kv-p2p-transfer: nixl
  scenarios:
    agentic-coding:
    - search-space:
      - prefill: { num-worker: 1, tp: 8, ep: 1, dp-attn: false }
        decode: { num-worker: 1, tp: 8, ep: 1, dp-attn: false }
        conc-list: [4, 8, 16]
"""


def test_a_multinode_points_siblings_hash_their_conc_as_a_list(tmp_path: Path) -> None:
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    (tmp_path / "m.yaml").write_text(MULTINODE_AGENTIC)
    points = expand(["k"], load_masters([tmp_path / "m.yaml"]), load_clusters(tmp_path / "clusters.yaml"))
    assert [p.row()["conc"] for p in points] == [[4], [8], [16]]
    assert [p.point_id for p in points] == [_alone(p) for p in points]
    assert len({p.point_id for p in points}) == 3


def _inferencex_budget(fixtures: Path) -> Any:
    """InferenceX's own agentic_dram_offload_gb, from its generator in the fixtures (main 843c6254f)."""
    sys.path.insert(0, str(fixtures / "upstream-code"))
    try:
        import generate_sweep_configs  # type: ignore[import-not-found]  # InferenceX's, on sys.path only here
    finally:
        sys.path.remove(str(fixtures / "upstream-code"))
    return generate_sweep_configs.agentic_dram_offload_gb


# (available MiB, GPUs per node, utilization, tp, pp, pcp). 1,953,125 MiB = 5^9 * 2^20 bytes = 2^11 * 10^9 bytes:
# 2048 GB exactly, so a budget that lands on a whole GB shows any change of the divisor or the truncation.
BUDGETS = [
    ((1_953_125, 8, 1.0, 8, 1, 1), 2048),
    ((1_953_125, 8, 0.5, 4, 1, 1), 512),
    ((1_953_125, 8, 0.25, 2, 2, 1), 256),  # tp2 x pp2: half the node
    ((1_953_125, 4, 0.75, 1, 1, 2), 768),  # pcp 2 of 4 GPUs
    ((1_953_125, 8, 0.7, 8, 1, 1), 1433),  # 1433.6 truncated
    ((3_906_250, 8, 1.0, 8, 1, 1), 2999),  # capped at 2,861,022 MiB: 2,861,022 * 2^20 = 2,999,999,004,672 bytes
    ((1_000, 8, 0.63, 1, 1, 1), 0),  # under one GB
]


@pytest.mark.parametrize(("figures", "gb"), BUDGETS)
def test_dram_budget_is_inferencex_own_function_on_whole_gb_boundaries(
    fixtures: Path, figures: tuple[int, int, float, int, int, int], gb: int
) -> None:
    available, per_node, utilization, tp, pp, pcp = figures
    runners = {"hardware": {"cluster:t": {"available-cpu-dram-mib": available, "gpus-per-node": per_node}}}
    entry = {"tp": tp, "pp": pp, "pcp-size": pcp, "kv-offloading": "dram"}
    theirs = _inferencex_budget(fixtures)({"dram-utilization": utilization}, entry, "cluster:t", runners)
    assert dram_budget_gb(available, per_node, utilization, tp * pp * pcp) == theirs == gb
