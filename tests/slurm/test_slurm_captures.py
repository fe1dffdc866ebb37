"""The captures the fast tests parse (tests/data/slurm) are still what the live cluster prints: the helper that
made them runs again and each new capture must match the stored one, up to job ids, times and node names."""

from __future__ import annotations

import json
import re
from pathlib import Path

from slurmx.slurm.cluster_check import parse_kill_wait_s, parse_nodes, parse_partitions
from tests.helpers.slurm_captures import DATA, capture, normalized

STATIC = ("scontrol-show-node", "scontrol-show-partition", "scontrol-show-config")


def keys(text: str) -> list[set[str]]:
    """The field names of each line (KEY=VALUE, or 'Key = value' of scontrol show config), without their values."""
    return [set(re.findall(r"(\w+) *=", line)) for line in text.splitlines()]


def test_the_stored_captures_match_what_the_cluster_prints_now(slurm_cluster: None, tmp_path: Path) -> None:
    capture(tmp_path)
    stored = json.loads((DATA / "manifest.json").read_text())
    fresh = json.loads((tmp_path / "manifest.json").read_text())
    assert sorted(fresh) == sorted(stored)
    for name in sorted(stored):
        old, new = (DATA / f"{name}.out").read_text(), (tmp_path / f"{name}.out").read_text()
        assert fresh[name]["returncode"] == stored[name]["returncode"], name
        assert normalized(fresh[name]["stderr"]) == normalized(stored[name]["stderr"]), name
        assert normalized(" ".join(fresh[name]["argv"])) == normalized(" ".join(stored[name]["argv"])), name
        if name in STATIC:  # the cluster's own state: the same fields, the same figures slurmx reads
            assert keys(new) == keys(old), name
        else:
            assert normalized(new) == normalized(old), name
    assert json.loads((tmp_path / "mem-requests.json").read_text()) == json.loads(
        (DATA / "mem-requests.json").read_text()
    )
    node, partition, config = ((tmp_path / f"{name}.out").read_text() for name in STATIC)
    assert parse_nodes(node) == parse_nodes((DATA / "scontrol-show-node.out").read_text())
    assert parse_partitions(partition) == parse_partitions((DATA / "scontrol-show-partition.out").read_text())
    assert parse_kill_wait_s(config) == parse_kill_wait_s((DATA / "scontrol-show-config.out").read_text())
