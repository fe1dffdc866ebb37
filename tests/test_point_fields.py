"""A point is built from keyword arguments: its names derive from its fields as it is built (or stay as given,
as a point.json read back keeps its own), and a multi-concurrency point keeps its list apart from `conc`."""

from __future__ import annotations

import re
from pathlib import Path

from slurmx.config.load import load_clusters, load_masters
from slurmx.plan import Point, expand

MULTINODE_FIXED = "dsr1-fp4-b200-dynamo-trt"
CLUSTERS = """
hardware:
  cluster:t:
    available-cpu-dram-mib: 2_964_436
    gpus-per-node: 8
"""
KEY = """
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
    - search-space:
      - { tp: 8, kv-offloading: none, conc-list: [4, 8] }
"""


def _expand(tmp_path: Path) -> list[Point]:
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    (tmp_path / "master.yaml").write_text(KEY)
    return expand(["k"], load_masters([tmp_path / "master.yaml"]), load_clusters(tmp_path / "clusters.yaml"))


def _by_hand(conc: int, **given: str) -> Point:
    return Point(
        config_key="k",
        scenario="agentic-coding",
        image="img",
        model="m",
        model_prefix="p",
        precision="fp4",
        framework="vllm",
        runner="cluster:t",
        multinode=False,
        disagg=False,
        spec_decoding="none",
        conc=conc,
        tp=8,
        duration_s=3600,
        **given,
    )


def test_a_point_built_by_hand_derives_the_names_plan_gives_it(tmp_path: Path) -> None:
    planned = _expand(tmp_path)
    assert [(p.conc, p.concs, p.concurrencies) for p in planned] == [(4, (), (4,)), (8, (), (8,))]
    for p in planned:
        built = _by_hand(p.conc)
        assert re.fullmatch(r"[0-9a-f]{12}", built.point_id)  # derived as it is built, not left empty
        assert (
            (built.point_id, built.exp_name) == (p.point_id, p.exp_name) == (p.point_id, f"p_tp8_conc{p.conc}_kvnone")
        )
        assert built == p


def test_given_names_are_kept_as_a_stored_point_keeps_its_own() -> None:
    stored = _by_hand(4, point_id="0123456789ab", exp_name="as-stored")
    assert (stored.point_id, stored.exp_name) == ("0123456789ab", "as-stored")
    derived = _by_hand(4).point_id
    assert derived != "0123456789ab" and re.fullmatch(r"[0-9a-f]{12}", derived)


def test_a_multinode_fixed_seq_len_point_runs_its_whole_list_and_conc_is_its_first(fixtures: Path) -> None:
    masters = load_masters([fixtures / "nvidia-master.yaml"])
    points = expand([MULTINODE_FIXED], masters, load_clusters(fixtures / "runners.yaml"))
    assert points and any(len(p.concs) > 1 for p in points)
    for p in points:
        assert p.concs and p.conc == p.concs[0] and p.concurrencies == p.concs
        assert p.row()["conc"] == list(p.concs)
        assert p.config_key == MULTINODE_FIXED  # the key is part of what the id hashes


FIXED = """
f:
  image: img
  model: m
  model-prefix: p
  runner: cluster:t
  precision: fp4
  framework: vllm
  multinode: false
  scenarios:
    fixed-seq-len:
    - isl: 1024
      osl: 8192
      search-space:
      - { tp: 4, conc-list: [16] }
"""


def test_a_fixed_seq_len_point_offloads_nothing_and_has_no_budget_or_duration(tmp_path: Path) -> None:
    """InferenceX's fixed-seq-len rows carry no kv-offloading, budget nor duration; the point says none, 0, None
    (a recipe is matched on its kv-offloading, point.json stores them), and 1024/8192 is no named pair: 1024_8192."""
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    (tmp_path / "master.yaml").write_text(FIXED)
    (point,) = expand(["f"], load_masters([tmp_path / "master.yaml"]), load_clusters(tmp_path / "clusters.yaml"))
    assert (point.kv_offloading, point.backend_name, point.kv_offload_backend) == ("none", "none", None)
    assert (point.total_cpu_dram_gb, point.dram_utilization, point.duration_s) == (0, None, None)
    assert (point.exp_name, point.row()["max-model-len"], point.conc) == ("p_1024_8192", 1024 + 8192 + 256, 16)
    assert point.config_key == "f"
    assert "kv-offloading" not in point.row() and "total-cpu-dram-gb" not in point.row()
