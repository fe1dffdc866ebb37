"""Results trees holding a series of sweeps of one key, generated with a known step, for the index's tests."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path

from slurmx.store import atomic
from slurmx.store.tree import SweepDir
from tests.helpers.synthetic import make_result, write_result

KEY = "kimik3-fp4-b300-vllm-agentic-history"
DAY = 86400.0
T0 = 1.79e9


def write_series(
    root: Path,
    levels: Sequence[float],
    *,
    noise: float = 0.02,
    repeats: int = 1,
    seed: int = 0,
    conc: int = 8,
    cluster: str = "local",
    key: str = KEY,
    first_day: int = 0,
    images: Sequence[str] | None = None,
    point_id: str | None = None,
    arm: str = "none",
) -> list[str]:
    """One sweep per level (a day apart, oldest first), each point's throughput level * lognormal(noise) per
    repeat; sweep.json carries the cluster label and created_at as submit writes them. The point id is `point_id`
    in every sweep (a key's points keep their ids), else a new one per sweep. Returns the sweep ids."""
    rng = random.Random(seed)
    ids = []
    for i, level in enumerate(levels):
        day = first_day + i
        sweep_id = f"{cluster}-{day:04d}"
        when = T0 + day * DAY
        sweep = root / key / sweep_id
        atomic.write_json(
            sweep / "sweep.json",
            {"config_key": key, "sweep_id": sweep_id, "cluster_label": cluster, "created_at": when},
        )
        pid = point_id or f"p{day:04d}c{conc}"
        for repeat in range(1, repeats + 1):
            r = make_result(point_id=pid, config_key=key, sweep_id=sweep_id, conc=conc, arm=arm,
                            tput_per_gpu=level * math.exp(rng.gauss(0.0, noise)), ended_at=when + repeat)  # fmt: skip
            assert r.slurmx is not None
            r.slurmx.repeat, r.slurmx.repeats = repeat, repeats
            if images is not None:
                r.image = images[i]
            write_result(SweepDir(sweep).point(pid, repeat).result_json, r)
        ids.append(sweep_id)
    return ids
