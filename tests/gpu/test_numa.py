"""NUMA policy on recorded topologies: one NUMA node (the H200), two (one GPU per socket), and an
8-GPU two-socket B300 layout; the CPU-affinity launcher used where numactl is missing runs for real."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmx.node import numa
from slurmx.node.numa import Topology

TOPOLOGIES = Path(__file__).resolve().parents[1] / "data" / "gpu" / "topologies"
ROOT = Path(__file__).resolve().parents[2]


def topology(name: str, numa_nodes: dict[int, str]) -> Topology:
    return Topology(numa.parse_topo_matrix((TOPOLOGIES / name).read_text()), numa_nodes)


H200 = ("h200-1gpu-1numa.txt", {0: "0-15"})
PCIE2 = ("pcie-2gpu-2numa.txt", {0: "0-23", 1: "24-47"})
B300 = ("b300-8gpu-2socket.txt", {0: "0-63,128-191", 1: "64-127,192-255"})


def test_the_h200_capture_parses_with_its_terminal_escapes() -> None:
    topo = topology(*H200)
    assert topo.gpus == {"0": numa.GpuAffinity("0-15", 0)}


def test_b300_layout_puts_four_gpus_on_each_socket() -> None:
    topo = topology(*B300)
    assert [topo.gpus[str(i)].numa_node for i in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert topo.gpus["5"].cpus == "64-127,192-255"


@pytest.mark.parametrize(
    ("layout", "gpus", "policy", "expected"),
    [
        (H200, ["0"], "bind", ["numactl", "--cpunodebind=0", "--membind=0"]),
        (H200, ["0"], "none", []),
        (PCIE2, ["1"], "bind", ["numactl", "--cpunodebind=1", "--membind=1"]),
        (PCIE2, ["0", "1"], "interleave", ["numactl", "--cpunodebind=0,1", "--interleave=0,1"]),
        (B300, ["0", "1", "2", "3"], "bind", ["numactl", "--cpunodebind=0", "--membind=0"]),  # TP4 on socket 0
        (B300, ["4", "5", "6", "7"], "bind", ["numactl", "--cpunodebind=1", "--membind=1"]),  # TP4 on socket 1
        (B300, [str(i) for i in range(8)], "bind", ["numactl", "--cpunodebind=0,1", "--membind=0,1"]),  # TP8
        (B300, [str(i) for i in range(8)], "interleave", ["numactl", "--cpunodebind=0,1", "--interleave=0,1"]),
    ],
)
def test_policy_on_recorded_topologies(
    layout: tuple[str, dict[int, str]], gpus: list[str], policy: numa.NumaPolicy, expected: list[str]
) -> None:
    assert numa.placement_prefix(policy, topology(*layout), gpus, "numactl") == expected


def test_without_numactl_the_cpus_of_the_gpus_nodes_are_pinned() -> None:
    prefix = numa.placement_prefix("bind", topology(*B300), ["4", "5"], None)
    assert prefix == [sys.executable, "-m", "slurmx.node.numa", "--cpus", "64-127,192-255", "--"]


def test_gpus_without_known_numa_nodes_use_every_node() -> None:
    topo = Topology({"0": numa.GpuAffinity("0-1", None)}, {0: "0-1"})
    assert numa.placement_prefix("bind", topo, ["0"], "numactl") == ["numactl", "--cpunodebind=0", "--membind=0"]


def test_placement_on_this_host_is_recorded_and_pins_for_real(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": "0"}  # no nvidia-smi, no numactl: the local stack
    prefix, record = numa.placement("bind", env)
    nodes = numa.read_numa_nodes()
    assert record["policy"] == "bind" and record["nodes"] == sorted(nodes)
    assert record["tool"] == "cpu-affinity (numactl not found)"
    assert record["topology"]["numa_nodes"] == {str(n): c for n, c in nodes.items()}
    allowed = sorted(numa.parse_cpu_list(numa.cpus_of(record["nodes"], Topology({}, nodes))))
    first_cpu_only = [*prefix[:-2], str(allowed[0]), "--"]
    out = subprocess.run(
        [*first_cpu_only, sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        check=True,
    ).stdout
    assert out.strip() == str([allowed[0]])


def test_parse_cpu_list() -> None:
    assert numa.parse_cpu_list("0-2,8,10-11") == {0, 1, 2, 8, 10, 11}
