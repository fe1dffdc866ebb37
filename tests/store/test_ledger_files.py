"""The ledger's files as bytes: the sweep id against sha256sum of the same plan, sweep.json and point.json as people
and InferenceX-style tools read them (2-space JSON, the cluster keys spelled as in clusters.yaml), what a point's
queueing carries over, and what `render` says of --until-certified."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurmx.errors import UserError
from slurmx.inputs import Inputs, load_inputs
from slurmx.store import ledger
from slurmx.store.tree import ResultsTree, SweepDir
from slurmx.submit.resolved import resolve_points

ROOT = Path(__file__).resolve().parents[2]
KEY = "tiny-fp32-local-vllm-agentic-lmcache"
MASTER = ROOT / "configs" / "local-master.yaml"
CLUSTERS = ROOT / "configs" / "clusters.yaml"


@pytest.fixture(scope="module")
def inputs() -> Inputs:
    return load_inputs([MASTER], CLUSTERS, [KEY])


def shell(script: str, *args: str) -> str:
    return subprocess.run(["bash", "-c", script, "bash", *args], capture_output=True, text=True, check=True).stdout


def test_the_sweep_id_is_sha256sum_of_the_key_and_its_sorted_point_ids(inputs: Inputs) -> None:
    points = inputs.key_points(KEY)
    ids = [p.point_id for p in points]
    # a second method: coreutils' sort and sha256sum over the key and the ids, one a line, no final newline
    by_shell = shell(
        'key=$1; shift; { printf "%s\\n" "$key"; printf "%s\\n" "$@" | LC_ALL=C sort; } | head -c -1 | sha256sum',
        KEY,
        *ids,
    )
    assert ledger.sweep_id_for(KEY, points) == "s" + by_shell[:10]
    assert ledger.sweep_id_for(KEY, points[::-1]) == ledger.sweep_id_for(KEY, points)  # the plan, not its order
    assert ledger.sweep_id_for("other-key", points) != ledger.sweep_id_for(KEY, points)
    assert (
        ledger.sweep_id_for(KEY, points[:1]) == "s" + shell('printf "%s\\n%s" "$1" "$2" | sha256sum', KEY, ids[0])[:10]
    )


def test_a_sweep_of_one_point_takes_its_key_and_runner_from_it(inputs: Inputs, tmp_path: Path) -> None:
    point = inputs.key_points(KEY)[0]
    sweep = ResultsTree(tmp_path).sweep(KEY, "s1")
    record = ledger.new_sweep(sweep, [point], [MASTER], CLUSTERS, inputs.submittable_profile(point))
    assert (record.config_key, record.cluster_label, record.point_ids) == (KEY, "cluster:local", [point.point_id])


def test_relative_input_paths_are_recorded_absolute_with_sha256sum_digests(
    inputs: Inputs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    points = inputs.key_points(KEY)
    monkeypatch.chdir(ROOT / "configs")  # as a user names files from where they stand
    record = ledger.new_sweep(
        ResultsTree(tmp_path).sweep(KEY, "s1"),
        points,
        [Path("local-master.yaml")],
        Path("clusters.yaml"),
        inputs.submittable_profile(points[0]),
    )
    sums: dict[str, str] = {}
    for line in shell('sha256sum "$@"', str(MASTER), str(CLUSTERS)).splitlines():
        digest, name = line.split("  ", 1)
        sums[name] = digest
    assert record.config_files == {str(MASTER): sums[str(MASTER)]}
    assert record.clusters_file == {str(CLUSTERS): sums[str(CLUSTERS)]}


def written_sweep(inputs: Inputs, root: Path) -> SweepDir:
    points = inputs.key_points(KEY)
    sweep = ResultsTree(root).sweep(KEY, "s1")
    ledger.write_sweep(
        sweep, ledger.new_sweep(sweep, points, [MASTER], CLUSTERS, inputs.submittable_profile(points[0]))
    )
    return sweep


def test_sweep_and_point_json_are_two_space_json_with_the_cluster_keys_as_clusters_yaml_spells_them(
    inputs: Inputs, tmp_path: Path
) -> None:
    sweep = written_sweep(inputs, tmp_path)
    item = resolve_points(inputs.key_points(KEY)[:1], inputs)[0]
    point = sweep.point(item.point.point_id)
    ledger.queue_point(point, item.record("s1"))
    written = {"sweep.json": sweep.sweep_json.read_text(), "point.json": point.point_json.read_text()}
    for name, text in written.items():
        # the json module's own 2-space layout of the same data: the file is laid out exactly so
        assert text == json.dumps(json.loads(text), indent=2, ensure_ascii=False) + "\n", name
    profile = yaml.safe_load(CLUSTERS.read_text())["hardware"]["cluster:local"]
    for name, text in written.items():
        stored = json.loads(text)["cluster_profile"]
        assert set(profile) <= set(stored), name  # gpus-per-node, available-cpu-dram-mib, slurm, node, runtime
        for section in ("slurm", "node", "runtime"):
            assert set(profile[section]) <= set(stored[section]), (name, section)
        assert stored["gpus-per-node"] == profile["gpus-per-node"] == 8


def test_a_ledger_file_that_cannot_be_read_is_one_line(inputs: Inputs, tmp_path: Path) -> None:
    sweep = SweepDir(tmp_path / KEY / "s1")
    sweep.sweep_json.mkdir(parents=True)  # a directory where the file should be
    with pytest.raises(UserError) as caught:
        ledger.read_sweep(sweep)
    assert str(caught.value) == f"{sweep.sweep_json}: unreadable: [Errno 21] Is a directory: '{sweep.sweep_json}'"
    point = sweep.point("0123456789ab")
    point.path.mkdir(parents=True)
    point.point_json.write_bytes(b"\xff{}")
    with pytest.raises(UserError) as caught:
        ledger.read_point(point)
    assert str(caught.value) == (
        f"{point.point_json}: unreadable: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"
    )


READ_IN_C_LOCALE = """
import sys
from pathlib import Path
from slurmx.store.ledger import read_sweep
from slurmx.store.tree import SweepDir
record = read_sweep(SweepDir(Path(sys.argv[1])))
print(sorted(record.config_files)[0].encode("unicode_escape").decode())
"""


def test_a_ledger_with_a_non_ascii_path_reads_on_a_node_whose_locale_is_c(inputs: Inputs, tmp_path: Path) -> None:
    points = inputs.key_points(KEY)
    home = tmp_path / "j\u00fcrgen"  # a user's home with an umlaut holds the master config
    home.mkdir()
    master = home / "master.yaml"
    master.write_bytes(MASTER.read_bytes())
    sweep = ResultsTree(tmp_path / "results").sweep(KEY, "s1")
    ledger.write_sweep(
        sweep, ledger.new_sweep(sweep, points, [master], CLUSTERS, inputs.submittable_profile(points[0]))
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "LC_ALL": "C", "LANG": "C"}
    env.update(PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    proc = subprocess.run(
        [sys.executable, "-c", READ_IN_C_LOCALE, str(sweep.path)],  # an ASCII path: the argument decodes in C
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    here = sorted(ledger.read_sweep(sweep).config_files)[0]  # read here, in a UTF-8 locale: the same path
    assert (
        proc.stdout.strip() == here.encode("unicode_escape").decode() == str(master).encode("unicode_escape").decode()
    )


def test_queueing_carries_the_nodes_submit_excluded_into_the_state(inputs: Inputs, tmp_path: Path) -> None:
    item = resolve_points(inputs.key_points(KEY)[:1], inputs)[0]
    record = item.record("s1")
    excluding = record.model_copy(
        update={"slurm_request": record.slurm_request.model_copy(update={"exclude": ("node02", "node01")})}
    )
    state = ledger.queue_point(ResultsTree(tmp_path).sweep(KEY, "s1").point(item.point.point_id), excluding)
    assert state.failed_nodes == ["node02", "node01"]  # as submit decided them, for status to show


def test_point_json_holds_until_certified_only_when_it_was_asked_for(inputs: Inputs, tmp_path: Path) -> None:
    item = resolve_points(inputs.key_points(KEY)[:1], inputs)[0]
    plain = ResultsTree(tmp_path / "plain").sweep(KEY, "s1").point(item.point.point_id)
    rounds = ResultsTree(tmp_path / "rounds").sweep(KEY, "s1").point(item.point.point_id)
    until = ledger.UntilCertified(percentiles=("p90",), max_point_minutes=20.0)
    ledger.queue_point(plain, item.record("s1"))
    ledger.queue_point(rounds, item.record("s1", until=until))
    assert "until_certified" not in json.loads(plain.point_json.read_text())  # the file it always was
    assert json.loads(rounds.point_json.read_text())["until_certified"] == {
        "percentiles": ["p90"], "max_point_minutes": 20.0, "min_duration_s": 0.0, "rel_width": None,
    }  # fmt: skip
    assert ledger.read_point(rounds).until_certified == until and ledger.read_point(plain).until_certified is None


@pytest.mark.parametrize(
    ("until", "said"),
    [
        (
            ledger.UntilCertified(percentiles=("p90",), max_point_minutes=30.0),
            "until p90 certified: cold rounds aiperf/round-<k>/, budget 30 min",
        ),
        (
            ledger.UntilCertified(
                percentiles=("p50", "p90"), max_point_minutes=7.5, min_duration_s=120.0, rel_width=0.05
            ),
            "until p50,p90 certified to +-5%: cold rounds aiperf/round-<k>/, budget 7.5 min, at least 120 s",
        ),
        (
            ledger.UntilCertified(percentiles=("p99",), max_point_minutes=45.0, rel_width=0.1),
            "until p99 certified to +-10%: cold rounds aiperf/round-<k>/, budget 45 min",
        ),
    ],
)
def test_what_render_says_of_until_certified(until: ledger.UntilCertified, said: str) -> None:
    assert until.summary() == said
