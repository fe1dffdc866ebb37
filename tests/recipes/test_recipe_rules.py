"""The recipe rules of DESIGN's "must be impossible by construction" list, one test per guard.

Bad recipes are written as YAML files under tmp_path; every refusal must name the file, the line
and the field. The production recipes in jobs/ are checked against the same rules after resolve.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmx import backends, cli
from slurmx.backends import BackendSpec
from slurmx.backends import lmcache as lmcache_backend
from slurmx.config.load import load_clusters, load_masters
from slurmx.config.master import KvOffloadBackend
from slurmx.engines.vllm import ENGINE as VLLM
from slurmx.engines.vllm import transfer_config
from slurmx.errors import ConfigError
from slurmx.plan import Point, expand
from slurmx.process import ServerPorts
from slurmx.recipes.load import Recipes, arm_flags, load_recipe, load_recipes
from slurmx.recipes.model import HASH_ENV, TOOL_CALL_FLAGS, ConcRule
from slurmx.recipes.resolve import match_values, resolve
from slurmx.recipes.spec import DRAFT_PATH

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobs"
MASTER = ROOT / "configs" / "nvidia-master.yaml"
CLUSTERS = ROOT / "configs" / "clusters.yaml"
SEED_KEYS = ("kimik3-fp4-b300-vllm-agentic-dspark-lmcache", "dsv4-fp4-b200-vllm-agentic-lmcache")
REAL_RECIPES = ("kimik3_fp4_b300_vllm.yaml", "dsv4_fp4_b200_vllm.yaml")
PORTS = ServerPorts(engine=8888, named={"lmcache": 20888, "lmcache-http": 21888, "mooncake-master": 20888})
ENGINE_VENV_SITE = Path("/opt/slurmx-stack/venvs/engine/lib")

# A small valid agentic recipe; each bad case below changes one thing in a copy of it.
GOOD: dict[str, Any] = {
    "recipe": "rules-test",
    "match": {
        "model": "deepseek-ai/DeepSeek-V4-Pro",
        "model-prefix": "dsv4",
        "precision": "fp4",
        "framework": "vllm",
        "runner": "cluster:b200-dgxc",
        "image": "inferactinc/public:sprint-agentx-fast-x86_64-cu13.0.1-6a1e7bf",
    },  # fmt: skip
    "env-policy": {"PYTHONHASHSEED": "0"},
    "engine": {
        "launcher": ["vllm", "serve"],
        "block-size": 256,
        "max-num-seqs-per-conc": 2,
        "flags": {
            "--kv-cache-dtype": "fp8",
            "--block-size": 256,
            "--enable-cumem-allocator": True,
            "--enable-auto-tool-choice": True,
            "--tool-call-parser": "deepseek_v4",
        },
        "per-conc": [
            {"conc-max": 8, "flags": {"--speculative-config": {"method": "mtp", "num_speculative_tokens": 2}}}
        ],
    },
    "arms": {
        "none": {},
        "vllm-simple": {},
        "lmcache": {
            "remove": ["--enable-cumem-allocator"],
            "l1-fraction": 0.75,
            "chunk-size": 1024,
            "transfer-mode": "lmcache_driven",
            "mq-timeout-s": 300,
            "server-flags": {"--eviction-policy": "LRU"},
        },
    },
    "replay": {"kind": "production"},
}


def write(tmp_path: Path, data: dict[str, Any], name: str = "recipe.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def line_of(path: Path, *keys: str) -> int:
    """1-based line of the YAML key reached by following `keys` in order through the file."""
    lines = path.read_text().splitlines()
    start = 0
    for key in keys:
        for number in range(start, len(lines)):
            stripped = lines[number].strip().removeprefix("- ")
            if stripped.startswith(f"{key}:") or stripped == f"- {key}" or stripped == key:
                start = number
                break
        else:
            raise AssertionError(f"{key} not found in {path} after line {start + 1}")
    return start + 1


def refused(tmp_path: Path, data: dict[str, Any], field: str, *keys: str, says: str) -> ConfigError:
    """Load a bad recipe; it must fail with file, the line of `keys`, the `field` path and `says`."""
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as caught:
        load_recipe(path)
    error = caught.value
    assert Path(error.path) == path
    assert error.field == field
    assert error.line == line_of(path, *keys)
    assert says in error.message
    assert str(error).startswith(f"{path}:{error.line}: {field}:")
    return error


def bad(**changes: Any) -> dict[str, Any]:
    return copy.deepcopy(GOOD) | changes


def test_the_good_recipe_loads(tmp_path: Path) -> None:
    """Every refusal below is caused by its one change, not by the base case."""
    file = load_recipe(write(tmp_path, GOOD))
    assert file.arms["lmcache"].chunk_size == 1024


def test_a_recipe_for_an_engine_slurmx_lacks_is_refused_at_its_match(tmp_path: Path) -> None:
    """match.engine (the engine a Dynamo key's recipes serve with directly; the framework's own by default) must be a
    registered engine: refused where the recipe says it, not when a point first resolves."""
    data = bad()
    data["match"] = {**data["match"], "framework": "dynamo-vllm", "engine": "dynamo-frontend"}
    refused(tmp_path, data, "match.engine", "match", "engine", says="no serving engine 'dynamo-frontend'")


def test_match_engine_defaults_to_the_framework_and_names_another(tmp_path: Path) -> None:
    assert load_recipe(write(tmp_path, GOOD)).recipe.match.engine == GOOD["match"]["framework"]
    data = bad()
    data["match"] = {**data["match"], "framework": "dynamo-vllm", "engine": "vllm"}
    match = load_recipe(write(tmp_path, data)).recipe.match
    assert (match.framework, match.engine) == ("dynamo-vllm", "vllm")


# -- 1. no arm silently drops a shared serving flag ------------------------------------------------


@pytest.mark.parametrize("flag", TOOL_CALL_FLAGS)
def test_agentic_recipe_without_tool_call_flag_is_refused(tmp_path: Path, flag: str) -> None:
    data = bad()
    del data["engine"]["flags"][flag]
    refused(tmp_path, data, "engine.flags", "engine", "flags", says=f"lacks {flag}")


@pytest.mark.parametrize("flag", TOOL_CALL_FLAGS)
def test_arm_removing_a_tool_call_flag_is_refused(tmp_path: Path, flag: str) -> None:
    data = bad()
    data["arms"]["lmcache"]["remove"].append(flag)
    refused(tmp_path, data, "arms.lmcache.remove", "arms", "lmcache", "remove", says=f"may not remove {flag}")


def test_arm_resetting_a_base_flag_without_remove_is_refused(tmp_path: Path) -> None:
    data = bad()
    data["arms"]["none"] = {"add": {"--kv-cache-dtype": "auto"}}
    refused(
        tmp_path, data, "arms.none.add.--kv-cache-dtype", "arms", "none", "add", "--kv-cache-dtype",
        says="list it under remove",
    )  # fmt: skip


def test_arm_resetting_a_base_flag_by_naming_it_is_allowed(tmp_path: Path) -> None:
    data = bad()
    data["arms"]["none"] = {"remove": ["--kv-cache-dtype"], "add": {"--kv-cache-dtype": "auto"}}
    file = load_recipe(write(tmp_path, data))
    assert arm_flags(file.recipe, file.arms["none"])["--kv-cache-dtype"] == "auto"


def test_arm_removing_a_flag_the_base_lacks_is_refused(tmp_path: Path) -> None:
    data = bad()
    data["arms"]["none"] = {"remove": ["--numa-bind"]}
    refused(tmp_path, data, "arms.none.remove", "arms", "none", "remove", says="do not set")


def test_per_conc_rule_resetting_a_base_flag_is_refused(tmp_path: Path) -> None:
    data = bad()
    data["engine"]["per-conc"][0]["flags"]["--kv-cache-dtype"] = "auto"
    refused(
        tmp_path, data, "engine.per-conc.0.flags.--kv-cache-dtype", "per-conc", "flags", "--kv-cache-dtype",
        says="already a base flag",
    )  # fmt: skip


def test_overlapping_per_conc_rules_setting_one_flag_are_refused(tmp_path: Path) -> None:
    data = bad()
    data["engine"]["per-conc"].append({"conc-min": 8, "flags": {"--speculative-config": {"method": "ngram"}}})
    refused(
        tmp_path, data, "engine.per-conc.1.flags.--speculative-config", "per-conc", "conc-min", "--speculative-config",
        says="overlapping conc range",
    )  # fmt: skip


SPEC_NGRAM = {"--speculative-config": {"method": "ngram"}}


@pytest.mark.parametrize(
    ("first", "second", "overlaps"),
    [
        ({"tp": 8}, {"tp": 8}, True),
        ({"tp": 8}, {"tp": 4}, False),
        ({"arm": "none"}, {"arm": "lmcache"}, False),
        ({"arm": "none"}, {"tp": 8}, True),  # a TP8 point on the none arm is selected by both
        ({"tp": 8, "arm": "none"}, {"tp": 8, "arm": "vllm-simple"}, False),
    ],
)  # fmt: skip
def test_per_conc_rules_selected_by_tp_or_arm_overlap_only_when_one_point_can_match_both(
    tmp_path: Path, first: dict[str, Any], second: dict[str, Any], overlaps: bool
) -> None:
    data = bad()
    data["engine"]["per-conc"] = [{**first, "flags": SPEC_NGRAM}, {**second, "flags": SPEC_NGRAM}]
    if overlaps:
        refused(
            tmp_path, data, "engine.per-conc.1.flags.--speculative-config", "per-conc", "flags", "flags",
            "--speculative-config", says="overlapping conc range",
        )  # fmt: skip
    else:
        assert len(load_recipe(write(tmp_path, data)).recipe.engine.per_conc) == 2


def test_a_per_conc_rule_naming_an_arm_the_recipe_lacks_is_refused(tmp_path: Path) -> None:
    data = bad()
    data["engine"]["per-conc"][0]["arm"] = "mooncake"
    refused(tmp_path, data, "engine.per-conc.0.arm", "per-conc", "arm", says="no arm 'mooncake'")


def test_per_conc_rules_apply_by_the_points_tp_and_arm() -> None:
    rule = ConcRule.model_validate({"tp": 16, "arm": "none", "conc-max": 12})
    assert rule.applies(12, False, 16, "none")
    assert not rule.applies(12, False, 8, "none")
    assert not rule.applies(12, False, 16, "vllm-simple")
    assert not rule.applies(14, False, 16, "none")


def test_per_conc_rules_of_the_two_dp_attention_sides_never_overlap(tmp_path: Path) -> None:
    """A DP-attention rule and a pure-TP rule may set one flag on the same concurrencies (no point has both);
    a rule for both sides still overlaps either."""
    data = bad()
    data["engine"]["per-conc"] = [
        {"dp-attn": side, "flags": {"--max-num-batched-tokens": 8192}} for side in (True, False)
    ]
    rules = load_recipe(write(tmp_path, data)).recipe.engine.per_conc
    assert [r.applies(64, True) for r in rules] == [True, False] and [r.applies(64, False) for r in rules] == [
        False,
        True,
    ]
    data["engine"]["per-conc"].append({"conc-min": 64, "flags": {"--max-num-batched-tokens": 8192}})
    refused(tmp_path, data, "engine.per-conc.2.flags.--max-num-batched-tokens", "per-conc", "conc-min",
            "--max-num-batched-tokens", says="overlapping conc range")  # fmt: skip


def test_a_dp_attention_k_without_the_base_k_is_refused(tmp_path: Path) -> None:
    data = bad()
    del data["engine"]["max-num-seqs-per-conc"]
    data["engine"]["dp-attn-max-num-seqs-per-conc"] = 1
    refused(tmp_path, data, "engine.dp-attn-max-num-seqs-per-conc", "engine", "dp-attn-max-num-seqs-per-conc",
            says="set max-num-seqs-per-conc")  # fmt: skip


@pytest.mark.parametrize("flag", ["--tensor-parallel-size", "--max-num-seqs", "--kv-transfer-config"])
def test_flags_slurmx_computes_are_refused_in_a_recipe(tmp_path: Path, flag: str) -> None:
    data = bad()
    data["engine"]["flags"][flag] = 8
    refused(tmp_path, data, f"engine.flags.{flag}", "engine", "flags", flag, says="set by slurmx")


def test_a_json_leaf_named_as_a_flag_is_refused(tmp_path: Path) -> None:
    """`recipes check` names a JSON flag's leaf FLAG/leaf; a flag spelled so would render as an argv item no
    engine reads and its fact would pass for the real leaf (the import once carried a reviewed row's leaf so)."""
    name = "--kv-transfer-config/kv_connector_module_path"
    data = bad()
    data["engine"]["flags"][name] = "lmcache.integration.vllm.lmcache_mp_connector"
    refused(tmp_path, data, f"engine.flags.{name}", "engine", "flags", name, says="is no option")


def test_block_size_flag_must_match_the_engine_block_size(tmp_path: Path) -> None:
    data = bad()
    data["engine"]["flags"]["--block-size"] = 128
    refused(tmp_path, data, "engine.flags.--block-size", "engine", "flags", "--block-size", says="block-size 256")


# -- 5. one hashing env policy for every arm -------------------------------------------------------


@pytest.mark.parametrize("name", sorted(HASH_ENV))
def test_arm_setting_hashing_env_is_refused(tmp_path: Path, name: str) -> None:
    data = bad()
    data["arms"]["vllm-simple"] = {"env": {name: "42"}}
    refused(tmp_path, data, f"arms.vllm-simple.env.{name}", "arms", "vllm-simple", "env", name, says="env-policy")


def test_arm_overriding_env_policy_is_refused(tmp_path: Path) -> None:
    data = bad()
    data["env-policy"]["VLLM_ENGINE_READY_TIMEOUT_S"] = "3600"
    data["arms"]["none"] = {"env": {"VLLM_ENGINE_READY_TIMEOUT_S": "600"}}
    refused(
        tmp_path, data, "arms.none.env.VLLM_ENGINE_READY_TIMEOUT_S", "arms", "none", "env", "VLLM_ENGINE_READY_TIMEOUT_S",
        says="set by env-policy",
    )  # fmt: skip


def test_env_policy_without_pythonhashseed_is_refused(tmp_path: Path) -> None:
    data = bad()
    data["env-policy"] = {"HF_HUB_OFFLINE": "1"}
    refused(tmp_path, data, "env-policy", "env-policy", says="must set PYTHONHASHSEED")


# -- 6. allocator settings that break LMCache's CUDA-IPC export ------------------------------------


def test_lmcache_arm_keeping_cumem_allocator_is_refused(tmp_path: Path) -> None:
    data = bad()
    data["arms"]["lmcache"]["remove"] = []
    refused(tmp_path, data, "arms.lmcache", "arms", "lmcache", says="--enable-cumem-allocator")


def test_lmcache_arm_adding_cumem_allocator_back_is_refused(tmp_path: Path) -> None:
    data = bad()
    data["arms"]["lmcache"]["add"] = {"--enable-cumem-allocator": True}
    refused(tmp_path, data, "arms.lmcache", "arms", "lmcache", says="--enable-cumem-allocator")


@pytest.mark.parametrize("where", ["env-policy", "arm"])
@pytest.mark.parametrize("name", ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"])
def test_expandable_segments_with_lmcache_is_refused(tmp_path: Path, where: str, name: str) -> None:
    data = bad()
    value = "garbage_collection_threshold:0.8,expandable_segments:True"
    if where == "env-policy":
        data["env-policy"][name] = value
    else:
        data["arms"]["lmcache"]["env"] = {name: value}
    refused(tmp_path, data, "arms.lmcache", "arms", "lmcache", says="expandable_segments")


def test_expandable_segments_without_lmcache_is_allowed(tmp_path: Path) -> None:
    data = bad()
    del data["arms"]["lmcache"]
    data["env-policy"]["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    load_recipe(write(tmp_path, data))


# -- 7. LMCache chunk size is a multiple of the engine block size ----------------------------------


def test_chunk_size_not_a_multiple_of_block_size_is_refused(tmp_path: Path) -> None:
    data = bad()
    data["arms"]["lmcache"]["chunk-size"] = 1000
    refused(
        tmp_path, data, "arms.lmcache.chunk-size", "arms", "lmcache", "chunk-size",
        says="not a multiple of the engine block size 256",
    )  # fmt: skip


def test_kimik3_published_chunk_768_is_refused_on_the_1536_block(tmp_path: Path) -> None:
    data = yaml.safe_load((JOBS / "kimik3_fp4_b300_vllm.yaml").read_text())
    data["arms"]["lmcache"]["chunk-size"] = 768
    refused(tmp_path, data, "arms.lmcache.chunk-size", "arms", "lmcache", "chunk-size", says="1536")


@pytest.mark.parametrize("flag", ["--chunk-size", "--l1-size-gb"])
def test_server_flags_cannot_bypass_typed_lmcache_knobs(tmp_path: Path, flag: str) -> None:
    data = bad()
    data["arms"]["lmcache"]["server-flags"][flag] = 1000
    refused(
        tmp_path, data, f"arms.lmcache.server-flags.{flag}", "arms", "lmcache", "server-flags", flag,
        says="typed fields",
    )  # fmt: skip


# -- the refusal reaches the user as one line and exit code 2 --------------------------------------


def test_slurmx_render_exits_2_with_one_line_on_a_bad_recipe_and_plan_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = bad()
    data["arms"]["lmcache"]["chunk-size"] = 1000
    path = write(tmp_path, data)
    monkeypatch.setenv("SLURMX_JOBS_DIR", str(tmp_path))
    code = cli.main(["render", SEED_KEYS[1], "--config", str(MASTER), "--clusters", str(CLUSTERS)])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert f"{path}:{line_of(path, 'arms', 'lmcache', 'chunk-size')}: arms.lmcache.chunk-size:" in err
    # planning is expansion only: the recipe's refusal is information there
    assert cli.main(["plan", SEED_KEYS[1], "--config", str(MASTER), "--clusters", str(CLUSTERS)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "arms.lmcache.chunk-size" in out


# -- the production recipes ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seed_points() -> list[Point]:
    masters = load_masters([MASTER])
    points = expand(list(SEED_KEYS), masters, load_clusters(CLUSTERS))
    assert {p.config_key for p in points} == set(SEED_KEYS)
    return points


@pytest.fixture(scope="module")
def recipes() -> Recipes:
    return load_recipes(JOBS)


def as_arm(point: Point, arm: str) -> Point:
    """The same point run by another arm (what the parent keys of the seed keys sweep)."""
    if arm == "none":
        return dataclasses.replace(point, kv_offloading="none", kv_offload_backend=None)
    return dataclasses.replace(point, kv_offloading="dram", kv_offload_backend=KvOffloadBackend(name=arm))


def test_the_hand_written_seed_recipe_has_every_arm(recipes: Recipes) -> None:
    file = next(f for f in recipes.files if f.path.name == "kimik3_fp4_b300_vllm.yaml")
    assert {"none", "vllm-simple", "lmcache", "mooncake"} <= set(file.recipe.arms)


@pytest.mark.parametrize("name", REAL_RECIPES)
def test_real_recipe_has_an_arm_for_every_point_of_its_key(
    name: str, seed_points: list[Point], recipes: Recipes
) -> None:
    """The imported dsv4 recipe holds the arms its key's points run (lmcache alone: repo-lmcache-agentix's
    nvidia-master.yaml), the hand-written Kimi-K3 one every arm."""
    file = next(f for f in recipes.files if f.path.name == name)
    points = [p for p in seed_points if recipes.find(match_values(p)) == file]
    assert points and {p.backend_name for p in points} <= set(file.recipe.arms)


def test_every_arm_of_the_real_recipes_keeps_the_tool_call_flags(seed_points: list[Point], recipes: Recipes) -> None:
    for point in seed_points:
        for arm in recipes.find(match_values(point)).recipe.arms:
            flags = resolve(as_arm(point, arm), recipes).engine_flags
            for flag in TOOL_CALL_FLAGS:
                assert flags.count(flag) == 1, (point.exp_name, arm, flag)
            assert flags[flags.index("--tool-call-parser") + 1] in ("deepseek_v4", "kimi_k3")


def test_no_flag_appears_twice_in_any_resolved_command(seed_points: list[Point], recipes: Recipes) -> None:
    for point in seed_points:
        for arm in recipes.find(match_values(point)).recipe.arms:
            names = [a for a in resolve(as_arm(point, arm), recipes).engine_flags if a.startswith("--")]
            assert len(names) == len(set(names)), (point.exp_name, arm)


def test_every_arm_of_the_real_recipes_hashes_the_same_way(seed_points: list[Point], recipes: Recipes) -> None:
    for point in seed_points:
        arms = recipes.find(match_values(point)).recipe.arms
        hashing = set()
        for arm in arms:
            env = resolve(as_arm(point, arm), recipes).env
            hashing.add(tuple((k, env.get(k)) for k in sorted(HASH_ENV)))
        assert len(hashing) == 1, (point.config_key, hashing)
        assert dict(next(iter(hashing)))["PYTHONHASHSEED"] is not None


def test_real_lmcache_arms_drop_cumem_and_expandable_segments(seed_points: list[Point], recipes: Recipes) -> None:
    for point in seed_points:
        spec = resolve(point, recipes)
        assert spec.backend.name == "lmcache"
        assert "--enable-cumem-allocator" not in spec.engine_flags
        assert not any("expandable_segments" in v for v in spec.env.values())
        assert spec.backend.chunk_size % spec.block_size == 0


def test_dsv4_runs_the_scripts_lmcache_arm_without_the_cumem_allocator(
    seed_points: list[Point], recipes: Recipes
) -> None:
    """repo-lmcache-agentix's dsv4_fp4_b200_vllm.sh leaves --enable-cumem-allocator out of its lmcache arm (CUDA-IPC
    export of the KV cache), the only arm of its key; the imported recipe has it in no flag set."""
    point = next(p for p in seed_points if p.model_prefix == "dsv4")
    recipe = recipes.find(match_values(point)).recipe
    assert set(recipe.arms) == {"lmcache"} and "--enable-cumem-allocator" not in recipe.engine.flags
    assert all("--enable-cumem-allocator" not in resolve(p, recipes).engine_flags for p in seed_points)


def test_kimik3_runs_dspark_k2_at_every_concurrency_with_token_capture_sizes(
    seed_points: list[Point], recipes: Recipes
) -> None:
    """PR #2597's final script: K=2 (golden AL 2.51) at every concurrency, graphs for 1..2*conc batches of
    3 tokens, and the draft from its pre-downloaded local path (filled in where the runtime is known)."""
    point = next(p for p in seed_points if p.model_prefix == "kimik3")
    for conc in (4, 8, 10, 16, 32):
        spec = resolve(dataclasses.replace(point, conc=conc), recipes)
        flags = spec.engine_flags
        speculative = json.loads(flags[flags.index("--speculative-config") + 1])
        assert (speculative["num_speculative_tokens"], speculative["synthetic_acceptance_length"]) == (2, 2.51)
        assert speculative["model"] == DRAFT_PATH and spec.draft_model == "Inferact/Kimi-K3-DSpark"
        compilation = json.loads(flags[flags.index("--compilation-config") + 1])
        assert compilation["cudagraph_capture_sizes"] == [3 * n for n in range(1, 2 * conc + 1)]
        assert flags[flags.index("--max-num-seqs") + 1] == str(2 * conc)


# -- 2. the LMCache connector config always names its module ---------------------------------------


def kv_transfer_config(spec: BackendSpec, ports: ServerPorts) -> dict[str, Any] | None:
    offload = backends.get(spec.name).offload(spec, ports, VLLM.name)
    return transfer_config(offload) if offload is not None else None


def test_lmcache_connector_config_carries_module_path(seed_points: list[Point], recipes: Recipes) -> None:
    for point in seed_points:
        config = kv_transfer_config(resolve(point, recipes).backend, PORTS)
        assert config is not None
        assert config["kv_connector"] == "LMCacheMPConnector"
        assert config["kv_connector_module_path"] == "lmcache.integration.vllm.lmcache_mp_connector"
        assert config["kv_connector_extra_config"]["lmcache.mp.port"] == PORTS["lmcache"]
    mq = {p.model_prefix: kv_transfer_config(resolve(p, recipes).backend, PORTS) for p in seed_points}
    assert mq["kimik3"]["kv_connector_extra_config"]["lmcache.mp.mq_timeout"] == 6000.0
    assert mq["dsv4"]["kv_connector_extra_config"]["lmcache.mp.mq_timeout"] == 300


def test_lmcache_connector_module_defines_the_connector() -> None:
    """The module path names a real module of the engine venv's LMCache, which defines the class."""
    found = sorted(
        ENGINE_VENV_SITE.glob("python3*/site-packages/" + lmcache_backend.CONNECTOR_MODULE.replace(".", "/") + ".py")
    )
    if not found:
        pytest.skip("no LMCache in the engine venv")
    assert f"class {lmcache_backend.CONNECTOR}" in found[0].read_text()


# -- DRAM-derived sizes of every seed-key point ----------------------------------------------------


def test_seed_points_get_the_dram_derived_sizes(seed_points: list[Point], recipes: Recipes) -> None:
    expected_l1 = {"kimik3": 1889, "dsv4": 1799}  # by hand: Kimi-K3 L1 is the whole budget; 2399 x 3/4 = 1799.25
    budgets = {"kimik3": 1889, "dsv4": 2399}
    for point in seed_points:
        assert point.total_cpu_dram_gb == budgets[point.model_prefix]
        lm = resolve(point, recipes).backend
        # the budget is stored once, on the point; the backend keeps only the sizes derived from it
        assert (lm.name, point.total_cpu_dram_gb, lm.l1_size_gb) == (
            "lmcache",
            budgets[point.model_prefix],
            expected_l1[point.model_prefix],
        )
        arms = recipes.find(match_values(point)).recipe.arms
        if "vllm-simple" in arms:  # the hand-written Kimi-K3 recipe's other arms; dsv4's key runs lmcache alone
            simple = resolve(as_arm(point, "vllm-simple"), recipes).backend
            assert simple.cpu_bytes_per_rank == 236_125_000_000  # by hand: 1889 GB x 1e9 B/GB / 8 TP ranks
        if "mooncake" in arms:
            mooncake = resolve(as_arm(point, "mooncake"), recipes).backend
            assert mooncake.per_rank_gb == 236.125  # by hand: 1889 GB / 8 TP ranks
    assert {p.model_prefix for p in seed_points if "mooncake" in recipes.find(match_values(p)).recipe.arms} == {
        "kimik3"
    }


# -- review bugs that came back through a recipe edit (issue 22) ------------------------------------


@pytest.mark.parametrize(
    ("place", "name", "value"),
    [
        (("engine", "ep-flags"), "--enable-auto-tool-choice", False),  # seed 000's shape: DEP points only
        (("engine", "ep-flags"), "--no-enable-auto-tool-choice", True),
        (("engine", "ep-flags"), "--tool-call-parser", ""),
        (("engine", "ep-flags"), "--enable_auto_tool_choice", False),  # the underscore spelling vLLM also reads
        (("arms", "vllm-simple", "add"), "--no-enable-auto-tool-choice", True),
    ],
)
def test_tool_calling_disabled_on_some_points_is_refused(
    tmp_path: Path, place: tuple[str, ...], name: str, value: object
) -> None:
    data = bad()
    target = data
    for key in place:
        target = target.setdefault(key, {})
    target[name] = value
    refused(tmp_path, data, ".".join([*place, name]), *place, name, says="disables tool calling")


def test_tool_calling_disabled_by_a_per_conc_rule_is_refused(tmp_path: Path) -> None:
    data = bad()
    data["engine"]["per-conc"].append({"conc-min": 64, "flags": {"--no-enable-auto-tool-choice": True}})
    error = refused(
        tmp_path, data, "engine.per-conc.1.flags.--no-enable-auto-tool-choice",
        "engine", "per-conc", "--no-enable-auto-tool-choice", says="disables tool calling",
    )  # fmt: skip
    assert "HTTP 400" in error.message


@pytest.mark.parametrize(
    "name",
    ["--kv-transfer-config.kv_connector_module_path", "--kv_transfer_config.kv_connector", "--kv_transfer_config"],
)
def test_a_dotted_or_respelled_flag_cannot_override_the_connector(tmp_path: Path, name: str) -> None:
    data = bad()
    data["arms"]["lmcache"]["add"] = {name: "x"}
    refused(tmp_path, data, f"arms.lmcache.add.{name}", "arms", "lmcache", "add", name, says="--kv-transfer-config")


@pytest.mark.parametrize("seed", ["random", "", "-1", "4294967296"])
def test_a_hash_seed_that_is_not_fixed_is_refused(tmp_path: Path, seed: str) -> None:
    data = bad()
    data["env-policy"]["PYTHONHASHSEED"] = seed
    refused(tmp_path, data, "env-policy.PYTHONHASHSEED", "env-policy", "PYTHONHASHSEED", says="not a fixed seed")


def test_a_missing_hash_seed_is_refused(tmp_path: Path) -> None:
    data = bad()
    data["env-policy"] = {"TORCH_CUDA_ARCH_LIST": "10.0"}
    refused(tmp_path, data, "env-policy", "env-policy", says="must set PYTHONHASHSEED")


@pytest.mark.parametrize("prefix", [["env", "PYTHONHASHSEED=7"], ["env", "-u", "PYTHONHASHSEED"]])
def test_a_launcher_prefix_cannot_change_the_hash_seed(tmp_path: Path, prefix: list[str]) -> None:
    data = bad()
    data["engine"]["launcher"] = [*prefix, "vllm", "serve"]
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as caught:
        load_recipe(path)
    assert caught.value.field.startswith("engine.launcher.") and "hashing env belongs to env-policy" in str(
        caught.value
    )
    assert caught.value.line is not None


def test_the_refusal_is_one_line_and_exit_2_from_the_whole_process(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    data = bad()
    data["engine"]["ep-flags"] = {"--enable-auto-tool-choice": False}
    (tmp_path / "jobs").mkdir()
    path = write(tmp_path / "jobs", data)
    env = {**os.environ, "SLURMX_JOBS_DIR": str(tmp_path / "jobs")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "slurmx", "render", SEED_KEYS[1], "--config", str(MASTER), "--clusters", str(CLUSTERS)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    line = f"{path}:{line_of(path, 'engine', 'ep-flags', '--enable-auto-tool-choice')}: "
    assert proc.stderr.startswith("slurmx: error: " + line) and proc.stderr.count("\n") == 1, proc.stderr


def test_per_conc_env_resolves_on_its_concurrencies_and_never_sets_hashing_env(
    tmp_path: Path, seed_points: list[Point]
) -> None:
    data = bad()
    data["engine"]["per-conc"].append({"conc-min": 32, "env": {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}})
    recipes = Recipes([load_recipe(write(tmp_path, data))])
    dsv4 = [p for p in seed_points if p.config_key == SEED_KEYS[1]]
    high, low = next(p for p in dsv4 if p.conc >= 32), next(p for p in dsv4 if p.conc < 32)
    assert resolve(high, recipes).env["PYTORCH_ALLOC_CONF"] == "expandable_segments:True"  # what the engine gets
    assert "PYTORCH_ALLOC_CONF" not in resolve(low, recipes).env
    data["engine"]["per-conc"][-1]["env"] = {"PYTHONHASHSEED": "1"}
    refused(
        tmp_path, data, "engine.per-conc.1.env.PYTHONHASHSEED", "engine", "per-conc", "PYTHONHASHSEED",
        says="hashing env",
    )  # fmt: skip


def test_per_conc_replay_fields_resolve_on_their_concurrencies_and_only_typed_ones(
    tmp_path: Path, seed_points: list[Point]
) -> None:
    data = bad()
    data["engine"]["per-conc"].append({"conc-min": 32, "replay": {"warmup-grace-period-s": 3600}})
    recipes = Recipes([load_recipe(write(tmp_path, data))])
    dsv4 = [p for p in seed_points if p.config_key == SEED_KEYS[1]]
    high, low = next(p for p in dsv4 if p.conc >= 32), next(p for p in dsv4 if p.conc < 32)
    assert resolve(high, recipes).replay.warmup_grace_period_s == 3600
    assert resolve(low, recipes).replay.warmup_grace_period_s == data["replay"].get("warmup-grace-period-s", 1800)
    data["engine"]["per-conc"][-1]["replay"] = {"concurrency": 4}
    refused(
        tmp_path, data, "engine.per-conc[1].replay", "engine", "per-conc", "replay", says="not a typed replay field"
    )
    data["engine"]["per-conc"][-1]["replay"] = {"warmup-grace-period-s": -1}
    refused(tmp_path, data, "engine.per-conc[1].replay", "engine", "per-conc", "replay", says="warmup-grace-period-s")


def test_vllm_simple_extra_settings_pass_through_and_cannot_resize(tmp_path: Path) -> None:
    data = bad()
    data["arms"]["vllm-simple"] = {"extra-settings": {"enable_cross_layers_blocks": "true"}}
    file = load_recipe(write(tmp_path, data))
    arm = file.arms["vllm-simple"]
    point = expand([SEED_KEYS[1]], load_masters([MASTER]), load_clusters(CLUSTERS))[0]
    spec = backends.get("vllm-simple").spec(arm, point)
    offload = backends.get("vllm-simple").offload(spec, PORTS, "vllm")
    assert offload is not None and offload.settings["enable_cross_layers_blocks"] == "true"
    data["arms"]["vllm-simple"] = {"extra-settings": {"cpu_bytes_to_use_per_rank": 1}}
    refused(
        tmp_path, data, "arms.vllm-simple.extra-settings", "arms", "vllm-simple", "extra-settings",
        says="set by the backend",
    )  # fmt: skip


def test_replay_flags_repeating_what_the_replay_builds_are_refused(tmp_path: Path) -> None:
    data = bad(replay={"kind": "production", "flags": {"--apply-chat-template": True, "--concurrency": 4}})
    refused(tmp_path, data, "replay.flags", "replay", "flags", says="--concurrency: the replay builds these itself")


def test_replay_flags_a_script_appends_reach_the_replay_argv(seed_points: list[Point], recipes: Recipes) -> None:
    from slurmx.node.replay import production_argv
    from slurmx.recipes.model import Replay

    spec = resolve(seed_points[0], recipes)
    spec = spec.model_copy(update={"replay": Replay(kind="production", flags={"--apply-chat-template": True})})
    argv = production_argv("aiperf", spec, "http://127.0.0.1:1", Path("/a"), "/m", ["http://127.0.0.1:2/metrics"])
    assert argv[-3:] == ["--apply-chat-template", "--server-metrics", "http://127.0.0.1:2/metrics"]


@pytest.mark.parametrize("revision", ["9f62e4e9", "9F62E4E9FFFBD0A83DDD60E1C209D828994B3569", "main"])
def test_a_model_revision_that_is_not_a_full_commit_is_refused(tmp_path: Path, revision: str) -> None:
    # the hub cache names a snapshot by its full commit: a branch or a short sha could load another one
    refused(tmp_path, bad(**{"model-revision": revision}), "model-revision", "model-revision", says="should match")
    assert load_recipe(write(tmp_path, bad(**{"model-revision": "9f62e4e9fffbd0a83ddd60e1c209d828994b3569"})))


def test_lmcache_arm_with_an_unknown_server_layout_is_refused(tmp_path: Path) -> None:
    data = bad()
    data["arms"]["lmcache"]["servers"] = "per-gpu"
    refused(tmp_path, data, "arms.lmcache.servers", "arms", "lmcache", "servers", says="per-rank")


@pytest.mark.parametrize(("field", "value"), [("requires", ["sortedcontainers"]), ("find-links", "/local/wheels")])
def test_an_arms_install_knobs_must_be_pins_and_a_page(tmp_path: Path, field: str, value: object) -> None:
    data = bad()
    data["arms"]["lmcache"][field] = value
    keys = ("arms", "lmcache", field)
    where = "arms.lmcache." + (f"{field}[0]" if field == "requires" else field)
    at = (*keys, "sortedcontainers") if field == "requires" else keys  # the bad item's own line
    refused(tmp_path, data, where, *at, says="should match")
