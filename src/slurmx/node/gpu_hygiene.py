"""Is the node clean before a point starts? GPUs as granted, no foreign GPU memory, ECC, /dev/shm.

Each check returns findings: `problems` fail the point (with the node name, so a resubmit can exclude
it), `notes` are reported and recorded. NVML (nvidia-ml-py) reads the GPUs; on a node without GPUs
or without NVML the GPU checks say so and pass (the local stack has no GPU). Only stdlib besides
pynvml: this also runs on GPU machines that lack slurmx's dependencies.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmx.node import gpus as gpu_env
from slurmx.node import identity

# LMCache's MP server names its L1 pool segment `lmcache_l1_pool_<id>` (engine_context.py); any
# `lmcache*` segment on a node where no LMCache of ours runs yet is an earlier server's leftover.
LMCACHE_SHM_PATTERNS = ("lmcache*",)
# Memory a GPU shows with no process on it (driver and context reservations), in MiB.
IDLE_MEMORY_MIB = 1024


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def extend(self, other: Findings) -> None:
        self.problems += other.problems
        self.notes += other.notes
        self.removed += other.removed

    def failure(self, node: str | None = None) -> str | None:
        """One line for state.json: the node's name first, so `--exclude` has what it needs."""
        if not self.problems:
            return None
        return f"node {node or identity.node_name()} is not clean: " + "; ".join(self.problems)


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_mib: float | None


@dataclass(frozen=True)
class GpuState:
    """What the checks need of one GPU (from NVML on the node, from a fixture in tests)."""

    index: str
    uuid: str
    memory_used_mib: float
    processes: list[GpuProcess]
    ecc_uncorrected_volatile: int | None = None
    retired_pages_pending: bool | None = None
    remapping_failed: bool | None = None


def check_grant(env: dict[str, str], gpus: list[GpuState] | None) -> Findings:
    """CUDA_VISIBLE_DEVICES names as many GPUs as Slurm granted, and each of them exists on the node."""
    out = Findings()
    visible = gpu_env.visible(env)
    granted = gpu_env.granted(env)
    if granted is not None and visible is not None and len(granted) != len(visible):
        out.problems.append(
            f"GPUs: Slurm granted {len(granted)} ({','.join(granted)}), CUDA_VISIBLE_DEVICES shows "
            f"{len(visible)} ({env.get(gpu_env.VISIBLE_ENV)})"
        )
    if gpus is not None and visible is not None:
        missing = [d for d in visible if not any(gpu_env.names(d, g.index, g.uuid) for g in gpus)]
        if missing:
            out.problems.append(f"GPUs: CUDA_VISIBLE_DEVICES names {','.join(missing)}, which the driver does not show")
    return out


def check_gpu_memory(gpus: Iterable[GpuState], own_pids: set[int], idle_mib: float = IDLE_MEMORY_MIB) -> Findings:
    """No GPU of the point holds memory of a process that is not ours (an earlier engine left behind)."""
    out = Findings()
    for gpu in gpus:
        foreign = [p for p in gpu.processes if p.pid not in own_pids]
        if foreign:
            held = ", ".join(
                f"pid {p.pid}" + (f" ({p.used_mib:.0f} MiB)" if p.used_mib is not None else "") for p in foreign
            )
            out.problems.append(f"GPU {gpu.index} ({gpu.uuid}) holds memory of a foreign process: {held}")
        elif not gpu.processes and gpu.memory_used_mib > idle_mib:
            # in a container the driver may hide other namespaces' processes: the memory still shows
            out.problems.append(
                f"GPU {gpu.index} ({gpu.uuid}) has {gpu.memory_used_mib:.0f} MiB in use by no visible process"
            )
    return out


def check_ecc(gpus: Iterable[GpuState]) -> Findings:
    """Uncorrected ECC errors and pending page retirement are reported; a failed row remap fails the point."""
    out = Findings()
    for gpu in gpus:
        if gpu.ecc_uncorrected_volatile:
            out.notes.append(f"GPU {gpu.index}: {gpu.ecc_uncorrected_volatile} uncorrected ECC errors since boot")
        if gpu.retired_pages_pending:
            out.notes.append(f"GPU {gpu.index}: retired pages pending (needs a GPU reset)")
        if gpu.remapping_failed:
            out.problems.append(f"GPU {gpu.index}: row remapping failed (the GPU needs service)")
    return out


def find_shm_leftovers(shm_dir: Path = Path("/dev/shm"), patterns: Iterable[str] = LMCACHE_SHM_PATTERNS) -> list[Path]:
    """Matching segments that no live process maps or holds open: an earlier server's, not a running one's."""
    if not shm_dir.is_dir():
        return []
    pats = tuple(patterns)
    found = sorted(p for p in shm_dir.iterdir() if any(fnmatch.fnmatch(p.name, pat) for pat in pats))
    if not found:
        return []
    in_use = paths_in_use()
    return [p for p in found if str(p) not in in_use]


def paths_in_use(proc: Path = Path("/proc")) -> set[str]:
    """Files some process maps or holds open (what /proc lets us read)."""
    used: set[str] = set()
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            for line in (pid_dir / "maps").read_text().splitlines():
                parts = line.split(maxsplit=5)
                if len(parts) == 6:
                    used.add(parts[5].removesuffix(" (deleted)"))
        except OSError:
            pass  # gone, or not ours to read
        try:
            for fd in (pid_dir / "fd").iterdir():
                used.add(os.readlink(fd))
        except OSError:
            pass
    return used


def check_shm(
    remove: bool, shm_dir: Path = Path("/dev/shm"), patterns: Iterable[str] = LMCACHE_SHM_PATTERNS
) -> Findings:
    """Leftover LMCache segments: removed when the profile allows it, otherwise the point fails."""
    out = Findings()
    for path in find_shm_leftovers(shm_dir, patterns):
        size_mib = _size_mib(path)
        if remove:
            try:
                path.unlink()
            except OSError as exc:
                out.problems.append(f"/dev/shm: could not remove leftover {path.name} ({size_mib:.0f} MiB): {exc}")
                continue
            out.removed.append(str(path))
            out.notes.append(f"/dev/shm: removed leftover {path.name} ({size_mib:.0f} MiB)")
        else:
            out.problems.append(
                f"/dev/shm: leftover {path.name} ({size_mib:.0f} MiB) of an earlier LMCache server "
                "(the profile does not allow removing it)"
            )
    return out


def read_gpus_nvml(env: dict[str, str]) -> tuple[list[GpuState] | None, str | None]:
    """The allocation's GPUs as NVML sees them; (None, why) when NVML is not usable here."""
    try:
        nv = gpu_env.open_nvml()
    except Exception as exc:  # no library, no driver: a node without GPUs
        return None, f"NVML not usable: {type(exc).__name__}: {exc}".strip()
    try:
        devices = gpu_env.nvml_devices(nv)
        handles = {index: handle for index, _, handle in devices}
        chosen = gpu_env.select([(index, uuid) for index, uuid, _ in devices], gpu_env.visible(env))
        return [_gpu_state(nv, index, uuid, handles[index]) for index, uuid in chosen], None
    finally:
        gpu_env.close_nvml(nv)


def _gpu_state(nv: Any, index: str, uuid: str, handle: Any) -> GpuState:
    processes = [
        GpuProcess(int(p.pid), float(p.usedGpuMemory) / 2**20 if p.usedGpuMemory is not None else None)
        for p in (_try(lambda: nv.nvmlDeviceGetComputeRunningProcesses(handle)) or [])
    ]
    processes += [
        GpuProcess(int(p.pid), float(p.usedGpuMemory) / 2**20 if p.usedGpuMemory is not None else None)
        for p in (_try(lambda: nv.nvmlDeviceGetGraphicsRunningProcesses(handle)) or [])
    ]
    memory = _try(lambda: nv.nvmlDeviceGetMemoryInfo(handle))
    remap = _try(lambda: nv.nvmlDeviceGetRemappedRows(handle))  # (corr, uncorr, pending, failure)
    pending = _try(lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(handle))
    return GpuState(
        index=index,
        uuid=uuid,
        memory_used_mib=float(memory.used) / 2**20 if memory is not None else 0.0,
        processes=processes,
        ecc_uncorrected_volatile=_try(
            lambda: int(
                nv.nvmlDeviceGetTotalEccErrors(handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
            )
        ),
        retired_pages_pending=bool(pending) if pending is not None else None,
        remapping_failed=bool(remap[3]) if isinstance(remap, tuple | list) and len(remap) > 3 else None,
    )


def own_process_ids() -> set[int]:
    """This process and every process of the job (same session leader's descendants are started later)."""
    return {os.getpid(), os.getppid()}


def node_hygiene(
    env: dict[str, str],
    *,
    remove_shm: bool,
    shm_dir: Path = Path("/dev/shm"),
    gpus: list[GpuState] | None = None,
    own_pids: set[int] | None = None,
    gpus_absent: str | None = None,
) -> Findings:
    """Every hygiene check; `gpus` is read from NVML unless given, or unless `gpus_absent` (the cluster
    profile's reason NVML cannot see this node's GPUs) says why the GPU checks cannot run."""
    out = Findings()
    if gpus is None and gpus_absent:
        out.notes.append(f"GPU checks skipped: {gpus_absent}")
    elif gpus is None:
        gpus, why = read_gpus_nvml(env)
        if why:
            out.notes.append(f"GPU checks skipped: {why}")
    out.extend(check_grant(env, gpus))
    if gpus is not None:
        out.extend(check_gpu_memory(gpus, own_pids if own_pids is not None else own_process_ids()))
        out.extend(check_ecc(gpus))
    out.extend(check_shm(remove_shm, shm_dir, LMCACHE_SHM_PATTERNS))
    return out


def _size_mib(path: Path) -> float:
    try:
        return path.stat().st_size / 2**20
    except OSError:
        return 0.0


def _try(call: Any) -> Any:
    try:
        return call()
    except Exception:  # NVMLError_NotSupported: the field is unknown on this GPU
        return None
