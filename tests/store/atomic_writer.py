"""A writer process for the atomic-write tests, killed by them mid-write.

usage: atomic_writer.py WRITER MODE TARGET READY
WRITER: text (store.atomic.write_text) | sweep (ledger.write_sweep) | state (state.update_state)
MODE:   loop  -> write versions 0, 1, 0, 1, ... until killed
        block -> write version 1 once, but stop for good at the moment the file would be committed
                 (os.replace), after touching READY: the test SIGKILLs it there.
Version v of each writer is a whole, parsable file whose size differs by version, so a torn file
cannot pass for either.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from slurmx.config.clusters import ClusterProfile
from slurmx.store import atomic
from slurmx.store.ledger import Sweep, write_sweep
from slurmx.store.state import PointState, update_state
from slurmx.store.tree import SweepDir

SIZES = (20_000, 60_000)  # point ids per version: files of ~0.3 and ~1 MB, so a write takes a while


def text_version(version: int) -> str:
    return str(version) * (SIZES[version] * 20) + "\n"


def sweep_version(version: int) -> Sweep:
    return Sweep(
        slurmx_version="test",
        config_key="key",
        sweep_id="s1",
        created_at=float(version),
        config_files={},
        clusters_file={},
        cluster_label="cluster:t",
        cluster_profile=ClusterProfile(available_cpu_dram_mib=1000, gpus_per_node=8),
        point_ids=[f"{version}{i:011d}" for i in range(SIZES[version])],
    )


def state_version(version: int) -> PointState:
    return PointState(point_id="p1", attempt=version + 1, reason=str(version) * SIZES[version] * 20)


def writer(kind: str, target: Path) -> Callable[[int], None]:
    if kind == "text":
        return lambda v: atomic.write_text(target, text_version(v))
    if kind == "sweep":
        return lambda v: write_sweep(SweepDir(target.parent), sweep_version(v))

    def write_state(version: int) -> None:
        update_state(target, lambda _old: state_version(version))

    return write_state


def main() -> int:
    kind, mode, target, ready = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    write = writer(kind, target)
    if mode == "loop":
        ready.touch()
        version = 0
        while True:
            write(version)
            version ^= 1

    def stop_before_commit(src: str, dst: str) -> None:
        ready.touch()
        while True:  # the whole new file is written, flushed and fsynced; SIGKILL comes now
            time.sleep(1)

    os.replace = stop_before_commit  # type: ignore[assignment]  # fault injection at the commit point
    write(1)
    return 3  # never committed through os.replace: the test fails on this exit


if __name__ == "__main__":
    sys.exit(main())
