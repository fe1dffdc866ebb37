"""A serving recipe's engine part derived from what InferenceX's script started on every point of a key.

Pure: the input is one `Observed` per point (its arm, parallelism, concurrency, and the engine's flags
and env as the capture saw them); the output is the recipe's engine rules (base flags, per-arm deltas,
EP flags, per-concurrency rules, the computed sizings) or the points and flags no rule fits. Each flag
is placed by the first rule that reproduces it on every point: one value everywhere (base), one value
per arm (arm delta), present exactly on EP points (ep-flags), one value per side of data-parallel attention
(per-conc rules with `dp-attn`), one value per contiguous range of concurrencies (per-conc), such ranges on
each side of DP attention. Anything else is a `Misfit`: the importer reports it and writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from slurmx.flags import Flags, FlagValue

ABSENT = "<absent>"  # a flag the point does not pass (distinct from any value)
COMPILATION = "--compilation-config"
CAPTURE_SIZES = "cudagraph_capture_sizes"
MAX_NUM_SEQS = "--max-num-seqs"
MAX_CAPTURE = "--max-cudagraph-capture-size"
SPECULATIVE = "--speculative-config"


@dataclass(frozen=True)
class Observed:
    """One point as upstream ran it: the engine's flags (parsed values) and the env it set."""

    name: str  # the point's name, for reports (exp-name)
    arm: str  # its kv-offload backend, "none" without one
    tp: int
    ep: int
    dp_attn: bool
    conc: int
    flags: Flags
    env: dict[str, str]


@dataclass(frozen=True)
class Misfit:
    """A flag (or env variable) whose values over the points no rule of the recipe model reproduces."""

    item: str
    why: str
    values: tuple[tuple[str, str], ...]  # (point, value) pairs, for the report

    def line(self) -> str:
        shown = ", ".join(f"{p}={v}" for p, v in self.values[:6])
        more = f" (+{len(self.values) - 6} more)" if len(self.values) > 6 else ""
        return f"{self.item}: {self.why}: {shown}{more}"


@dataclass(frozen=True)
class ConcRange:
    conc_min: int | None
    conc_max: int | None
    flags: Flags
    env: dict[str, str] = field(default_factory=dict)
    dp_attn: bool | None = None  # the points of one side of data-parallel attention only
    tp: int | None = None  # the points of one tensor parallelism only


Bounds = tuple[int | None, int | None, bool | None, int | None]  # a per-conc rule's conc-min, conc-max, dp-attn, tp


@dataclass
class ArmDelta:
    add: Flags = field(default_factory=dict)
    remove: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Derived:
    env_policy: dict[str, str]
    flags: Flags
    arms: dict[str, ArmDelta]
    ep_flags: Flags
    per_conc: list[ConcRange]
    max_num_seqs_per_conc: int | None = None
    dp_attn_max_num_seqs_per_conc: int | None = None  # another k on data-parallel-attention points
    capture_size_is_max_num_seqs: bool = False
    capture_tokens_per_seq: int | None = None
    misfits: list[Misfit] = field(default_factory=list)


def parse_value(text: str) -> FlagValue:
    """One captured flag value as a recipe writes it: JSON objects/lists parsed, numbers as numbers."""
    if text[:1] in "{[":
        parsed: FlagValue = json.loads(text)
        return parsed
    for kind in (int, float):
        try:
            number: FlagValue = kind(text)
            return number
        except ValueError:
            pass
    return text


def parse_flags(argv: Sequence[str]) -> tuple[list[str], Flags]:
    """Captured argv -> (positionals, flags): `--x v` and `--x=v` valued, a bare `--x` true."""
    positional: list[str] = []
    flags: Flags = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                value, i = argv[i + 1], i + 1
            flags[name] = parse_value(value) if (eq or value) else True
        else:
            positional.append(token)
        i += 1
    return positional, flags


def _key(value: object) -> Hashable:
    return ABSENT if value is ABSENT else json.dumps(value, sort_keys=True)


def _show(value: object) -> str:
    return ABSENT if value is ABSENT else value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _misfit(item: str, why: str, points: Sequence[Observed], value: Callable[[Observed], object]) -> Misfit:
    return Misfit(item, why, tuple((p.name, _show(value(p))) for p in points))


def _one(values: Sequence[object]) -> bool:
    return len({_key(v) for v in values}) == 1


def one_hash_seed(points: Sequence[Observed], default: str) -> tuple[list[Observed], str | None]:
    """Seed 000's bug made impossible: every point gets the one seed the script's arms set (`default` where none
    sets one), and an arm that sets none is given it (check names that difference). Two seeds: a refusal."""
    arms = dict.fromkeys(p.arm for p in points)
    by_arm = {arm: sorted({p.env.get("PYTHONHASHSEED", ABSENT) for p in points if p.arm == arm}) for arm in arms}
    fixed = {seed for seeds in by_arm.values() for seed in seeds if seed != ABSENT}
    if len(fixed) > 1:
        shown = ", ".join(f"{arm}: {'/'.join(seeds)}" for arm, seeds in sorted(by_arm.items()))
        why = "one hash seed for every arm, or prefix-cache keys differ"
        return list(points), f"arms disagree on PYTHONHASHSEED ({shown}): {why}"
    seed = fixed.pop() if fixed else default
    seeded = [Observed(p.name, p.arm, p.tp, p.ep, p.dp_attn, p.conc, p.flags,
                       p.env if "PYTHONHASHSEED" in p.env else {"PYTHONHASHSEED": seed, **p.env})
              for p in points]  # fmt: skip
    return seeded, None


def _per_conc(points: Sequence[Observed]) -> int | None:
    """k when every point passes --max-num-seqs k x conc."""
    seqs = [p.flags.get(MAX_NUM_SEQS) for p in points]
    ratios = {s // p.conc if isinstance(s, int) and s % p.conc == 0 else None for s, p in zip(seqs, points)}
    return ratios.pop() if len(ratios) == 1 and None not in ratios else None


def _sizing(points: Sequence[Observed], derived: Derived) -> list[Observed]:
    """Recognise the flags slurmx computes from the concurrency; the points with those flags taken out.
    --max-num-seqs may be k x conc on every point, or one k without DP attention and another with it."""
    seqs = [p.flags.get(MAX_NUM_SEQS) for p in points]
    if not all(isinstance(s, int) for s in seqs) or _one(seqs):
        return list(points)
    k, k_dp = _per_conc(points), None
    plain, dep = [p for p in points if not p.dp_attn], [p for p in points if p.dp_attn]
    if k is None and plain and dep and (k := _per_conc(plain)) is not None:
        k_dp = _per_conc(dep)
        k = k if k_dp is not None else None
    if k is None:
        return list(points)
    derived.max_num_seqs_per_conc, derived.dp_attn_max_num_seqs_per_conc = k, k_dp

    def max_num_seqs(p: Observed) -> int:
        return (k_dp if p.dp_attn and k_dp else k) * p.conc

    out = []
    capture_is_seqs = all(p.flags.get(MAX_CAPTURE) == max_num_seqs(p) for p in points)
    tokens = {_capture_tokens(p.flags.get(COMPILATION), max_num_seqs(p)) for p in points}
    per_seq = tokens.pop() if len(tokens) == 1 else None
    derived.capture_size_is_max_num_seqs = capture_is_seqs
    derived.capture_tokens_per_seq = per_seq
    for p in points:
        flags = {n: v for n, v in p.flags.items() if n != MAX_NUM_SEQS and not (capture_is_seqs and n == MAX_CAPTURE)}
        compilation = flags.get(COMPILATION)
        if per_seq is not None and isinstance(compilation, dict):
            rest = {n: v for n, v in compilation.items() if n != CAPTURE_SIZES}
            if rest:
                flags[COMPILATION] = rest
            else:
                del flags[COMPILATION]
        out.append(Observed(p.name, p.arm, p.tp, p.ep, p.dp_attn, p.conc, flags, p.env))
    return out


def _capture_tokens(compilation: object, max_num_seqs: int) -> int | None:
    """t when the capture sizes are [t, 2t, ..., max_num_seqs x t] (one graph per decode batch, t tokens a sequence)."""
    if not isinstance(compilation, dict):
        return None
    sizes = compilation.get(CAPTURE_SIZES)
    if not isinstance(sizes, list) or len(sizes) != max_num_seqs or not sizes or not isinstance(sizes[0], int):
        return None
    t = sizes[0]
    return t if sizes == [n * t for n in range(1, max_num_seqs + 1)] else None


def conc_ranges(values: Sequence[tuple[int, object]]) -> list[tuple[int | None, int | None, object]] | None:
    """(conc, value) pairs -> contiguous ranges of sorted concurrencies with one value each (open at both
    ends), or None when one concurrency has two values (the flag follows something else too)."""
    by_conc: dict[int, Hashable] = {}
    shown: dict[Hashable, object] = {}
    for conc, value in values:
        key = _key(value)
        if by_conc.setdefault(conc, key) != key:
            return None
        shown[key] = value
    concs = sorted(by_conc)
    groups: list[list[int]] = []
    for conc in concs:
        if groups and by_conc[groups[-1][-1]] == by_conc[conc]:
            groups[-1].append(conc)
        else:
            groups.append([conc])
    out: list[tuple[int | None, int | None, object]] = []
    for i, group in enumerate(groups):
        low = None if i == 0 else group[0]
        high = None if i == len(groups) - 1 else group[-1]
        out.append((low, high, shown[by_conc[group[0]]]))
    return out


def derive(points: Sequence[Observed], base_arm: str = "none") -> Derived:
    """The recipe's engine rules for these points; `misfits` names every flag no rule fits."""
    arms = list(dict.fromkeys(p.arm for p in points))
    base = base_arm if base_arm in arms else arms[0]
    derived = Derived({}, {}, {a: ArmDelta() for a in arms if a != base} | {base: ArmDelta()}, {}, [])
    derived.arms = {a: derived.arms[a] for a in arms}
    points = _sizing(points, derived)
    env_ranges = _derive_env(points, base, derived)
    names = list(dict.fromkeys(n for p in points for n in p.flags))
    ranges: dict[Bounds, Flags] = {}
    for name in names:

        def value(p: Observed, name: str = name) -> object:
            return p.flags.get(name, ABSENT)

        values = [value(p) for p in points]
        if _one(values):  # one value on every point
            derived.flags[name] = values[0]  # type: ignore[assignment]  # present: _one of a flag some point has
            continue
        per_arm = {a: [value(p) for p in points if p.arm == a] for a in arms}
        if all(_one(v) for v in per_arm.values()):  # one value per arm: the base arm's is the base
            _arm_delta(name, {a: v[0] for a, v in per_arm.items()}, base, derived)
            continue
        ep = [value(p) for p in points if p.ep > 1]
        if ep and _one(ep) and ep[0] is not ABSENT and all(value(p) is ABSENT for p in points if p.ep <= 1):
            derived.ep_flags[name] = ep[0]  # type: ignore[assignment]  # not ABSENT: checked
            continue
        found = _placed(points, value)
        if found is not None:
            for bounds, v in found:
                if v is not ABSENT:
                    ranges.setdefault(bounds, {})[name] = v  # type: ignore[assignment]  # not ABSENT
            continue
        why = "follows neither the arm, expert parallelism, DP attention nor contiguous concurrency ranges"
        derived.misfits.append(_misfit(name, why, points, value))
    derived.per_conc = [ConcRange(lo, hi, ranges.get(b, {}), env_ranges.get(b, {}), dp, tp)
                        for b in dict.fromkeys([*ranges, *env_ranges]) for lo, hi, dp, tp in [b]]  # fmt: skip
    return derived


def _placed(points: Sequence[Observed], value: Callable[[Observed], object]) -> list[tuple[Bounds, object]] | None:
    """A flag's (or env variable's) per-conc rules, by the first that fits: one value on each side of DP attention
    (a script's `if DP_ATTENTION` branch), contiguous concurrency ranges over every point, such ranges on each
    side of DP attention, one value per tensor parallelism (a script's `if [ "$TP" -eq 4 ]`), or one per side of
    DP attention and tensor parallelism; None when none fits. ABSENT values are in the list (the caller writes no rule)."""
    sides = sorted({p.dp_attn for p in points})
    by_side = {side: [p for p in points if p.dp_attn == side] for side in sides}
    if len(sides) == 2 and all(_one([value(p) for p in side]) for side in by_side.values()):
        return [((None, None, side, None), value(on[0])) for side, on in by_side.items()]
    found = conc_ranges([(p.conc, value(p)) for p in points])
    if found is not None:
        return [((low, high, None, None), v) for low, high, v in found]
    out = _sides(by_side, value) if len(sides) == 2 else None
    if out is not None:
        return out
    by_tp = {tp: [value(p) for p in points if p.tp == tp] for tp in sorted({p.tp for p in points})}
    if len(by_tp) > 1 and all(_one(v) for v in by_tp.values()):
        return [((None, None, None, tp), v[0]) for tp, v in by_tp.items()]
    # one value per side of DP attention and tensor parallelism: a flag of the DP branch set to $TP over several
    # TP sizes (dsv4_fp4_b300_sglang_mtp.sh's --tokenizer-worker-num "$TP" on DEP4 and DEP8)
    groups = sorted({(p.dp_attn, p.tp) for p in points})
    by_both = {g: [value(p) for p in points if (p.dp_attn, p.tp) == g] for g in groups}
    if len(sides) == 2 and len(by_tp) > 1 and all(_one(v) for v in by_both.values()):
        return [((None, None, side, tp), v[0]) for (side, tp), v in by_both.items()]
    return None


def _sides(
    by_side: dict[bool, list[Observed]], value: Callable[[Observed], object]
) -> list[tuple[Bounds, object]] | None:
    """Contiguous concurrency ranges on each side of DP attention, or None."""
    out: list[tuple[Bounds, object]] = []
    for side, on in by_side.items():
        found = conc_ranges([(p.conc, value(p)) for p in on])
        if found is None:
            return None
        out += [((low, high, side, None), v) for low, high, v in found]
    return out


def _arm_delta(name: str, by_arm: dict[str, object], base: str, derived: Derived) -> None:
    base_value = by_arm[base]
    if base_value is not ABSENT:
        derived.flags[name] = base_value  # type: ignore[assignment]  # not ABSENT
    for arm, value in by_arm.items():
        if arm == base or _key(value) == _key(base_value):
            continue
        delta = derived.arms[arm]
        if base_value is not ABSENT:
            delta.remove.append(name)
        if value is not ABSENT:
            delta.add[name] = value  # type: ignore[assignment]  # not ABSENT


def _derive_env(points: Sequence[Observed], base: str, derived: Derived) -> dict[Bounds, dict[str, str]]:
    """env-policy: what every point of every arm sets alike; an arm's env: what all its points add to it; the
    env set on one side of DP attention or on contiguous concurrency ranges only (returned by rule bounds,
    for the per-conc rules; `_placed`)."""
    ranges: dict[Bounds, dict[str, str]] = {}
    names = list(dict.fromkeys(n for p in points for n in p.env))
    for name in names:

        def value(p: Observed, name: str = name) -> object:
            return p.env.get(name, ABSENT)

        values = [value(p) for p in points]
        if _one(values):
            derived.env_policy[name] = str(values[0])
            continue
        per_arm = {a: [value(p) for p in points if p.arm == a] for a in derived.arms}
        if all(_one(v) for v in per_arm.values()) and per_arm[base][0] is ABSENT:
            for arm, v in per_arm.items():
                if v[0] is not ABSENT:
                    derived.arms[arm].env[name] = str(v[0])
            continue
        found = _placed(points, value)
        if found is not None:
            for bounds, on_range in found:
                if on_range is not ABSENT:
                    ranges.setdefault(bounds, {})[name] = str(on_range)
            continue
        why = "engine env that is neither the same on every point, an arm's own, nor set by DP attention or concurrency"
        derived.misfits.append(_misfit(f"env {name}", why, points, value))
    return ranges
