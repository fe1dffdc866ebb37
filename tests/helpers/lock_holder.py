"""A second process that holds a lock until told to let go, for the lock tests.

usage: lock_holder.py state|submit PATH RELEASE
state:  update_state(PATH) whose change prints `holding`, waits for the file RELEASE, then appends `holder` to the
        state's requeues (the read-modify-write another writer must not interleave with)
submit: store.lock.locked(PATH): prints `holding`, waits for RELEASE, lets go
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from slurmx.store.lock import locked
from slurmx.store.state import PointState, update_state


def wait_for(release: Path) -> None:
    print("holding", flush=True)
    while not release.exists():
        time.sleep(0.02)


def main() -> int:
    kind, path, release = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    if kind == "state":

        def change(old: PointState | None) -> PointState:
            assert old is not None
            wait_for(release)
            return old.model_copy(update={"requeues": [*old.requeues, "holder"]})

        update_state(path, change)
    else:
        with locked(path, timeout_s=5.0):
            wait_for(release)
    return 0


if __name__ == "__main__":
    sys.exit(main())
