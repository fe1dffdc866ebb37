"""TensorRT-LLM's engine module: the argv InferenceX's TRT-LLM scripts start (trtllm-serve under a one-rank mpirun),
its parallel flag, the recipe's dash-less flags gathered into the --config YAML the node writes, the captured file
read back as those flags, and the KV block size (kv_cache_config.tokens_per_block) a recipe records."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from slurmx import engines
from slurmx.engines.base import RecipeSizing
from slurmx.errors import UserError
from slurmx.upstream.inferencex import AGENTIC, script_for
from tests.helpers.points import point_from_row

TRT = engines.get("trt")
LAUNCHER = ["mpirun", "-n", "1", "--oversubscribe", "--allow-run-as-root", "trtllm-serve"]
ROW = {"image": "nvcr.io/nvidia/tensorrt-llm/release:x", "model": "org/m", "model-prefix": "m", "precision": "fp4",
       "framework": "trt", "runner": "cluster:b300-nv", "conc": 8, "tp": 4, "kv-offloading": "dram",
       "kv-offload-backend": {"name": "native"}, "total-cpu-dram-gb": 1000}  # fmt: skip
KEY = "minimaxm3-fp4-b300-trtllm-agentic-mtp"


def _sizing(draft: str | None = None, block: int = 128) -> RecipeSizing:
    return RecipeSizing(block_size=block, draft_model=draft)


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_the_parallel_flag_is_tp_size(tp: int) -> None:
    flags = TRT.parallel_flags(point_from_row({**ROW, "tp": tp}))
    assert flags == ["--tp_size", str(tp)]
    assert "--tp_size" in TRT.computed_flags  # a recipe may not set it


def test_the_argv_is_trtllm_serve_under_mpirun_with_the_model_positional() -> None:
    """minimaxm3_fp4_b{200,300}_trt_mtp.sh: `mpirun -n 1 --oversubscribe --allow-run-as-root trtllm-serve MODEL`."""
    flags = ["--chat_template", "/models/m/chat_template.jinja", "--config", "/run/trtllm_config.yaml"]
    argv = TRT.argv(LAUNCHER, "/models/m", TRT.model_flag, "org/m", 8888, flags)
    assert argv == [*LAUNCHER, "/models/m", "--host", "127.0.0.1", "--port", "8888", *flags]
    assert TRT.model_flag is None  # positional: no --served-model-name, the replay names the model path
    assert TRT.upstream_programs == {" ".join(LAUNCHER): "engine"}


def test_dashless_flags_become_the_config_file_the_node_writes(tmp_path: Path) -> None:
    """Each flag without dashes is a top-level key of trtllm-serve's extra-options YAML; the draft's staged path
    goes into its speculative_config; dashed flags stay flags."""
    recipe = {"--chat_template": "{model_path}/chat_template.jinja", "max_batch_size": 8,
              "speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 3},
              "kv_cache_config": {"tokens_per_block": 128, "host_cache_size": 1 << 30}}  # fmt: skip
    sized, extra = TRT.sized_flags(recipe, _sizing(draft="org/draft"), 8, "/models/org/draft")
    assert extra == []
    assert sized == {"--chat_template": "{model_path}/chat_template.jinja", "--config": {
        "max_batch_size": 8, "speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 3,
                                                    "speculative_model": "/models/org/draft"},
        "kv_cache_config": {"tokens_per_block": 128, "host_cache_size": 1 << 30},
    }}  # fmt: skip
    argv = ["--chat_template", "/m/chat_template.jinja", "--config", json.dumps(sized["--config"]), "--tp_size", "4"]
    flags, files = TRT.files(argv, tmp_path)
    path = str(tmp_path / "trtllm_config.yaml")
    assert flags == ["--chat_template", "/m/chat_template.jinja", "--config", path, "--tp_size", "4"]
    assert list(files) == [path] and yaml.safe_load(files[path]) == sized["--config"]
    # the captured file reads back as the recipe's flags (the draft's path is the importer's to lift out)
    back = TRT.inline_files(
        {"--chat_template": "/m/chat_template.jinja", "--config": "ser.yaml"}, {"--config": files[path]}
    )
    assert back == {"--chat_template": "/m/chat_template.jinja", **sized["--config"]}  # type: ignore[dict-item]
    assert TRT.files(["--tp_size", "4"], tmp_path) == (["--tp_size", "4"], {})  # no file without dash-less flags


def test_a_config_that_is_no_mapping_is_refused() -> None:
    with pytest.raises(ValueError, match="--config names no YAML mapping"):
        TRT.inline_files({"--config": "ser.yaml"}, {"--config": "- a list\n"})


def test_the_block_size_is_tokens_per_block_else_trtllms_default() -> None:
    """TRT-LLM's KV block is kv_cache_config.tokens_per_block (KvCacheConfig's default 32), not vLLM's 16."""
    assert TRT.block_size({"kv_cache_config": {"tokens_per_block": 128}}) == 128
    assert TRT.block_size({"kv_cache_config": {"dtype": "fp8"}}) == 32
    assert TRT.block_size({"--block-size": 16}) == 32  # vLLM's flag means nothing to trtllm-serve
    problems = TRT.recipe_problems({"kv_cache_config": {"tokens_per_block": 128}}, _sizing(block=16))
    assert [p.field for p in problems] == [("engine", "block-size")]
    assert TRT.recipe_problems({"kv_cache_config": {"tokens_per_block": 128}}, _sizing(block=128)) == []


def test_every_rendered_point_writes_its_config_and_names_it(tmp_path: Path) -> None:
    """The b300 key renders: each point's engine is trtllm-serve with its TP, --config names the file the node
    writes in the point's dir, whose max_batch_size is the point's conc and whose tokens_per_block is the recipe's
    block-size; the chat template is the staged model's."""
    from slurmx.commands.common import load_points
    from tests.helpers.golden import FIXTURES, _DefaultInputs, render_key

    loaded = load_points(_DefaultInputs(FIXTURES / "repo-main"), [KEY])  # type: ignore[arg-type]  # reads only .config, .clusters and .inferencex
    points = {p.exp_name: p for p in loaded.points if p.config_key == KEY}
    text = render_key(KEY, loaded, tmp_path)
    recipe = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "jobs" / "minimaxm3_fp4_b300_trt_mtp.yaml").read_text()
    )
    blocks = text.split("\n# point ")[1:]
    assert len(blocks) == len(points) > 0 and "{model_path}" not in text
    for part in blocks:
        point = points[part.split()[1]]
        written = re.search(r"# file (\S+/trtllm_config\.yaml):\n((?:#   .*\n)+)", part)
        assert written, part[:200]
        config = yaml.safe_load("\n".join(line[4:] for line in written.group(2).splitlines()))
        line = next(line for line in part.splitlines() if " trtllm-serve " in line)
        argv = line.split(" trtllm-serve ", 1)[1].split()
        model = argv[0]
        assert argv[argv.index("--tp_size") + 1] == str(point.tp)
        assert argv[argv.index("--config") + 1].strip("'") == written.group(1)
        assert argv[argv.index("--chat_template") + 1] == f"{model}/chat_template.jinja"
        assert config["max_batch_size"] == point.conc
        assert config["kv_cache_config"]["tokens_per_block"] == recipe["engine"]["block-size"]
        assert config["speculative_config"]["speculative_model"].endswith("/MiniMax-M3-EAGLE3-GQA")


@pytest.mark.parametrize(
    ("framework", "scripts", "picked"),
    [
        ("trt", ["m_fp4_b300_mtp.sh", "m_fp4_b300_trt_mtp.sh"], "m_fp4_b300_trt_mtp.sh"),
        ("trt", ["m_fp4_b300_mtp.sh"], None),  # the bare name is another engine's script (minimaxm3_fp4_b300_mtp.sh)
        ("sglang", ["m_fp4_b300_mtp.sh"], "m_fp4_b300_mtp.sh"),
        ("sglang", ["m_fp4_b300_mtp.sh", "m_fp4_b300_sglang_mtp.sh"], "m_fp4_b300_sglang_mtp.sh"),
    ],
)
def test_the_launchers_script_pick_tags_trtllm_historical_name(
    tmp_path: Path, framework: str, scripts: list[str], picked: str | None
) -> None:
    """launch_b300-nv.sh: the framework-tagged script, else the historical name with FRAMEWORK_SUFFIX, `_trt` for trt
    only: a TRT-LLM point never runs the bare script of its model."""
    (tmp_path / AGENTIC).mkdir(parents=True)
    for name in scripts:
        (tmp_path / AGENTIC / name).write_text("#!/bin/bash\n")
    point = point_from_row({**ROW, "framework": framework, "spec-decoding": "mtp", "exp-name": "m_agentic"})
    if picked is None:
        with pytest.raises(UserError, match="no agentic script"):
            script_for(tmp_path, point)
    else:
        assert script_for(tmp_path, point) == tmp_path / AGENTIC / picked
