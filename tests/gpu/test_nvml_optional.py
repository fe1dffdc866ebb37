"""nvidia-ml-py is the optional extra `gpu`: where it is absent (here, and on the local stack) the sampler
and the GPU hygiene check say why and fall back; nothing raises. Run in a fresh interpreter where
`import pynvml` fails, as on a machine without the package."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
sys.modules["pynvml"] = None  # `import pynvml` fails (ModuleNotFoundError), as without nvidia-ml-py
from slurmx.node import gpu_hygiene, telemetry
source, reasons = telemetry.open_source({"CUDA_VISIBLE_DEVICES": "0", "PATH": "/nonexistent"})
gpus, why = gpu_hygiene.read_gpus_nvml({"CUDA_VISIBLE_DEVICES": "0"})
print(json.dumps({"source": source is not None, "reasons": reasons, "gpus": gpus, "why": why}))
"""


def test_nvidia_ml_py_is_the_optional_gpu_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(d.startswith("nvidia-ml-py") for d in project["optional-dependencies"]["gpu"])
    assert not any(d.startswith("nvidia-ml-py") for d in project["dependencies"])


def test_without_nvidia_ml_py_the_sampler_and_hygiene_say_why() -> None:
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    seen = json.loads(out.stdout)
    assert seen["source"] is False and seen["gpus"] is None
    assert seen["reasons"][0].startswith("nvml: ModuleNotFoundError") and "nvidia-smi: not on PATH" in seen["reasons"]
    assert seen["why"].startswith("NVML not usable: ModuleNotFoundError")
