"""`--inferencex DIR`: a user's InferenceX checkout as input, and the cluster profiles of its agentic fleets.

The CLI is run as users run it (the whole process, from a fresh working directory); InferenceX's main tree is
the fixture checkout (../shared/fixtures/inferencex/repo-main, SOURCE.txt)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurmx import runtimes
from slurmx.config.clusters import ClusterProfile
from slurmx.config.inferencex import open_checkout
from slurmx.config.load import load_clusters, overlay_figures, with_workspace
from slurmx.errors import ConfigError, UserError
from slurmx.inputs import load_inputs
from slurmx.node import gpu_hygiene, telemetry
from tests.conftest import ROOT
from tests.test_cli_as_users_run_it import SERVED_KEY, planned, slurmx

# one key per profile added for InferenceX's fleets, and the request plan shows for its first point
NEW_PROFILE_REQUESTS = {
    "cluster:h100-dgxc": ("qwen3.5-fp8-h100-sglang-agentic", "hpc-gpu-1 gpu:8 mem=0 excl 180m"),
    # the jobs recipe's time-limit-min 480, from the srt recipe's slurm.time_limit 8:00:00 (what submit asks)
    "cluster:gb200-nv": ("qwen3.5-fp4-gb200-dynamo-sglang-agentic-mtp", "batch gpu:4 mem=0 excl 480m"),
    "cluster:b200-nscale": ("kimik3-fp4-b200-dynamo-vllm-agentic-dspark", "batch_1 gpu:8 x2 nodes mem=0 excl 240m"),
    "cluster:mi300x-amds": (
        "qwen3.5-fp8-mi300x-sglang-agentic-mtp",
        "compute gpu:8 mem=0 180m --exclude chi-mi300x-049,chi-mi300x-121",
    ),
    "cluster:mi325x-amds": ("qwen3.5-fp8-mi325x-sglang-agentic-mtp", "compute gpu:2 mem=0 480m"),
    "cluster:mi355x-amds": ("qwen3.5-fp4-mi355x-sglang-agentic-mtp", "compute gpu:2 mem=0 excl 500m"),
}
PROFILE_REFUSALS = ("no entry for this label", "no slurm section", "no hardware entry")


@pytest.fixture
def main_tree(fixtures: Path) -> Path:
    return fixtures / "repo-main"


def _as_config(tree: Path) -> list[str]:
    configs = tree / "configs"
    return ["--config", str(configs / "nvidia-master.yaml"), "--config", str(configs / "amd-master.yaml")]


def test_plan_render_and_dry_run_from_a_checkout_are_those_of_its_files(main_tree: Path, tmp_path: Path) -> None:
    """The shipped profiles' figures are runners.yaml's, so --inferencex DIR is --config DIR's masters exactly
    (rendered on a profile that mounts a checkout of its own: on one that does not, DIR is mounted too)."""
    mounted = "minimaxm3-fp4-b300-vllm-agentic-mtp"  # cluster:b300-nv mounts /lustre/src/InferenceX
    for command in (["plan", "--all", "--json"], ["render", mounted], ["submit", "--dry-run", mounted]):
        ours = slurmx([*command, "--inferencex", str(main_tree)], tmp_path)
        theirs = slurmx([*command, *_as_config(main_tree)], tmp_path)
        assert ours.returncode == theirs.returncode == 0, ours.stderr
        assert ours.stderr == "", ours.stderr  # no figure of slurmx's profiles disagrees with the checkout's
        if command[0] != "plan":
            assert ours.stdout == theirs.stdout and ours.stdout, command
            continue
        # a point served from an srt-slurm recipe is read from the checkout: without one, plan says how to get it
        needs = "its srt-slurm recipe is read from an InferenceX checkout: pass --inferencex DIR"
        with_tree, without = json.loads(ours.stdout), json.loads(theirs.stdout)
        assert len(with_tree) == len(without) == 1820
        from_srt = {i for i, row in enumerate(without) if needs in str(row.get("recipe-note"))}
        assert from_srt and all(with_tree[i].get("recipe-note") is None for i in from_srt)
        assert [r for i, r in enumerate(with_tree) if i not in from_srt] == [
            r for i, r in enumerate(without) if i not in from_srt
        ]
    assert list(tmp_path.iterdir()) == []


def test_a_directory_that_is_not_a_checkout_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "runners.yaml").write_text("hardware: {}\n")
    for command in (["plan", "--all"], ["render", SERVED_KEY], ["submit", "--dry-run", SERVED_KEY]):
        proc = slurmx([*command, "--inferencex", str(tmp_path)], tmp_path)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr == f"slurmx: error: {tmp_path}: not an InferenceX checkout (no configs/*-master.yaml)\n"


def test_config_replaces_the_checkouts_masters_and_keeps_its_figures(main_tree: Path, tmp_path: Path) -> None:
    local = ["--config", str(ROOT / "configs" / "local-master.yaml"), "--inferencex", str(main_tree)]
    rows = planned(slurmx(["plan", "tiny-fp32-local-vllm-agentic-lmcache", *local, "--json"], tmp_path))
    assert rows and {r["runner"] for r in rows} == {"cluster:local"}  # a label only slurmx's profiles know
    unknown = slurmx(["plan", SERVED_KEY, *local], tmp_path)
    assert unknown.returncode == 2 and SERVED_KEY in unknown.stderr


def test_the_checkouts_figures_win_and_slurmx_adds_slurm(main_tree: Path, tmp_path: Path) -> None:
    shipped = (ROOT / "configs" / "clusters.yaml").read_text()
    edited = shipped.replace("available-cpu-dram-mib: 1_471_356", "available-cpu-dram-mib: 1_000_000", 1)
    assert edited != shipped
    (tmp_path / "clusters.yaml").write_text(edited)
    inputs = load_inputs(None, tmp_path / "clusters.yaml", [SERVED_KEY], inferencex=main_tree)
    profile = inputs.clusters.profiles["cluster:h200-dgxc"]
    assert profile.available_cpu_dram_mib == 1_471_356 and profile.slurm is not None
    assert profile.slurm.partition == "main"
    (warning,) = inputs.warnings
    assert "hardware.cluster:h200-dgxc.available-cpu-dram-mib is 1000000" in warning and "runners.yaml" in warning
    assert inputs.inferencex == main_tree.resolve()
    # a label the checkout knows and slurmx's profiles do not: figures to plan with, refused at submit
    (tmp_path / "bare.yaml").write_text("hardware: {}\n")
    bare = load_inputs(None, tmp_path / "bare.yaml", [SERVED_KEY], inferencex=main_tree)
    assert bare.points and bare.clusters.profiles["cluster:h200-dgxc"].slurm is None
    with pytest.raises(UserError, match=r"hardware.cluster:h200-dgxc: no entry for this label \(only hardware fig"):
        bare.submittable_profile(bare.points[0])


def test_no_agentic_key_of_main_is_refused_for_a_cluster_profile(main_tree: Path, tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = planned(slurmx(["plan", "--all", "--inferencex", str(main_tree), "--json"], tmp_path))
    agentic = [r for r in rows if r.get("scenario-type") == "agentic-coding"]
    keys = sorted({r["config-key"] for r in agentic})
    assert len(keys) == 75  # SOURCE.txt: 75 agentic-coding keys on main
    inputs = load_inputs(None, None, keys, inferencex=main_tree)
    for point in inputs.points:
        inputs.submittable_profile(point)  # every label has a slurm section
    proc = slurmx(["submit", "--dry-run", *keys, "--inferencex", str(main_tree)], tmp_path)
    refusals = proc.stderr.splitlines()
    assert not [line for line in refusals if any(p in line for p in PROFILE_REFUSALS)], proc.stderr
    vllm_single = sorted({r["config-key"] for r in agentic if r["framework"] == "vllm" and "prefill" not in r})
    assert len(vllm_single) == 12
    for key in vllm_single:  # served, or refused for its serving recipe (the importer's work), never the profile
        mine = [line for line in refusals if f" {key}" in line or f"{key}:" in line or f"{key} " in line]
        assert all("serving recipe" in line for line in mine), mine


def test_the_slurm_request_of_each_new_profile(main_tree: Path, tmp_path: Path) -> None:
    keys = [key for key, _ in NEW_PROFILE_REQUESTS.values()]
    rows = planned(slurmx(["plan", *keys, "--inferencex", str(main_tree), "--json"], tmp_path))
    for label, (key, request) in NEW_PROFILE_REQUESTS.items():
        first = next(r for r in rows if r["config-key"] == key)
        assert (first["runner"], first["slurm-request"]) == (label, request)


def _profile(label: str) -> ClusterProfile:
    profile = load_inputs(None, None, [SERVED_KEY]).clusters.profiles[label]
    return profile


def test_the_profile_env_is_exported_by_the_job_script() -> None:
    lines = runtimes.runtime_for(_profile("cluster:mi355x-amds"), "rocm/vllm:x").setup_lines()
    assert lines[:3] == [
        "export HF_HUB_CACHE=/mnt/hf_hub_cache/",
        "export AIPERF_DATASET_MMAP_CACHE_DIR=/aiperf_mmap_cache",
        "export VLLM_CACHE_ROOT=/it-share/gharunners/.cache/vllm",
    ]
    assert any("enroot import" in line for line in lines[3:])
    assert not any(
        line.startswith("export HF_") for line in runtimes.runtime_for(_profile("cluster:b300-nv")).setup_lines()
    )


@pytest.mark.parametrize(
    ("entry", "field", "message"),
    [
        ("    runtime: {kind: pyxis, env: {BAD-NAME: x}}", "hardware.cluster:x.runtime.env.BAD-NAME", "pattern"),
        ("    slurm: {partition: p, exclude: ['node 1']}", "hardware.cluster:x.slurm.exclude[0]", "pattern"),
        ("    node: {gpu-checks-absent: ''}", "hardware.cluster:x.node.gpu-checks-absent", "at least 1"),
    ],
)
def test_the_new_profile_fields_are_refused_with_file_and_line(
    tmp_path: Path, entry: str, field: str, message: str
) -> None:
    from slurmx.config.load import load_clusters

    path = tmp_path / "clusters.yaml"
    path.write_text(f"hardware:\n  cluster:x:\n    available-cpu-dram-mib: 1\n    gpus-per-node: 8\n{entry}\n")
    with pytest.raises(ConfigError) as caught:
        load_clusters(path).profile("cluster:x")
    error = caught.value
    assert (error.path, error.line, error.field) == (path, 5, field) and message in error.message


def test_amd_nodes_skip_gpu_hygiene_with_the_profiles_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Simulated: NVML must not even be asked (it would fail the test), the reason is the profile's."""
    reason = _profile("cluster:mi300x-amds").node.gpu_checks_absent  # type: ignore[union-attr]
    assert reason and "amd-smi" in reason

    def no_nvml(env: dict[str, str]) -> None:
        raise AssertionError("NVML read on a node whose profile says its GPUs are not NVML's")

    monkeypatch.setattr(gpu_hygiene, "read_gpus_nvml", no_nvml)
    found = gpu_hygiene.node_hygiene({"CUDA_VISIBLE_DEVICES": "0,1"}, remove_shm=False, shm_dir=tmp_path,
                                     gpus_absent=reason)  # fmt: skip
    assert found.notes == [f"GPU checks skipped: {reason}"] and found.failure() is None


def test_amd_nodes_record_why_power_is_absent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    reason = "AMD GPUs: no NVML"

    def no_source(env: dict[str, str]) -> None:
        raise AssertionError("the sampler probed NVML/nvidia-smi on a node whose profile says why not")

    monkeypatch.setattr(telemetry, "open_source", no_source)
    argv = telemetry.telemetry_argv("python", tmp_path, absent=reason)
    assert argv[-2:] == ["--absent", reason]
    assert telemetry.main(argv[3:]) == 0
    info = json.loads((tmp_path / telemetry.INFO_JSON).read_text())
    assert (info["source"], info["absent_reason"]) == ("none", reason)
    assert not (tmp_path / telemetry.METRICS_CSV).exists()


def test_the_checkout_is_mounted_at_workspace_where_a_profile_mounts_none(main_tree: Path) -> None:
    """As the launchers mount $GITHUB_WORKSPACE at /workspace/ and the scripts replay with its utils/aiperf;
    a profile naming its own checkout mount keeps it, and without --inferencex nothing is added."""
    key = "qwen3.5-fp8-mi325x-sglang-agentic-mtp"
    runtime = load_inputs(None, None, [key], inferencex=main_tree).clusters.profiles["cluster:mi325x-amds"].runtime
    assert runtime is not None and f"{main_tree.resolve()}:/workspace" in runtime.container_mounts
    assert runtime.aiperf_source == "/workspace/utils/aiperf"
    plain = _profile("cluster:mi325x-amds").runtime
    assert plain is not None and plain.aiperf_source is None
    assert not any(m.endswith(":/workspace") for m in plain.container_mounts)
    own = load_inputs(None, None, [key], inferencex=main_tree).clusters.profiles["cluster:b300-nv"].runtime
    assert own is not None and own.container_mounts == _profile("cluster:b300-nv").runtime.container_mounts  # type: ignore[union-attr]


def test_a_checkouts_masters_are_nvidias_then_amds_then_the_others_by_name(tmp_path: Path) -> None:
    """InferenceX's full sweep reads configs/nvidia-master.yaml then configs/amd-master.yaml (SOURCE.txt's
    expected/ command); a master of another name follows them, by name, and nothing but *-master.yaml is one."""
    configs = tmp_path / "configs"
    configs.mkdir()
    for name in ("zeta-master.yaml", "amd-master.yaml", "a-master.yaml", "nvidia-master.yaml", "notes.yaml"):
        (configs / name).write_text("{}\n")
    (configs / "runners.yaml").write_text("hardware: {}\n")
    checkout = open_checkout(tmp_path)
    names = [m.name for m in checkout.masters]
    assert names == ["nvidia-master.yaml", "amd-master.yaml", "a-master.yaml", "zeta-master.yaml"]
    assert checkout.masters[0] == (configs / "nvidia-master.yaml").resolve()
    assert (checkout.root, checkout.runners) == (tmp_path.resolve(), (configs / "runners.yaml").resolve())


def test_a_tree_without_masters_or_without_runners_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError) as caught:
        open_checkout(tmp_path)
    assert str(caught.value) == f"{tmp_path}: not an InferenceX checkout (no configs/*-master.yaml)"
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "amd-master.yaml").write_text("{}\n")
    with pytest.raises(UserError) as caught:
        open_checkout(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path}/configs/runners.yaml: missing from the InferenceX checkout {tmp_path} (its hardware figures)"
    )


# slurmx's profiles and a checkout's runners.yaml; the line of each label is counted by hand.
OURS = """\
hardware:
  cluster:a:
    available-cpu-dram-mib: 1000
    gpus-per-node: 8
    slurm: { partition: p }
  cluster:bad-theirs:
    available-cpu-dram-mib: 1000
    gpus-per-node: 8
  cluster:bad-both:
    available-cpu-dram-mib: 0
    gpus-per-node: 8
  cluster:local:
    available-cpu-dram-mib: 64
    gpus-per-node: 1
"""
THEIRS = """\
hardware:
  cluster:only-theirs:
    available-cpu-dram-mib: 500
    gpus-per-node: 4
  cluster:a:
    available-cpu-dram-mib: 2000
    gpus-per-node: 4
  cluster:bad-theirs:
    available-cpu-dram-mib: 1000
    gpus-per-node: eight
  cluster:bad-both:
    available-cpu-dram-mib: 1000
    gpus-per-node: eight
  cluster:bad-only-theirs:
    gpus-per-node: 8
"""


def test_runners_figures_win_label_by_label_and_a_bad_runners_entry_blocks_its_label(tmp_path: Path) -> None:
    (tmp_path / "clusters.yaml").write_text(OURS)
    (tmp_path / "runners.yaml").write_text(THEIRS)
    ours_path, theirs_path = tmp_path / "clusters.yaml", tmp_path / "runners.yaml"
    merged = overlay_figures(load_clusters(ours_path), load_clusters(theirs_path))
    assert (merged.path, merged.figures_path) == (ours_path, theirs_path)
    assert merged.lines == {"cluster:a": 2, "cluster:bad-theirs": 6, "cluster:bad-both": 9, "cluster:local": 12}
    assert merged.warnings == [
        f"{ours_path}:2: hardware.cluster:a.available-cpu-dram-mib is 1000, but {theirs_path}:5 says 2000: "
        "using InferenceX's 2000",
        f"{ours_path}:2: hardware.cluster:a.gpus-per-node is 8, but {theirs_path}:5 says 4: using InferenceX's 4",
    ]
    a = merged.profile("cluster:a")
    assert a is not None and (a.available_cpu_dram_mib, a.gpus_per_node) == (2000, 4)
    assert a.slurm is not None and a.slurm.partition == "p"  # slurmx's own section stays
    only = merged.profile("cluster:only-theirs")
    assert only is not None and (only.available_cpu_dram_mib, only.gpus_per_node, only.slurm) == (500, 4, None)
    assert merged.figures_only == {"cluster:only-theirs": 2}
    local = merged.profile("cluster:local")
    assert local is not None and (local.available_cpu_dram_mib, local.gpus_per_node) == (64, 1)
    # runners.yaml's error for a label slurmx's profile gets right, and for one only it knows
    assert sorted(merged.profiles) == ["cluster:a", "cluster:local", "cluster:only-theirs"]
    for label, line, field in (
        ("cluster:bad-theirs", 10, "hardware.cluster:bad-theirs.gpus-per-node"),
        ("cluster:bad-only-theirs", 14, "hardware.cluster:bad-only-theirs.available-cpu-dram-mib"),
    ):
        with pytest.raises(ConfigError) as caught:
            merged.profile(label)
        assert (caught.value.path, caught.value.line, caught.value.field) == (theirs_path, line, field)
    # bad in both files: slurmx's own error is the one shown (it is the file the user edits)
    with pytest.raises(ConfigError) as caught:
        merged.profile("cluster:bad-both")
    assert (caught.value.path, caught.value.line) == (ours_path, 10)
    assert "greater than 0" in caught.value.message


def test_the_workspace_mount_goes_only_to_pyxis_profiles_that_have_no_checkout_nor_aiperf(tmp_path: Path) -> None:
    """InferenceX's launchers bind $GITHUB_WORKSPACE at /workspace and replay with its utils/aiperf
    (runners/launch_b200-dgxc.sh, benchmarks/benchmark_lib.sh): a profile that says nothing of either gets them."""
    head = "    available-cpu-dram-mib: 64\n    gpus-per-node: 8\n"
    runtimes_by_label = {
        "cluster:venv": "{ kind: venv }",
        "cluster:bare": "{ kind: pyxis }",
        "cluster:none": None,
        "cluster:own": "{ kind: pyxis, container-mounts: ['/srv/ix:/workspace:ro'] }",
        "cluster:src": "{ kind: pyxis, aiperf-source: /opt/aiperf }",
        "cluster:mounts": "{ kind: pyxis, container-mounts: ['/data:/data'] }",
    }
    text = "hardware:\n" + "".join(
        f"  {label}:\n{head}" + (f"    runtime: {runtime}\n" if runtime else "")
        for label, runtime in runtimes_by_label.items()
    )
    (tmp_path / "clusters.yaml").write_text(text)
    before = load_clusters(tmp_path / "clusters.yaml")
    original = dict(before.profiles)
    checkout = tmp_path / "ix"
    checkout.mkdir()
    after = with_workspace(before, checkout).profiles
    changed = {label for label in after if after[label] != original[label]}
    assert changed == {"cluster:bare", "cluster:mounts"}
    for label, mounts in (("cluster:bare", []), ("cluster:mounts", ["/data:/data"])):
        runtime = after[label].runtime
        assert runtime is not None
        assert runtime.container_mounts == [*mounts, f"{checkout.resolve()}:/workspace"]
        assert runtime.aiperf_source == "/workspace/utils/aiperf"
