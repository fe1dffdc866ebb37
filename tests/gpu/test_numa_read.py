"""NUMA placement read in this process: `nvidia-smi topo -m` from a stand-in on the job's PATH printing the H200's
captured matrix, the NUMA nodes from a /sys-shaped directory, and the record the lock keeps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmx.node import numa
from slurmx.node.numa import GpuAffinity, Topology

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu"


def smi_printing(bin_dir: Path, capture: Path) -> dict[str, str]:
    """A job env whose PATH (and only it) has an nvidia-smi answering `topo -m` with a captured matrix."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(f'#!/bin/sh\n[ "$1 $2" = "topo -m" ] || exit 3\ncat {capture}\n')
    script.chmod(0o755)
    return {"PATH": str(bin_dir)}


def test_the_jobs_nvidia_smi_gives_the_h200s_matrix(tmp_path: Path) -> None:
    env = smi_printing(tmp_path / "bin", DATA / "h200" / "nvidia-smi-topo-m.txt")
    topo = numa.read_topology(env)
    assert topo.gpus == {"0": GpuAffinity("0-15", 0)}  # the capture: GPU0, CPU Affinity 0-15, NUMA Affinity 0


def test_an_nvidia_smi_that_cannot_run_gives_no_gpus(tmp_path: Path) -> None:
    bad = tmp_path / "bin" / "nvidia-smi"
    bad.parent.mkdir()
    bad.write_text("#!/nonexistent/interpreter\n")  # exec fails: OSError
    bad.chmod(0o755)
    assert numa.read_topology({"PATH": str(bad.parent)}).gpus == {}
    assert numa.read_topology({"PATH": str(tmp_path / "none")}).gpus == {}


def test_numa_nodes_from_sys(tmp_path: Path) -> None:
    for name, cpus in (("node0", "0-15\n"), ("node1", "16-31\n"), ("node10", "32-33\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "cpulist").write_text(cpus)
    (tmp_path / "node2").mkdir()  # no cpulist: skipped
    (tmp_path / "nodeX").mkdir()  # not a node
    (tmp_path / "possible").write_text("0-2\n")
    assert numa.read_numa_nodes(tmp_path) == {0: "0-15", 1: "16-31", 10: "32-33"}


def test_every_gpu_in_index_order_when_none_is_named() -> None:
    topo = Topology({i: GpuAffinity("0", 0) for i in ("10", "2", "0", "1")}, {0: "0"})
    assert numa.point_gpus({}, topo) == ["0", "1", "2", "10"]
    assert numa.point_gpus({"CUDA_VISIBLE_DEVICES": "2,GPU-ab,10"}, topo) == ["2", "10"]


def test_the_record_of_a_placement_in_a_container(tmp_path: Path) -> None:
    env = {**smi_printing(tmp_path / "bin", DATA / "topologies" / "pcie-2gpu-2numa.txt"), "CUDA_VISIBLE_DEVICES": "1"}
    prefix, record = numa.placement("interleave", env, in_container=True)
    nodes = numa.read_numa_nodes()  # this host's /sys: the topology is the node's, the GPUs the matrix's
    assert prefix == ["numactl", "--cpunodebind=1", "--interleave=1"]
    assert record == {
        "policy": "interleave",
        "tool": "numactl (inside the container)",
        "gpus": ["1"],
        "nodes": [1],
        "prefix": prefix,
        "topology": {
            "gpus": {"0": {"cpus": "0-23", "numa_node": 0}, "1": {"cpus": "24-47", "numa_node": 1}},
            "numa_nodes": {str(n): c for n, c in nodes.items()},
        },
    }


def test_no_policy_places_nothing_and_records_no_nodes(tmp_path: Path) -> None:
    env = smi_printing(tmp_path / "bin", DATA / "topologies" / "pcie-2gpu-2numa.txt")
    prefix, record = numa.placement("none", env)
    assert prefix == [] and record["nodes"] == [] and record["gpus"] == ["0", "1"]


def test_nodes_without_known_cpus_place_nothing() -> None:
    topo = Topology({"0": GpuAffinity("0-1", 3)}, {0: "0-1"})  # GPU on node 3, which /sys does not list
    assert numa.placement_prefix("bind", topo, ["0"], None) == []
    assert numa.cpus_of([0, 3], topo) == "0-1"
    assert numa.placement_prefix("bind", Topology({}, {}), ["0"], "numactl") == []


def test_render_shows_the_nodes_still_to_be_read() -> None:
    assert numa.review_prefix("bind") == ["numactl", "--cpunodebind={gpu_numa_nodes}", "--membind={gpu_numa_nodes}"]
    assert numa.review_prefix("none") == []


def test_a_matrix_without_the_affinity_columns_names_no_gpu() -> None:
    assert numa.parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tNV18\n") == {}
    short = "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-3\nGPU1\t X \t4-7\t1\n"  # GPU0's row cut short
    assert numa.parse_topo_matrix(short) == {"1": GpuAffinity("4-7", 1)}


@pytest.mark.parametrize("argv", [[], ["--cpus", "0"], ["--cpu", "0", "--", "true"], ["--cpus", "0", "true", "x"]])
def test_the_launcher_refuses_a_bad_command_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert numa.main(argv) == 2
    assert capsys.readouterr().err == "usage: python -m slurmx.node.numa --cpus LIST -- ARGV...\n"


def test_the_launcher_reads_its_own_argv(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["numa", "--cpus"])
    assert numa.main() == 2


def test_the_launcher_pins_and_becomes_its_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert numa.main(["--cpus"]) == 2  # in this process: the usage error
    capsys.readouterr()
    cpu = min(os.sched_getaffinity(0))
    src = Path(numa.__file__).resolve().parents[2]  # the slurmx this test imported (mutmut's copy under mutmut)
    done = subprocess.run(
        # main() reading sys.argv, as `python -m slurmx.node.numa` runs it (imported: mutmut's copy is the one run)
        [sys.executable, "-c", "import sys; from slurmx.node.numa import main; sys.exit(main())", "--cpus", str(cpu),
         "--", sys.executable, "-c",
         "import os, sys; print(sorted(os.sched_getaffinity(0)), sys.argv[1:])", "a b"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(src)}, check=True,
    )  # fmt: skip
    assert done.stdout == f"[{cpu}] ['a b']\n"


def test_the_cpus_of_several_nodes_and_a_numa_affinity_nvidia_smi_does_not_know() -> None:
    pcie = numa.parse_topo_matrix((DATA / "topologies" / "pcie-2gpu-2numa.txt").read_text())
    assert numa.cpus_of([0, 1], Topology(pcie, {0: "0-23", 1: "24-47"})) == "0-23,24-47"
    unknown = "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-15\tN/A\n"  # one NUMA node: nvidia-smi says N/A
    assert numa.parse_topo_matrix(unknown) == {"0": GpuAffinity("0-15", None)}
