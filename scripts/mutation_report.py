"""Score and survivors of a mutmut run, per module: reads `mutmut results --all true` on stdin.

usage: mutmut results --all true | python scripts/mutation_report.py MODULE...
       mutmut results --all true | python scripts/mutation_report.py --pending MODULE
(--pending: the module's mutants still to run, one a line: all of them as MODULE.* when none has
been generated yet, else those not killed so far; nothing when every one is killed.
--timeouts: the module's timed-out mutants, which scripts/mutation reruns alone.)
With SLURMX_MUTATION_SAMPLE=N, each module is judged by a sample of N of its mutants: those whose name has the
smallest blake2b digest (uniform, and the same on every run, so a run resumes); the score then carries a 95 %
Wilson interval. For a module too big to mutate whole on the machine at hand.
The score is killed / checked, where checked = killed + survived + no tests (a mutant no fast test
even runs is a survivor); timeouts count as killed (the mutant hung the code: scripts/mutation has rerun
each alone, so a timeout left here reproduced without other load), mutants mutmut has
not run yet are listed as not checked and left out of the score.
"""

from __future__ import annotations

import hashlib
import math
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

KILLED = {"killed", "timeout", "segfault"}
SURVIVED = {"survived", "no tests", "suspicious"}
MUTMUT = os.environ.get("MUTMUT", str(Path(sys.executable).with_name("mutmut")))
SAMPLE = int(os.environ.get("SLURMX_MUTATION_SAMPLE") or 0)


def sample(names: list[str], size: int) -> list[str]:
    """The `size` names with the smallest digests (all of them when size is 0): a fixed uniform sample."""
    if not size:
        return sorted(names)
    return sorted(sorted(names, key=lambda n: hashlib.blake2b(n.encode(), digest_size=8).digest())[:size])


def wilson(killed: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion: sound at small n and near 100 %, unlike p +- z*se."""
    p = killed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def module_of(mutant: str, modules: list[str]) -> str | None:
    """The longest requested module `mutant` belongs to (slurmx.results.gate.x_check__mutmut_3)."""
    owners = [m for m in modules if mutant.startswith(m + ".")]
    return max(owners, key=len) if owners else None


def first_changed_line(mutant: str) -> str:
    """The mutated line as `mutmut show` prints it, for the survivor list."""
    shown = subprocess.run([MUTMUT, "show", mutant], capture_output=True, text=True, check=False).stdout
    plus = [line[1:].strip() for line in shown.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return plus[0] if plus else "(no diff shown)"


def read_status(modules: list[str]) -> dict[str, dict[str, str]]:
    """module -> mutant name -> mutmut's status, from `mutmut results --all true` on stdin (the sample only,
    with SLURMX_MUTATION_SAMPLE)."""
    status: dict[str, dict[str, str]] = defaultdict(dict)
    for line in sys.stdin:
        name, sep, state = line.strip().rpartition(": ")
        owner = module_of(name, modules) if sep else None
        if owner:
            status[owner][name] = state
    for module, mutants in status.items():
        kept = set(sample(list(mutants), SAMPLE))
        status[module] = {name: state for name, state in mutants.items() if name in kept}
    return status


def pending(module: str) -> int:
    mutants = read_status([module])[module]
    names = [name for name, state in sorted(mutants.items()) if state not in KILLED] if mutants else [f"{module}.*"]
    print("\n".join(names))
    return 0


def timeouts(module: str) -> int:
    """The module's timed-out mutants, one a line: scripts/mutation reruns each alone."""
    print("\n".join(name for name, state in sorted(read_status([module])[module].items()) if state == "timeout"))
    return 0


def main(modules: list[str]) -> int:
    status = read_status(modules)
    total: Counter[str] = Counter()
    survivors: list[tuple[str, str]] = []
    for module in modules:
        counts = Counter(status[module].values())
        total.update(counts)
        killed = sum(counts[s] for s in KILLED)
        checked = killed + sum(counts[s] for s in SURVIVED)
        score = f"{100 * killed / checked:.1f}%" if checked else "-"
        other = {k: v for k, v in counts.items() if k not in KILLED | SURVIVED}
        print(f"{module:28} {killed:5}/{checked:<5} killed  {score:>6}  {dict(other) or ''}")
        if SAMPLE and checked:
            low, high = wilson(killed, checked)
            print(f"{'':28} a sample of {SAMPLE}: 95 % interval {100 * low:.1f}-{100 * high:.1f}%")
        survivors += [(name, state) for name, state in sorted(status[module].items()) if state in SURVIVED]
    killed = sum(total[s] for s in KILLED)
    checked = killed + sum(total[s] for s in SURVIVED)
    print(f"{'all':28} {killed:5}/{checked:<5} killed  {100 * killed / max(checked, 1):.1f}%")
    for name, state in survivors:
        print(f"  {state:9} {name}: {first_changed_line(name)}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--pending"]:
        sys.exit(pending(sys.argv[2]))
    if sys.argv[1:2] == ["--timeouts"]:
        sys.exit(timeouts(sys.argv[2]))
    sys.exit(main(sys.argv[1:]))
