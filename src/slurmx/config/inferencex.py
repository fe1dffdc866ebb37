"""A user's InferenceX checkout as input: its master configs and runners.yaml, read where they are.

The tree's path travels on to later stages (a recipe importer reads its `benchmarks/` and `runners/`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from slurmx.errors import UserError


@dataclass(frozen=True)
class Checkout:
    root: Path
    masters: list[Path]  # configs/*-master.yaml: nvidia's, amd's, then any other sorted
    runners: Path  # configs/runners.yaml: InferenceX's hardware figures per cluster label


def open_checkout(root: Path) -> Checkout:
    """The checkout at `root`; a directory without InferenceX's master configs is refused in one line."""
    configs = root / "configs"
    # InferenceX's full sweep reads nvidia-master.yaml then amd-master.yaml: rows come in that order
    first = {"nvidia-master.yaml": 0, "amd-master.yaml": 1}
    found = configs.glob("*-master.yaml") if configs.is_dir() else []
    masters = sorted(found, key=lambda m: (first.get(m.name, 2), m.name))
    if not masters:
        raise UserError(f"{root}: not an InferenceX checkout (no configs/*-master.yaml)")
    runners = configs / "runners.yaml"
    if not runners.is_file():  # InferenceX's own generator cannot run without it either
        raise UserError(f"{runners}: missing from the InferenceX checkout {root} (its hardware figures)")
    return Checkout(root.resolve(), [m.resolve() for m in masters], runners.resolve())
