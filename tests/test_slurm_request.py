"""A point's Slurm request from its profile: --mem in MB as the local cluster's controller reads each spelling
(tests/data/slurm/mem-requests.json: the MinMemoryNode `scontrol show job` showed for a held job of each), the
profile's fields and defaults, and the one-line summary plan prints."""

from __future__ import annotations

import json

import pytest

from slurmx.config.clusters import SlurmProfile
from slurmx.errors import UserError
from slurmx.slurm.request import SlurmRequest, mem_mb, point_mem, slurm_request
from tests.helpers.slurm_captures import DATA

# MinMemoryNode as scontrol prints it, in MB by hand (Slurm's units are binary: 1G = 1024M, 1T = 1024G)
SHOWN_MB = {"16G": 16384, "500M": 500, "2M": 2, "1T": 1024 * 1024, "0": 0}


@pytest.mark.parametrize("spelling", sorted(json.loads((DATA / "mem-requests.json").read_text())))
def test_mem_in_mb_is_what_the_controller_holds_the_job_to(spelling: str) -> None:
    held = json.loads((DATA / "mem-requests.json").read_text())[spelling]
    assert mem_mb(spelling) == SHOWN_MB[held]


def test_mem_spellings_of_every_unit() -> None:
    assert [mem_mb(m) for m in ("2T", " 3g ", "1024", "1025K", "1024k", "0M")] == [2 * 1024 * 1024, 3072, 1024, 2, 1, 0]


@pytest.mark.parametrize("bad", ["16X", "", "G", "-1G", "1.5G"])
def test_a_spelling_sbatch_does_not_take_is_one_line(bad: str) -> None:
    with pytest.raises(UserError) as caught:
        mem_mb(bad)
    assert str(caught.value) == f"invalid Slurm memory request {bad!r} (use e.g. 16G, 500M or 0)"


def test_a_points_mem_is_the_profiles_plus_its_need() -> None:
    assert point_mem("1G", 1) == "1025M"
    assert point_mem("6G", 9216) == "15360M"
    assert point_mem("1G", 0) == "1G" and point_mem("1G", -3) == "1G"  # no need: the profile's as written
    assert point_mem("0", 9216) == "0"  # the whole node already
    assert point_mem("0M", 9216) == "0M"


PROFILE = SlurmProfile.model_validate(
    {
        "partition": "local",
        "gres-type": "b300",
        "features": ["b300", "numa"],
        "mem": "6G",
        "qos": "high",
        "account": "acct",
        "exclude": ["node03"],
        "cpus-per-task": 16,
        "sockets-per-node": 2,
    }
)


def test_the_request_takes_the_profiles_fields() -> None:
    assert slurm_request(PROFILE, 4) == SlurmRequest(
        partition="local",
        gpus=4,
        gres_type="b300",
        features=("b300", "numa"),
        mem="6G",
        exclusive=True,  # the profile's default
        time_limit_min=480,  # the profile's default
        account="acct",
        qos="high",
        cpus_per_task=16,
        nodes=1,
        exclude=("node03",),
        sockets_per_node=2,
        gres_flags=None,
        mem_bind=None,  # numa-policy none asks nothing
    )


def test_need_nodes_time_and_numa_policy_change_only_their_fields() -> None:
    req = slurm_request(PROFILE, 8, 2, host_need_mb=1024, numa_policy="bind", time_limit_min=30)
    assert (req.nodes, req.mem, req.time_limit_min, req.gres_flags, req.mem_bind) == (
        2,
        "7168M",
        30,
        "enforce-binding",
        "local",
    )
    assert (slurm_request(PROFILE, 1, numa_policy="interleave").gres_flags, slurm_request(PROFILE, 1).mem) == (
        "enforce-binding",
        "6G",
    )
    assert slurm_request(PROFILE, 1, numa_policy="interleave").mem_bind is None


def test_the_summary_names_every_part_of_the_request() -> None:
    full = slurm_request(PROFILE, 2, 2, numa_policy="bind", time_limit_min=30).model_copy(
        update={"exclude": ("node01", "node02")}
    )
    assert full.summary() == (
        "local gpu:b300:2 x2 nodes -C b300&numa mem=6G excl enforce-binding sockets>=2 mem-bind=local 30m "
        "--exclude node01,node02"
    )
    plain = SlurmRequest(partition="p", gpus=1, gres_type=None, features=(), mem="0", exclusive=False, time_limit_min=5)
    assert plain.summary() == "p gpu:1 mem=0 5m"
