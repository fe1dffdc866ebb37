"""The cluster check before sbatch, on the local cluster as its real `scontrol show node|partition|config`
printed it (tests/data/slurm; tests/slurm/test_slurm_captures.py keeps them current): two nodes node01 and
node02 in partition 'local', each Gres=gpu:b300:8(S:0-1), AvailableFeatures=b300,numa, RealMemory=16000,
Sockets=2; KillWait = 15 sec. Every message below is written out by hand from those figures."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slurmx.slurm import cluster_check
from slurmx.slurm.cluster_check import (
    NodeInfo,
    parse_kill_wait_s,
    parse_nodes,
    parse_partitions,
    scontrol_fields,
    why_memory_short,
    why_unrunnable,
)
from slurmx.slurm.request import SlurmRequest
from tests.helpers.slurm_captures import DATA
from tests.helpers.slurm_replay import calls, install

NODES_TEXT = (DATA / "scontrol-show-node.out").read_text()
NODES = parse_nodes(NODES_TEXT)
B300 = {"b300": 8}


def request(**changes: object) -> SlurmRequest:
    """One task's request on the local cluster (the local profile's figures); `changes` vary it."""
    fields: dict[str, object] = {
        "partition": "local", "gpus": 1, "gres_type": "b300", "features": ("b300",), "mem": "1G",
        "exclusive": False, "time_limit_min": 5,
    }  # fmt: skip
    return SlurmRequest.model_validate({**fields, **changes})


def test_the_nodes_as_scontrol_describes_them() -> None:
    assert [
        NodeInfo("node01", frozenset({"local"}), B300, frozenset({"b300", "numa"}), 16000, sockets=2),
        NodeInfo("node02", frozenset({"local"}), B300, frozenset({"b300", "numa"}), 16000, sockets=2),
    ] == NODES


def test_a_node_line_keeps_values_that_hold_an_equals_sign_and_skips_words_without_one() -> None:
    fields = scontrol_fields(NODES_TEXT.splitlines()[0])
    assert fields["CfgTRES"] == "cpu=8,mem=16000M,billing=8,gres/gpu=8,gres/gpu:b300=8"
    assert fields["Gres"] == "gpu:b300:8(S:0-1)" and fields["NodeName"] == "node01"
    assert "SMP" not in fields and "#1" not in fields  # the OS field's words after its first


@pytest.mark.parametrize(
    ("gres", "expected"),
    [
        ("gpu:b300:8(S:0-1)", {"b300": 8}),  # the capture's
        ("gpu:8", {"": 8}),  # untyped
        ("gpu:b300:8(S:0),gpu:h100:2", {"b300": 8, "h100": 2}),
        ("gpu:a100:2,gpu:a100:6(S:1)", {"a100": 8}),  # one type on two sockets' lines adds up
        ("gpu:4,gpu:2", {"": 6}),
        ("mps:400,gpu:h200:4", {"h200": 4}),  # not a GPU
        ("(null)", {}),
        ("", {}),
    ],
)
def test_gres_to_gpus_by_type(gres: str, expected: dict[str, int]) -> None:
    line = NODES_TEXT.splitlines()[0].replace("Gres=gpu:b300:8(S:0-1)", f"Gres={gres}")
    assert parse_nodes(line)[0].gpus_by_type == expected


def test_what_a_node_line_leaves_out_reads_as_nothing_and_lines_without_a_node_are_skipped() -> None:
    line = NODES_TEXT.splitlines()[0]
    # a node without features (scontrol prints '(null)'), and one whose line lacks the fields
    bare = line.replace("AvailableFeatures=b300,numa", "AvailableFeatures=(null)")
    assert parse_nodes(bare)[0].features == frozenset()
    assert parse_nodes("NodeName=n9 State=IDLE") == [NodeInfo("n9", frozenset(), {}, frozenset(), 0, sockets=1)]
    assert parse_nodes("NodeName=n9 RealMemory= Sockets= Partitions=a,,b AvailableFeatures=x,,y")[0] == NodeInfo(
        "n9", frozenset({"a", "b"}), {}, frozenset({"x", "y"}), 0, sockets=1
    )
    assert parse_nodes("\nNo nodes in the system\n" + NODES_TEXT) == NODES


def test_the_partitions_and_the_kill_wait() -> None:
    assert parse_partitions((DATA / "scontrol-show-partition.out").read_text()) == {"local"}
    assert parse_partitions("PartitionName=a Nodes=x\nPartitionName=b Nodes=y\n\nsomething else\n") == {"a", "b"}
    config = (DATA / "scontrol-show-config.out").read_text()
    assert parse_kill_wait_s(config) == 15
    assert parse_kill_wait_s("KillWait                = 120 sec\n") == 120
    # only the KillWait line itself, at a line's start
    assert parse_kill_wait_s(config.replace("KillWait ", "NoKillWait ")) is None
    assert parse_kill_wait_s("") is None


def test_the_queries_run_scontrol_as_the_captures_were_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The stand-in answers only the argv that printed a capture; the real one is exercised in tests/slurm.
    bin_dir = install(tmp_path / "bin", {})
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert cluster_check.query_nodes() == NODES
    assert cluster_check.query_partitions() == {"local"}
    assert cluster_check.query_kill_wait_s() == 15
    assert calls(bin_dir) == [
        ["scontrol", "show", "node", "--oneliner"],
        ["scontrol", "show", "partition", "--oneliner"],
        ["scontrol", "show", "config"],
    ]


def test_a_request_the_local_cluster_can_run() -> None:
    assert why_unrunnable(request(), {"local"}, NODES) is None
    # every figure at the nodes' own: 8 GPUs, both features, 2 sockets, 2 nodes of 16000 MB
    full = request(gpus=8, features=("b300", "numa"), sockets_per_node=2, nodes=2, mem="16000M")
    assert why_unrunnable(full, {"local"}, NODES) is None
    assert why_unrunnable(request(gres_type=None, gpus=8), {"local"}, NODES) is None  # untyped: any GPU counts
    assert why_unrunnable(request(exclude=("node01",), gpus=8), {"local"}, NODES) is None  # node02 is left


@pytest.mark.parametrize(
    ("changes", "partitions", "expected"),
    [
        ({"partition": "gpu"}, {"local"}, "partition 'gpu' does not exist (have: local)"),
        ({"partition": "gpu"}, {"local", "debug"}, "partition 'gpu' does not exist (have: debug, local)"),
        ({"partition": "gpu"}, set(), "partition 'gpu' does not exist (have: none)"),
        (
            {"exclude": ("node01", "node02")},
            {"local"},
            "every node of partition 'local' is excluded (node01,node02 failed this point)",
        ),
        ({"gpus": 9}, {"local"}, "no node in partition 'local' has gpu:b300:9 (at most 8)"),
        ({"gres_type": None, "gpus": 9}, {"local"}, "no node in partition 'local' has gpu:9 (at most 8)"),
        ({"gres_type": "h100"}, {"local"}, "no node in partition 'local' has gpu:h100:1 (at most 0)"),
        ({"features": ("b300", "nvl72")}, {"local"}, "no node with gpu:b300:1 has features b300,nvl72"),
        (
            {"sockets_per_node": 4},
            {"local"},
            "no node with gpu:b300:1 has 4 sockets (--sockets-per-node; at most 2)",
        ),
        (
            {"nodes": 3, "gpus": 8},
            {"local"},
            "the point needs 3 nodes with gpu:b300:8, 1G of memory and features b300 each in partition 'local'; "
            "2 have it (node01,node02)",
        ),
        (
            {"nodes": 3, "features": ("b300", "numa")},
            {"local"},
            "the point needs 3 nodes with gpu:b300:1, 1G of memory and features b300,numa each in partition "
            "'local'; 2 have it (node01,node02)",
        ),
        # a partition no node is in (scontrol lists it with Nodes=(null))
        ({"partition": "spare"}, {"local", "spare"}, "no node in partition 'spare' has gpu:b300:1 (at most 0)"),
        (
            {"nodes": 2, "mem": "0", "features": (), "exclude": ("node02",)},
            {"local"},
            "the point needs 2 nodes with gpu:b300:1 each in partition 'local'; 1 have it (node01)",
        ),
        (
            {"nodes": 2, "mem": "16001M"},
            {"local"},
            "the point needs 2 nodes with gpu:b300:1, 16001M of memory and features b300 each in partition "
            "'local'; 0 have it (none)",
        ),
    ],
)
def test_why_the_local_cluster_cannot_run_a_request(
    changes: dict[str, object], partitions: set[str], expected: str
) -> None:
    assert why_unrunnable(request(**changes), partitions, NODES) == expected


def test_the_gpu_count_a_request_is_refused_with_is_the_best_node_of_its_partition() -> None:
    small = dataclasses.replace(NODES[0], name="node03", gpus_by_type={"b300": 4})
    other = dataclasses.replace(NODES[1], name="node04", partitions=frozenset({"big"}), gpus_by_type={"b300": 16})
    nodes = [small, other]
    assert why_unrunnable(request(gpus=8), {"local", "big"}, nodes) == (
        "no node in partition 'local' has gpu:b300:8 (at most 4)"  # node04's 16 are in another partition
    )
    # the multinode count takes only nodes of the partition, not excluded, with the sockets asked
    two_socket = dataclasses.replace(NODES[1], sockets=1)
    assert why_unrunnable(request(nodes=2, sockets_per_node=2), {"local"}, [NODES[0], two_socket]) == (
        "the point needs 2 nodes with gpu:b300:1, 1G of memory and features b300 each in partition 'local'; "
        "1 have it (node01)"
    )


# why_memory_short: the pool and margin as submit names them (`what`), the request's --mem made of them.
WHAT = "lmcache pool 8192 MB + margin 1024 MB"


def test_a_point_whose_memory_the_nodes_hold_passes() -> None:
    assert why_memory_short(request(mem="16000M"), 9216, WHAT, NODES) is None  # exactly RealMemory
    assert why_memory_short(request(mem="0"), 16000, WHAT, NODES) is None  # the whole node, as big as the need
    assert why_memory_short(request(mem="0"), 0, "", NODES) is None  # nothing asked, nothing needed
    assert why_memory_short(request(mem="0"), -5, "", []) is None


def test_a_point_asking_more_than_every_node_is_refused_with_the_figures() -> None:
    # --mem=17000M is the profile's 7784 MB plus the pool and margin's 9216 MB; nodes have 16000 MB
    assert why_memory_short(request(mem="17000M"), 9216, WHAT, NODES) == (
        "host memory: the point needs 17000 MB (--mem=17000M = profile mem 7784 MB + lmcache pool 8192 MB + "
        "margin 1024 MB), the largest node that fits its request (node01) has RealMemory=16000 MB"
    )
    assert why_memory_short(request(mem="17000M"), 9216, "", NODES) == (
        "host memory: the point needs 17000 MB (--mem=17000M), the largest node that fits its request (node01) "
        "has RealMemory=16000 MB"
    )
    # a whole-node request (--mem=0) needs the pool and margin themselves
    assert why_memory_short(request(mem="0"), 16001, WHAT, NODES) == (
        "host memory: the point needs 16001 MB (lmcache pool 8192 MB + margin 1024 MB), the largest node that "
        "fits its request (node01) has RealMemory=16000 MB"
    )


def test_the_largest_node_named_is_one_that_fits_everything_but_memory() -> None:
    small = dataclasses.replace(NODES[0], real_memory_mb=8000)
    big = dataclasses.replace(NODES[1], real_memory_mb=12000)
    need = request(mem="14000M")
    assert why_memory_short(need, 0, "", [small, big]) == (
        "host memory: the point needs 14000 MB (--mem=14000M), the largest node that fits its request (node02) "
        "has RealMemory=12000 MB"
    )
    # node02 unfit in each way but memory: node01 is the one named, and node02 with memory enough saves nothing
    for unfit in (
        dataclasses.replace(big, partitions=frozenset({"other"})),
        dataclasses.replace(big, gpus_by_type={"b300": 0}),
        dataclasses.replace(big, features=frozenset({"numa"})),
    ):
        assert "(node01) has RealMemory=8000 MB" in str(why_memory_short(need, 0, "", [small, unfit]))
        assert why_memory_short(need, 0, "", [small, dataclasses.replace(unfit, real_memory_mb=20000)]) is not None
    assert "(node01)" in str(why_memory_short(request(mem="14000M", exclude=("node02",)), 0, "", [small, big]))
    # untyped GPUs: every type counts; with sockets asked, a node with fewer is not a candidate
    assert "(node02)" in str(why_memory_short(request(mem="14000M", gres_type=None, gpus=8), 0, "", [small, big]))
    assert "(node01)" in str(
        why_memory_short(request(mem="14000M", sockets_per_node=2), 0, "", [small, dataclasses.replace(big, sockets=1)])
    )
    # GPUs of the type asked count, not a node's other GPUs (Gres=gpu:b300:4,gpu:h100:8), nor a node of another type
    for other_gpus in ({"b300": 4, "h100": 8}, {"h100": 8}):
        mixed = dataclasses.replace(big, real_memory_mb=20000, gpus_by_type=other_gpus)
        assert "(node01)" in str(why_memory_short(request(mem="14000M", gpus=4 + 1), 0, "", [small, mixed]))
        assert "(node01)" in str(
            why_memory_short(
                request(mem="14000M", gpus=1, gres_type="a100"),
                0,
                "",
                [dataclasses.replace(small, gpus_by_type={"a100": 1}), mixed],
            )
        )
    # no node fits the rest of the request: that is why_unrunnable's to say, not a memory shortage
    assert why_memory_short(request(mem="14000M", gpus=9), 0, "", [small, big]) is None
