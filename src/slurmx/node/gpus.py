"""The GPUs this process may use: CUDA_VISIBLE_DEVICES, Slurm's grant, selection by index or UUID, NVML.

Only stdlib besides pynvml (imported when NVML is opened): the GPU sampler and hygiene use it on
machines that lack slurmx's dependencies.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


def visible(env: Mapping[str, str]) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list (indices or UUIDs, in its order); None when unset (every GPU)."""
    raw = env.get(VISIBLE_ENV)
    if raw is None:
        return None
    return [d.strip() for d in raw.split(",") if d.strip()]


def visible_count(env: Mapping[str, str]) -> int:
    """How many GPUs CUDA_VISIBLE_DEVICES names; 0 when unset (a point's GPUs are always set by Slurm)."""
    return len(visible(env) or [])


def visible_indices(env: Mapping[str, str]) -> list[str]:
    """The GPUs CUDA_VISIBLE_DEVICES names by index (UUIDs left out: no topology without NVML to map them)."""
    return [d for d in visible(env) or [] if d.isdigit()]


def granted(env: Mapping[str, str]) -> list[str] | None:
    """The GPUs Slurm granted (SLURM_STEP_GPUS, else SLURM_JOB_GPUS); None outside a GPU allocation."""
    raw = env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS")
    return [g.strip() for g in raw.split(",") if g.strip()] if raw else None


def names(want: str, index: str, uuid: str) -> bool:
    """True if a CUDA_VISIBLE_DEVICES entry names this GPU: its index, or its UUID (a prefix is enough)."""
    return want == index or (want.startswith(("GPU-", "MIG-")) and uuid.startswith(want))


def select(all_ids: Sequence[tuple[str, str]], wanted: Sequence[str] | None) -> list[tuple[str, str]]:
    """(index, uuid) pairs of the GPUs `wanted` names, in its order; every GPU when `wanted` is None."""
    if wanted is None:
        return list(all_ids)
    chosen = []
    for want in wanted:
        for index, uuid in all_ids:
            if names(want, index, uuid):
                chosen.append((index, uuid))
                break
    return chosen


def open_nvml() -> Any:
    """pynvml, initialised; raises when NVML is not usable here (no library, no driver). Close with close_nvml."""
    import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]  # nvidia-ml-py ships no types

    pynvml.nvmlInit()
    return pynvml


def close_nvml(nv: Any) -> None:
    with contextlib.suppress(Exception):  # already shut down, or the driver went away: nothing left to release
        nv.nvmlShutdown()


def nvml_devices(nv: Any) -> list[tuple[str, str, Any]]:
    """Every GPU the driver shows as (index, uuid, handle), in index order."""
    out = []
    for i in range(nv.nvmlDeviceGetCount()):
        handle = nv.nvmlDeviceGetHandleByIndex(i)
        uuid = nv.nvmlDeviceGetUUID(handle)
        out.append((str(i), uuid.decode() if isinstance(uuid, bytes) else str(uuid), handle))
    return out
