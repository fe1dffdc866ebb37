"""Bad input gives one line naming file, line and field, exit code 2, and no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import BaseModel

from slurmx import backends
from slurmx.cli import main
from slurmx.config.clusters import ClusterProfile, ClustersFile
from slurmx.config.load import load_clusters, load_masters
from slurmx.config.master import MultiNodeConfig, SingleNodeConfig
from slurmx.errors import ConfigError
from slurmx.plan import expand, expand_each
from slurmx.recipes.model import Recipe

CLUSTERS = """\
hardware:
  cluster:t:
    available-cpu-dram-mib: 2_964_436
    gpus-per-node: 8
"""

MASTER = """\
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
      - { tp: 8, ep: 1, kv-offloading: dram, kv-offload-backend: { name: lmcache }, conc-list: [4, 8] }
"""

ENTRY = "      - { tp: 8, ep: 1, kv-offloading: dram, kv-offload-backend: { name: lmcache }, conc-list: [4, 8] }"


@dataclass
class Case:
    name: str
    master: str = MASTER
    clusters: str = CLUSTERS
    key: str = "k"
    expect_line: int | None = None
    expect: tuple[str, ...] = ()
    file: str = "master.yaml"


def _entry(text: str) -> str:
    return MASTER.replace(ENTRY, "      - " + text)


CASES = [
    Case(
        "two identical sweep points",  # one point id for two points: their results would overwrite each other
        MASTER.replace(ENTRY, ENTRY + "\n" + ENTRY.replace("conc-list: [4, 8]", "conc-list: [8, 16]")),
        expect_line=1,
        expect=("k: two sweep points are identical (p_tp8_conc8_kvdram-lmcache); remove one",),
    ),
    Case("yaml syntax", MASTER.replace("multinode: false", "multinode: [false"), expect=("YAML syntax error",)),
    Case(
        "unknown top field",
        MASTER.replace("image: img", "imagee: img"),
        expect_line=2,
        expect=("k.imagee", "unknown field", "did you mean 'image'"),
    ),
    Case(
        "unknown entry field",
        _entry("{ tpp: 8, kv-offloading: none, conc-list: [4] }"),
        expect_line=13,
        expect=("search-space[0].tpp", "did you mean 'tp'"),
    ),
    Case("unknown config key", key="kk", expect=("kk", "unknown config key", "did you mean 'k'")),
    Case(
        "tp as string",
        _entry('{ tp: "8", conc-list: [4] }'),
        expect_line=13,
        expect=("search-space[0].tp", "valid integer", "'8'"),
    ),
    Case("conc-list not a list", _entry("{ tp: 8, conc-list: 4 }"), expect_line=13, expect=("conc-list", "valid list")),
    Case(
        "conc-list with conc-start",
        _entry("{ tp: 8, conc-list: [4], conc-start: 1, conc-end: 4 }"),
        expect_line=13,
        expect=("search-space[0]", "not both"),
    ),
    Case(
        "conc-start above conc-end",
        _entry("{ tp: 8, conc-start: 8, conc-end: 4 }"),
        expect_line=13,
        expect=("conc-start 8 is above conc-end 4",),
    ),
    Case("no concurrency", _entry("{ tp: 8 }"), expect_line=13, expect=("missing concurrency",)),
    Case("conc-start alone", _entry("{ tp: 8, conc-start: 2 }"), expect_line=13, expect=("together",)),
    Case(
        "backend with offloading none",
        _entry("{ tp: 8, kv-offloading: none, kv-offload-backend: { name: lmcache }, conc-list: [4] }"),
        expect_line=13,
        expect=("kv-offloading is none",),
    ),
    Case(
        "dram-utilization above 1",
        MASTER.replace("0.63", "1.5"),
        expect_line=11,
        expect=("dram-utilization", "less than or equal to 1"),
    ),
    Case(
        "dram-utilization zero",
        MASTER.replace("0.63", "0.0"),
        expect_line=11,
        expect=("dram-utilization", "greater than 0"),
    ),
    Case(
        "dram-utilization missing",
        MASTER.replace("    - dram-utilization: 0.63\n      search-space:", "    - search-space:"),
        expect_line=11,
        expect=("dram-utilization is required",),
    ),
    Case(
        "unknown cluster label",
        MASTER.replace("cluster:t", "cluster:tt"),
        expect_line=1,
        expect=("k.runner", "no hardware entry for cluster label 'cluster:tt'", "did you mean 'cluster:t'"),
    ),
    Case(
        "tp above gpus per node",
        _entry("{ tp: 16, kv-offloading: none, conc-list: [4] }"),
        expect_line=1,
        expect=("search-space[0].tp", "needs 16 GPUs", "8 per node"),
    ),
    Case(
        "empty backend name",
        _entry('{ tp: 8, kv-offloading: dram, kv-offload-backend: { name: "" }, conc-list: [4] }'),
        expect_line=13,
        expect=("kv-offload-backend.name", "at least 1 character"),
    ),
    Case(
        "dram without a backend",
        _entry("{ tp: 8, kv-offloading: dram, conc-list: [4] }"),
        expect_line=13,
        expect=("search-space[0]", "kv-offloading dram needs a kv-offload-backend"),
    ),
    Case(
        "agentic entry without kv-offloading",
        _entry("{ tp: 8, conc-list: [4] }"),
        expect_line=13,
        expect=("search-space[0]", "must give kv-offloading"),
    ),
    Case(
        "agentic runner not a cluster label",
        MASTER.replace("cluster:t", "b300"),
        expect_line=1,
        expect=("k:", "'cluster:<name>' runner"),
    ),
    Case(
        "router without version",
        MASTER.replace("  scenarios:", "  router: { name: vllm-router }\n  scenarios:"),
        expect_line=9,
        expect=("k.router.version", "required field is missing"),
    ),
    Case(
        "tp not divisible by dcp-size",
        _entry("{ tp: 8, dcp-size: 3, kv-offloading: none, conc-list: [4] }"),
        expect_line=13,
        expect=("search-space[0]", "tp (8) must be divisible by dcp-size (3)"),
    ),
    Case(
        "kv-offloading ssd",
        _entry("{ tp: 8, kv-offloading: ssd, conc-list: [4] }"),
        expect_line=13,
        expect=("kv-offloading", "'ssd'"),
    ),
    Case(
        "missing model",
        MASTER.replace("  model: m\n", ""),
        expect_line=1,
        expect=("k.model", "required field is missing"),
    ),
    Case(
        "multinode as string",
        MASTER.replace("multinode: false", 'multinode: "no"'),
        expect_line=8,
        expect=("k.multinode", "must be true or false, got 'no'"),
    ),
    Case(
        "spec-decoding invalid",
        _entry("{ tp: 8, spec-decoding: eagle, conc-list: [4] }"),
        expect_line=13,
        expect=("spec-decoding", "'eagle'"),
    ),
    Case("master not a mapping", "- a\n- b\n", expect_line=1, expect=("mapping",)),
    Case(
        "zero concurrency",
        _entry("{ tp: 8, conc-list: [0, 4] }"),
        expect_line=13,
        expect=("conc-list[0]", "greater than 0"),
    ),
    Case("no scenario", MASTER.split("  scenarios:")[0] + "  scenarios: {}\n", expect_line=9, expect=("no scenario",)),
    Case(
        "clusters unknown field",
        clusters=CLUSTERS.replace("gpus-per-node", "gpu-per-node"),
        file="clusters.yaml",
        expect_line=4,
        expect=("hardware.cluster:t.gpu-per-node", "did you mean 'gpus-per-node'"),
    ),
    Case(
        "clusters zero gpus",
        clusters=CLUSTERS.replace("gpus-per-node: 8", "gpus-per-node: 0"),
        file="clusters.yaml",
        expect_line=4,
        expect=("gpus-per-node", "greater than 0"),
    ),
    Case(
        "clusters signal too close to the limit",
        clusters=CLUSTERS + "    slurm: { partition: p, time-limit-min: 1, signal-delay-s: 30 }\n",
        file="clusters.yaml",
        expect_line=5,
        expect=("hardware.cluster:t.slurm", "leaves under a minute"),
    ),
    Case(
        "clusters bad slurm section",
        clusters=CLUSTERS + "    slurm: { partition: p, exclusive: maybe }\n",
        file="clusters.yaml",
        expect_line=5,
        expect=("slurm.exclusive", "'maybe'"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_located_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: Case
) -> None:
    (tmp_path / "master.yaml").write_text(case.master)
    (tmp_path / "clusters.yaml").write_text(case.clusters)
    code = main(
        ["plan", case.key, "--config", str(tmp_path / "master.yaml"), "--clusters", str(tmp_path / "clusters.yaml")]
    )
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("slurmx: error: ")
    assert case.file in line
    if case.expect_line is not None:
        assert f"{case.file}:{case.expect_line}:" in line, line
    for fragment in case.expect:
        assert fragment in line, line


def test_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    code = main(["plan", "k", "--config", str(tmp_path / "nope.yaml"), "--clusters", str(tmp_path / "clusters.yaml")])
    err = capsys.readouterr().err
    assert code == 2
    assert "nope.yaml" in err and "file not found" in err


def test_duplicate_key_across_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.yaml").write_text(MASTER)
    (tmp_path / "b.yaml").write_text(MASTER)
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    code = main(
        [
            "plan",
            "k",
            "--config",
            str(tmp_path / "a.yaml"),
            "--config",
            str(tmp_path / "b.yaml"),
            "--clusters",
            str(tmp_path / "clusters.yaml"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "b.yaml:1: k: config key also defined at" in err and "a.yaml:1" in err


def test_console_script_prints_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "master.yaml").write_text(MASTER.replace("tp: 8", "tp: eight"))
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurmx",
            "plan",
            "k",
            "--config",
            str(tmp_path / "master.yaml"),
            "--clusters",
            str(tmp_path / "clusters.yaml"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert "master.yaml:13: k.scenarios.agentic-coding[0].search-space[0].tp:" in proc.stderr


# The whole line for a few cases, so the wording and the location are pinned, not just fragments.
EXACT = [
    (MASTER.replace("image: img", "imagee: img"), CLUSTERS,
     "master.yaml:2: k.imagee: unknown field (did you mean 'image'?)"),
    (_entry('{ tp: "8", conc-list: [4] }'), CLUSTERS,
     "master.yaml:13: k.scenarios.agentic-coding[0].search-space[0].tp: Input should be a valid integer, got '8'"),
    (_entry("{ tp: 8, conc-start: 2 }"), CLUSTERS,
     "master.yaml:13: k.scenarios.agentic-coding[0].search-space[0]: missing concurrency: give conc-list, or conc-start and "
     "conc-end together"),
    (MASTER.replace("  model: m\n", ""), CLUSTERS, "master.yaml:1: k.model: required field is missing"),
    (_entry("{ tp: 8, kv-offloading: ssd, conc-list: [4] }"), CLUSTERS,
     "master.yaml:13: k.scenarios.agentic-coding[0].search-space[0].kv-offloading: Input should be 'none' or 'dram', "
     "got 'ssd'"),
    (MASTER, "- a\n", "clusters.yaml:1: a clusters file must be a mapping with a 'hardware' section"),
    ("k: 3\n", CLUSTERS, "master.yaml:1: k: a config key must hold a mapping"),
    ("- a\n- b\n", CLUSTERS, "master.yaml:1: a master config must be a mapping of config keys"),
]  # fmt: skip


@pytest.mark.parametrize(("master", "clusters", "line"), EXACT)
def test_error_line_is_exact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], master: str, clusters: str, line: str
) -> None:
    (tmp_path / "master.yaml").write_text(master)
    (tmp_path / "clusters.yaml").write_text(clusters)
    args = ["plan", "k", "--config", str(tmp_path / "master.yaml"), "--clusters", str(tmp_path / "clusters.yaml")]
    assert main(args) == 2
    assert capsys.readouterr().err == f"slurmx: error: {tmp_path}/{line}\n"


# Unknown names: the hint lists what is close to the name among the fields of the mapping it is in (its own
# section, not the one above), and nothing when nothing is; snake_case spellings (pydantic's populate_by_name, as
# InferenceX's validation.py) are located the same way.
KEYS = "".join(f"kimik3-fp4-b300-vllm-{suffix}: 1\n" for suffix in ("abcd", "a", "abc", "ab"))
EXACT_NAMES = [
    (MASTER.replace("image: img", "zzzz: img"), CLUSTERS, "k", "master.yaml:2: k.zzzz: unknown field"),
    (_entry("{ tp: 8, kv-offloading: dram, kv-offload-backend: { name: lmcache, versoin: v1 }, conc-list: [4] }"),
     CLUSTERS, "k",
     "master.yaml:13: k.scenarios.agentic-coding[0].search-space[0].kv-offload-backend.versoin: unknown field "
     "(did you mean 'version'?)"),
    (_entry("{ tp: 8, kv_offloading: dram, kv_offload_backend: { name: lmcache, foo: 1 }, conc-list: [4] }"),
     CLUSTERS, "k", "master.yaml:13: k.scenarios.agentic-coding[0].search-space[0].kv_offload_backend.foo: unknown field"),
    (MASTER, CLUSTERS + "    slurm: { partitoin: p }\n", "k",
     "clusters.yaml:5: hardware.cluster:t.slurm.partitoin: unknown field (did you mean 'partition'?)"),
    (MASTER, CLUSTERS, "zzzz", "master.yaml: zzzz: unknown config key"),
    # difflib's ratio 2*M/T by hand, M the 20 characters in common: 40/42, 40/43, 40/44, 40/45; the three closest,
    # closest first
    (KEYS, CLUSTERS, "kimik3-fp4-b300-vllm",
     "master.yaml: kimik3-fp4-b300-vllm: unknown config key (did you mean 'kimik3-fp4-b300-vllm-a', "
     "'kimik3-fp4-b300-vllm-ab', 'kimik3-fp4-b300-vllm-abc'?)"),
]  # fmt: skip


@pytest.mark.parametrize(("master", "clusters", "key", "line"), EXACT_NAMES)
def test_unknown_names_are_one_exact_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], master: str, clusters: str, key: str, line: str
) -> None:
    (tmp_path / "master.yaml").write_text(master)
    (tmp_path / "clusters.yaml").write_text(clusters)
    args = ["plan", key, "--config", str(tmp_path / "master.yaml"), "--clusters", str(tmp_path / "clusters.yaml")]
    assert main(args) == 2
    assert capsys.readouterr().err == f"slurmx: error: {tmp_path}/{line}\n"


MULTI_ENTRY = (
    "      - { prefill: { num-worker: 1, tp: 8, ep: 1, dp-attn: false }, decode: { num-worker: 1, tp: 8, ep: 1, "
    "dp-attn: false }, kv-offloading: dram, kv-offload-backend: { name: lmcache }, conc-list: [4] }"
)
MULTI = f"""\
k:
  image: img
  model: m
  model-prefix: p
  runner: cluster:t
  precision: fp4
  framework: dynamo-vllm
  multinode: true
  scenarios:
    agentic-coding:
    - dram-utilization: 0.5
      search-space:
{MULTI_ENTRY}
"""
WORKERS = (
    "prefill: { num-worker: 1, tp: 8, ep: 1, dp-attn: false }, decode: { num-worker: 1, tp: 8, ep: 1, dp-attn: false }"
)
ENTRY_13 = "master.yaml:13: k.scenarios.agentic-coding[0].search-space[0]"


def _multi(entry: str, top: str = "") -> str:
    """MULTI with its entry replaced, and lines added after `multinode: true` (the entry's line moves down)."""
    return MULTI.replace(MULTI_ENTRY, "      - " + entry).replace("  multinode: true\n", "  multinode: true\n" + top)


# Every rule of the schema and of the expansion, each as the whole line a user sees: file, line (counted by hand
# in MASTER and MULTI), field path and message.
EXACT_RULES = [
    (_entry("{ tp: 8, kv-offloading: dram, kv-offload-backend: { name: lmcache, version: 'image:x' }, conc-list: [4] }"),
     CLUSTERS, f"{ENTRY_13}.kv-offload-backend.version: version must be a release, package version or source commit, "
     "not an image reference"),
    (MASTER.replace("  scenarios:", "  router: { name: r, version: 'image:r' }\n  scenarios:"), CLUSTERS,
     "master.yaml:9: k.router.version: version must be a release, package version or source commit, not an image "
     "reference"),
    (_entry("{ tp: 8, kv-offloading: none, conc-list: [4], conc-start: 1, conc-end: 4 }"), CLUSTERS,
     f"{ENTRY_13}: give conc-list or conc-start/conc-end, not both"),
    (_entry("{ tp: 8, kv-offloading: none, conc-start: 0, conc-end: 4 }"), CLUSTERS,
     f"{ENTRY_13}: conc-start and conc-end must be greater than 0"),
    (_entry("{ tp: 8, kv-offloading: none, conc-start: 2, conc-end: 0 }"), CLUSTERS,
     f"{ENTRY_13}: conc-start and conc-end must be greater than 0"),
    (_entry("{ tp: 8, kv-offloading: none, conc-start: 5, conc-end: 4 }"), CLUSTERS,
     f"{ENTRY_13}: conc-start 5 is above conc-end 4"),
    (_entry("{ tp: 8, kv-offloading: none, conc-end: 4 }"), CLUSTERS,
     f"{ENTRY_13}: missing concurrency: give conc-list, or conc-start and conc-end together"),
    (_entry("{ tp: 8, kv-offloading: none, conc-list: [] }"), CLUSTERS,
     f"{ENTRY_13}: missing concurrency: give conc-list, or conc-start and conc-end together"),
    (_entry("{ tp: 8, kv-offload-backend: { name: lmcache }, conc-list: [4] }"), CLUSTERS,
     f"{ENTRY_13}: kv-offload-backend lmcache is set but kv-offloading is not"),
    (_entry("{ tp: 8, kv-offloading: none, kv-offload-backend: { name: mooncake }, conc-list: [4] }"), CLUSTERS,
     f"{ENTRY_13}: kv-offload-backend mooncake is set but kv-offloading is none"),
    (_entry("{ tp: 8, kv-offloading: dram, conc-list: [4] }"), CLUSTERS,
     f"{ENTRY_13}: kv-offloading dram needs a kv-offload-backend (name, and optionally version)"),
    (_entry("{ tp: 8, conc-list: [4] }"), CLUSTERS,
     f"{ENTRY_13}: a single-node agentic entry must give kv-offloading (none or dram)"),
    (_entry("{ tp: 8, dcp-size: 3, kv-offloading: none, conc-list: [4] }"), CLUSTERS,
     f"{ENTRY_13}: tp (8) must be divisible by dcp-size (3)"),
    (MASTER.replace("    - dram-utilization: 0.63\n      search-space:", "    - search-space:"), CLUSTERS,
     "master.yaml:11: k.scenarios.agentic-coding[0]: dram-utilization is required when a search-space entry offloads "
     "KV to DRAM"),
    (MASTER.split("  scenarios:")[0] + "  scenarios: {}\n", CLUSTERS,
     "master.yaml:9: k.scenarios: no scenario: give fixed-seq-len or agentic-coding"),
    (MASTER.replace("  multinode: false\n", ""), CLUSTERS, "master.yaml:1: k.multinode: required field is missing"),
    (MASTER.replace("multinode: false", "multinode: null"), CLUSTERS,
     "master.yaml:8: k.multinode: must be true or false, got None"),
    (MASTER.replace("cluster:t", "b300"), CLUSTERS,
     "master.yaml:1: k: agentic configs must use a 'cluster:<name>' runner, got 'b300'"),
    (MASTER.replace("  scenarios:", "  router: { name: r, version: v }\n  scenarios:")
     .replace("ep: 1, ", "ep: 1, router: { name: r, version: v }, "), CLUSTERS,
     "master.yaml:1: k: router must be declared either at the top level or in search-space entries, not both"),
    (_multi("{ prefill: { num-worker: 1, tp: 8, ep: 1, dp-attn: false, hardware: b300 }, decode: { num-worker: 1, "
            "tp: 8, ep: 1, dp-attn: false }, kv-offloading: none, conc-list: [4] }"), CLUSTERS,
     f"{ENTRY_13}: hardware must be given for both prefill and decode, or neither"),
    (_multi(f"{{ {WORKERS}, kv-offloading: none, conc-list: [4] }}", "  disagg: true\n"), CLUSTERS,
     "master.yaml:1: k: disagg true needs kv-p2p-transfer at the top level or in every search-space entry"),
    (_multi(f"{{ {WORKERS}, kv-offloading: none, kv-p2p-transfer: nixl, conc-list: [4] }}",
            "  disagg: true\n  kv-p2p-transfer: nixl\n"), CLUSTERS,
     "master.yaml:1: k: kv-p2p-transfer must be declared either at the top level or in search-space entries, not "
     "both"),
    (_multi("{ prefill: { num-worker: 1, tp: 6, ep: 1, dp-attn: false }, decode: { num-worker: 1, tp: 8, ep: 1, "
            "dp-attn: false }, kv-offloading: dram, kv-offload-backend: { name: lmcache }, conc-list: [4] }"), CLUSTERS,
     "master.yaml:1: k.scenarios.agentic-coding[0].search-space[0].prefill: tp*pp*pcp-size=6 does not divide "
     "gpus-per-node=8"),
    (_multi("{ prefill: { num-worker: 1, tp: 4, pp: 3, ep: 1, dp-attn: false }, decode: { num-worker: 1, tp: 8, "
            "ep: 1, dp-attn: false }, kv-offloading: dram, kv-offload-backend: { name: lmcache }, conc-list: [4] }"),
     CLUSTERS, "master.yaml:1: k.scenarios.agentic-coding[0].search-space[0].prefill: tp*pp*pcp-size=12 spans nodes "
     "but is not a multiple of gpus-per-node=8"),
    ("'k*': {image: x}\nk: 1\n", CLUSTERS, "master.yaml:2: k: a config key must hold a mapping"),
    (MASTER, CLUSTERS + "    slurm: { partition: p, setup: ['a', \"b\\nc\"] }\n",
     "clusters.yaml:5: hardware.cluster:t.slurm.setup: setup line 2 holds a line break: give each shell line its own "
     "list entry"),
    (MASTER, CLUSTERS + "    slurm: { partition: p, setup: [\"a\\rb\"] }\n",
     "clusters.yaml:5: hardware.cluster:t.slurm.setup: setup line 1 holds a line break: give each shell line its own "
     "list entry"),
    (MASTER, CLUSTERS + "    slurm: { partition: p, time-limit-min: 2, signal-delay-s: 61 }\n",
     "clusters.yaml:5: hardware.cluster:t.slurm: signal-delay-s 61 leaves under a minute of a 2-minute time limit: "
     "raise time-limit-min or lower signal-delay-s"),
]  # fmt: skip


@pytest.mark.parametrize(("master", "clusters", "line"), EXACT_RULES)
def test_each_rule_is_one_exact_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], master: str, clusters: str, line: str
) -> None:
    (tmp_path / "master.yaml").write_text(master)
    (tmp_path / "clusters.yaml").write_text(clusters)
    args = ["plan", "k", "--config", str(tmp_path / "master.yaml"), "--clusters", str(tmp_path / "clusters.yaml")]
    assert main(args) == 2
    assert capsys.readouterr().err == f"slurmx: error: {tmp_path}/{line}\n"


@pytest.mark.parametrize(
    ("key", "line"),
    [
        ("7", "master.yaml:1: 7: a config key must be a string"),
        ("k*", "master.yaml:1: k*: '*' is not allowed in a config key"),
    ],
)
def test_a_key_that_is_no_string_or_holds_a_star_is_refused_and_blocks_only_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, line: str
) -> None:
    master = "7: {image: x}\n" if key == "7" else "'k*': {image: x}\n"
    (tmp_path / "master.yaml").write_text(master + MASTER)
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    config = ["--config", str(tmp_path / "master.yaml"), "--clusters", str(tmp_path / "clusters.yaml")]
    assert main(["plan", key, *config]) == 2
    assert capsys.readouterr().err == f"slurmx: error: {tmp_path}/{line}\n"
    assert main(["plan", "k", *config]) == 0  # the good key beside it plans


# The other side of each boundary above plans: the concurrencies by hand (doubling from conc-start, always ending at
# conc-end), and a half-given form beside a whole one is ignored, as InferenceX's validation.py ignores it.
PLANNED = [
    (_entry("{ tp: 8, kv-offloading: none, conc-start: 4, conc-end: 4 }"), CLUSTERS, [4]),
    (_entry("{ tp: 8, kv-offloading: none, conc-start: 1, conc-end: 1 }"), CLUSTERS, [1]),
    (_entry("{ tp: 8, kv-offloading: none, conc-start: 3, conc-end: 40 }"), CLUSTERS, [3, 6, 12, 24, 40]),
    (_entry("{ tp: 8, kv-offloading: none, conc-start: 2, conc-end: 16 }"), CLUSTERS, [2, 4, 8, 16]),
    (_entry("{ tp: 8, kv-offloading: none, conc-list: [], conc-start: 2, conc-end: 4 }"), CLUSTERS, [2, 4]),
    (_entry("{ tp: 8, kv-offloading: none, conc-list: [8, 2], conc-start: 1 }"), CLUSTERS, [8, 2]),
    (_entry("{ tp: 8, dcp-size: 4, kv-offloading: none, conc-list: [4] }"), CLUSTERS, [4]),
    (MASTER, CLUSTERS + "    slurm: { partition: p, time-limit-min: 2, signal-delay-s: 60 }\n", [4, 8]),
]  # fmt: skip


@pytest.mark.parametrize(("master", "clusters", "concs"), PLANNED)
def test_the_boundaries_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], master: str, clusters: str, concs: list[int]
) -> None:
    (tmp_path / "master.yaml").write_text(master)
    (tmp_path / "clusters.yaml").write_text(clusters)
    args = ["plan", "k", "--config", str(tmp_path / "master.yaml"), "--clusters", str(tmp_path / "clusters.yaml")]
    assert main([*args, "--json"]) == 0
    assert [row["conc"] for row in json.loads(capsys.readouterr().out)] == concs


def test_the_expansions_refusals_name_the_key_the_field_and_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where a key's runner has no figures for its DRAM budget, or its server does not fit a node (tp x pp x pcp
    GPUs: 4 x 2 x 2 = 16 on an 8-GPU node), and where a key is in neither of two master files."""
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    clusters = tmp_path / "clusters.yaml"
    cases = [
        (MASTER.replace("cluster:t", "cluster:tt"),
         f"master.yaml:1: k.runner: no hardware entry for cluster label 'cluster:tt' in {clusters}, needed for the "
         "kv-offloading dram budget (did you mean 'cluster:t'?)"),
        (_entry("{ tp: 4, pp: 2, pcp-size: 2, kv-offloading: none, conc-list: [4] }"),
         "master.yaml:1: k.scenarios.agentic-coding[0].search-space[0].tp: needs 16 GPUs but cluster:t has 8 per node"),
    ]  # fmt: skip
    for master, line in cases:
        (tmp_path / "master.yaml").write_text(master)
        assert main(["plan", "k", "--config", str(tmp_path / "master.yaml"), "--clusters", str(clusters)]) == 2
        assert capsys.readouterr().err == f"slurmx: error: {tmp_path}/{line}\n"
    (tmp_path / "master.yaml").write_text(MASTER)
    (tmp_path / "other.yaml").write_text(MASTER.replace("k:", "k2:", 1))
    configs = ["--config", str(tmp_path / "master.yaml"), "--config", str(tmp_path / "other.yaml")]
    assert main(["plan", "k22", *configs, "--clusters", str(clusters)]) == 2
    assert capsys.readouterr().err == (
        f"slurmx: error: {tmp_path}/master.yaml, {tmp_path}/other.yaml: k22: unknown config key (did you mean 'k2'?)\n"
    )


def test_a_key_without_offloading_plans_on_a_runner_without_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """InferenceX reads a runner's hardware only for a DRAM budget: without one, no figures are needed (budget 0)."""
    (tmp_path / "master.yaml").write_text(
        _entry("{ tp: 16, kv-offloading: none, conc-list: [4] }").replace("cluster:t", "cluster:zz")
    )
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    args = ["plan", "k", "--config", str(tmp_path / "master.yaml"), "--clusters", str(tmp_path / "clusters.yaml")]
    assert main([*args, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["runner"], row["tp"], row["total-cpu-dram-gb"], row["kv-offloading"]) == ("cluster:zz", 16, 0, "none")


def test_expand_raises_the_first_bad_keys_error(tmp_path: Path) -> None:
    (tmp_path / "master.yaml").write_text(
        MASTER.replace("k:", "a:", 1).replace("cluster:t", "cluster:x")
        + MASTER.replace("k:", "b:", 1).replace("tp: 8", "tp: 16")
    )
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    masters = load_masters([tmp_path / "master.yaml"])
    clusters = load_clusters(tmp_path / "clusters.yaml")
    for keys, field in ((["a", "b"], "a.runner"), (["b", "a"], "b.scenarios.agentic-coding[0].search-space[0].tp")):
        with pytest.raises(ConfigError) as caught:
            expand(keys, masters, clusters)
        assert caught.value.field == field
    assert expand_each(["a", "b"], masters, clusters)[1][1].field == "b.scenarios.agentic-coding[0].search-space[0].tp"


def test_each_point_keeps_its_scenarios_dram_utilization_and_budget(tmp_path: Path) -> None:
    """advise shows a point's dram-utilization beside its budget: 2,964,436 MiB capped at 2,861,022 MiB,
    x 2^20 bytes x 0.63 = 1,889,999,372,943.36 bytes on all 8 GPUs (1889 GB); an entry without offloading in the same
    scenario keeps the utilization and has no budget."""
    (tmp_path / "master.yaml").write_text(
        MASTER.replace(ENTRY, ENTRY + "\n      - { tp: 8, kv-offloading: none, conc-list: [2] }")
    )
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    points = expand(["k"], load_masters([tmp_path / "master.yaml"]), load_clusters(tmp_path / "clusters.yaml"))
    assert [(p.conc, p.dram_utilization, p.total_cpu_dram_gb) for p in points] == [
        (4, 0.63, 1889),
        (8, 0.63, 1889),
        (2, 0.63, 0),
    ]


def test_load_masters_keeps_every_key_in_file_order_and_a_repeated_key_blocks_both_copies(tmp_path: Path) -> None:
    """InferenceX refuses a key defined twice; the keys after it in the second file still load, and the first file's
    copy is no config either. Each key's source is its file and line."""
    (tmp_path / "a.yaml").write_text(MASTER + MASTER.replace("k:", "a2:", 1))
    (tmp_path / "b.yaml").write_text(MASTER.replace("k:", "b0:", 1) + MASTER + MASTER.replace("k:", "b2:", 1))
    masters = load_masters([tmp_path / "a.yaml", tmp_path / "b.yaml"])
    assert masters.files == [tmp_path / "a.yaml", tmp_path / "b.yaml"]
    assert list(masters.configs) == ["a2", "b0", "b2"]
    assert {key: (source.path.name, source.line) for key, source in masters.sources.items()} == {
        "k": ("a.yaml", 1), "a2": ("a.yaml", 14), "b0": ("b.yaml", 1), "b2": ("b.yaml", 27)
    }  # fmt: skip
    error = masters.errors["k"]
    assert str(error) == f"{tmp_path}/b.yaml:14: k: config key also defined at {tmp_path}/a.yaml:1"
    assert masters.warnings == []
    # a first copy that was itself invalid: the second is the same refusal, not a crash
    (tmp_path / "c.yaml").write_text("k: 1\n")
    again = load_masters([tmp_path / "c.yaml", tmp_path / "a.yaml"])
    assert str(again.errors["k"]) == f"{tmp_path}/a.yaml:1: k: config key also defined at {tmp_path}/c.yaml:1"
    assert list(again.configs) == ["a2"]


def test_load_clusters_blocks_only_a_bad_labels_keys_and_keeps_each_labels_line(tmp_path: Path) -> None:
    text = (
        CLUSTERS
        + "  cluster:bad:\n    available-cpu-dram-mib: 1\n    gpus-per-node: 0\n  cluster:t:\n"
        + ("    available-cpu-dram-mib: 64\n    gpus-per-node: 1\n")
    )
    (tmp_path / "clusters.yaml").write_text(text)
    clusters = load_clusters(tmp_path / "clusters.yaml")
    assert clusters.path == tmp_path / "clusters.yaml"
    assert clusters.lines == {"cluster:t": 8, "cluster:bad": 5}
    assert clusters.warnings == [
        f"{tmp_path}/clusters.yaml:8: cluster:t: duplicate key (also at line 2); the last one wins"
    ]
    t = clusters.profile("cluster:t")
    assert t is not None and (t.available_cpu_dram_mib, t.gpus_per_node) == (64, 1)
    assert clusters.profile("cluster:none") is None
    with pytest.raises(ConfigError) as caught:
        clusters.profile("cluster:bad")
    assert str(caught.value) == (
        f"{tmp_path}/clusters.yaml:7: hardware.cluster:bad.gpus-per-node: Input should be greater than 0"
    )
    (tmp_path / "top.yaml").write_text(CLUSTERS + "hardwares: {}\n")
    with pytest.raises(ConfigError) as caught:
        load_clusters(tmp_path / "top.yaml")
    assert str(caught.value) == f"{tmp_path}/top.yaml:5: hardwares: unknown field (did you mean 'hardware'?)"


# A field unknown inside a section spelled by its field name (snake_case, accepted as InferenceX accepts it) gets
# the hint it gets inside the kebab-case spelling; the whole `slurmx plan` process prints one located line, exit 2.
SNAKE_SECTIONS = [
    (MASTER.replace("agentic-coding:", "agentic_coding:").replace("search-space:", "search_space:")
     .replace("tp: 8", "tpp: 8"),
     "master.yaml:13: k.scenarios.agentic_coding[0].search_space[0].tpp: unknown field (did you mean 'tp'?)"),
    (_entry("{ tp: 8, kv-offloading: dram, kv_offload_backend: { name: lmcache, versoin: v1 }, conc-list: [4] }"),
     "master.yaml:13: k.scenarios.agentic-coding[0].search-space[0].kv_offload_backend.versoin: unknown field "
     "(did you mean 'version'?)"),
]  # fmt: skip


def _plan_process(tmp_path: Path, master: str) -> subprocess.CompletedProcess[str]:
    """`slurmx plan k` as a whole process over `master` and CLUSTERS, written into tmp_path."""
    (tmp_path / "master.yaml").write_text(master)
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    config, clusters = str(tmp_path / "master.yaml"), str(tmp_path / "clusters.yaml")
    return subprocess.run(
        [sys.executable, "-m", "slurmx", "plan", "k", "--config", config, "--clusters", clusters],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(("master", "line"), SNAKE_SECTIONS)
def test_an_unknown_field_in_a_snake_case_section_gets_its_hint(tmp_path: Path, master: str, line: str) -> None:
    proc = _plan_process(tmp_path, master)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"slurmx: error: {tmp_path}/{line}\n")


# A value of the wrong type, through the whole `slurmx plan` process: the strict models report bool_type and int_type
# (what load.py's message reads), a Literal field literal_error, and a multinode that is no bool is caught before
# the schema is picked.
WRONG_TYPES = [
    (_entry("{ tp: 8, ep: 1, dp-attn: maybe, kv-offloading: none, conc-list: [4] }"),
     "master.yaml:13: k.scenarios.agentic-coding[0].search-space[0].dp-attn: Input should be a valid boolean, "
     "got 'maybe'"),
    (_entry("{ tp: eight, kv-offloading: none, conc-list: [4] }"),
     "master.yaml:13: k.scenarios.agentic-coding[0].search-space[0].tp: Input should be a valid integer, got 'eight'"),
    (MASTER.replace("multinode: false", "multinode: 3"), "master.yaml:8: k.multinode: must be true or false, got 3"),
    (_entry("{ tp: 8, spec-decoding: eagle, kv-offloading: none, conc-list: [4] }"),
     "master.yaml:13: k.scenarios.agentic-coding[0].search-space[0].spec-decoding: Input should be 'none', 'mtp' or "
     "'draft_model', got 'eagle'"),
]  # fmt: skip


@pytest.mark.parametrize(("master", "expected"), WRONG_TYPES, ids=["dp-attn", "tp", "multinode", "spec-decoding"])
def test_a_wrong_type_is_one_line_from_the_plan_process(tmp_path: Path, master: str, expected: str) -> None:
    proc = _plan_process(tmp_path, master)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"slurmx: error: {tmp_path}/{expected}\n"


def _models_within(model: type[BaseModel], found: set[type[BaseModel]]) -> set[type[BaseModel]]:
    """`model` and every model its fields hold (in lists, dicts, unions), at any depth."""
    if model in found:
        return found
    found.add(model)
    pending = [f.annotation for f in model.model_fields.values()]
    while pending:
        annotation = pending.pop()
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            _models_within(annotation, found)
        pending.extend(typing.get_args(annotation))
    return found


def test_every_model_the_loader_validates_is_strict() -> None:
    """config/load.py's message names a wrong type by the kinds a strict model reports (`<type>_type`); a lax model
    would report `bool_parsing` or `int_parsing`, which it does not name (they were never reported)."""
    roots = [SingleNodeConfig, MultiNodeConfig, ClustersFile, ClusterProfile, Recipe]
    roots += [backend.arm_model for backend in backends.REGISTRY.values()]
    models: set[type[BaseModel]] = set()
    for root in roots:
        _models_within(root, models)
    assert len(models) > len(roots)  # the walk reached nested sections
    lax = sorted(m.__qualname__ for m in models if not m.model_config.get("strict"))
    assert lax == []
