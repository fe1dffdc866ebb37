"""One array per request: the sbatch script's options written out by hand as `man sbatch` spells them, and the
submission through a stand-in sbatch that answers what the local cluster's sbatch really printed
(tests/data/slurm/sbatch-array.out: 'Submitted batch job <id>')."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from submitit.core.utils import DelayedSubmission

from slurmx.slurm.request import SlurmRequest
from slurmx.slurm.sbatch import ArrayPlan, array_id, render_sbatch, submit_array
from tests.helpers.slurm_captures import DATA
from tests.helpers.slurm_replay import calls, install


def plan(folder: Path, groups: list[list[str]], **changes: object) -> ArrayPlan:
    fields: dict[str, object] = {
        "partition": "local", "gpus": 2, "gres_type": "b300", "features": ("b300",), "mem": "20G",
        "exclusive": False, "time_limit_min": 30,
    }  # fmt: skip
    request = SlurmRequest.model_validate({**fields, **changes})
    return ArrayPlan(
        folder=folder,
        request=request,
        job_name="jn",
        groups=groups,
        array_parallelism=2,
        signal_delay_s=45,
        setup=["module load x"],
    )


def options(script: str) -> list[str]:
    return re.findall(r"^#SBATCH (.*)$", script, flags=re.MULTILINE)


def test_a_plain_request_asks_only_what_it_names() -> None:
    script = render_sbatch(plan(Path("/tmp/f"), [["a"], ["b"], ["c"]], features=()))
    assert sorted(options(script)) == sorted([
        "--array=0-2%2",  # three groups, two at a time
        "--gres=gpu:b300:2",
        "--job-name=jn",
        "--mem=20G",
        "--nodes=1",
        "--ntasks-per-node=1",
        "--open-mode=append",
        "--output=/tmp/f/%A_%a_0_log.out",
        "--partition=local",
        "--signal=USR2@45",
        "--time=30",
        "--wckey=submitit",
    ])  # fmt: skip
    assert "\nmodule load x\n" in script
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert "--mem-bind" not in srun


def test_every_option_of_a_full_request_reaches_the_script() -> None:
    full = plan(
        Path("/tmp/f"),
        [["a"], ["b", "c"]],
        features=("b300", "numa"),
        exclusive=True,
        account="acct",
        qos="high",
        cpus_per_task=16,
        nodes=2,
        exclude=("node01", "node02"),
        gres_flags="enforce-binding",
        sockets_per_node=2,
        mem_bind="local",
    )
    got = set(options(render_sbatch(full)))
    assert {
        "--account=acct",
        "--array=0-1%2",
        "--constraint='b300&numa'",  # Slurm ANDs features joined by '&'
        "--cpus-per-task=16",
        "--exclude=node01,node02",
        "--exclusive",
        "--gres-flags=enforce-binding",
        "--nodes=2",
        "--qos=high",
        "--sockets-per-node=2",
    } <= got
    srun = next(line for line in render_sbatch(full).splitlines() if line.startswith("srun "))
    assert " --mem-bind=local " in srun


def test_only_the_extra_options_named_are_passed() -> None:
    got = options(render_sbatch(plan(Path("/tmp/f"), [["a"]], sockets_per_node=4)))
    assert "--sockets-per-node=4" in got and not any(o.startswith("--gres-flags") for o in got)
    got = options(render_sbatch(plan(Path("/tmp/f"), [["a"]], gres_flags="enforce-binding")))
    assert "--gres-flags=enforce-binding" in got and not any(o.startswith("--sockets-per-node") for o in got)


def echo(first: str, group: list[str]) -> str:
    return first + ",".join(group)


def test_one_sbatch_call_submits_the_array_and_names_its_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = install(tmp_path / "bin", {})
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    array = re.fullmatch(r"Submitted batch job (\d+)\n", (DATA / "sbatch-array.out").read_text())
    assert array
    ids = submit_array(plan(tmp_path / "sub", [["p1"], ["p2", "p3"], ["p4"]]), echo, "x")
    assert ids == [f"{array.group(1)}_0", f"{array.group(1)}_1", f"{array.group(1)}_2"]
    assert [argv[0] for argv in calls(bin_dir)] == ["sbatch"]
    sent = (bin_dir / "sbatch-script.sh").read_text()
    assert "--array=0-2%2" in options(sent)
    assert "--gres=gpu:b300:2" in options(sent)
    # what each task will run: function(first_arg, groups[i]), never requeued by submitit on its time limit
    # (requeues are slurmx's own, bounded by the profile's max-requeues)
    for task, group in enumerate([["p1"], ["p2", "p3"], ["p4"]]):
        delayed = DelayedSubmission.load(tmp_path / "sub" / f"{array.group(1)}_{task}_submitted.pkl")
        assert delayed.function(*delayed.args, **delayed.kwargs) == "x" + ",".join(group)
        assert delayed._timeout_countdown == 0
    assert array_id(ids) == array.group(1)
    assert array_id(ids[:1]) == array.group(1)  # a one-task array
    assert array_id([]) is None
