"""The importer's derivation rules on small hand-made point sets (slurmx.upstream.derive): pure, fast."""

from __future__ import annotations

from slurmx.flags import Flags
from slurmx.upstream.derive import Observed, conc_ranges, derive, one_hash_seed, parse_flags

SEED = {"PYTHONHASHSEED": "0"}


def point(arm: str = "none", conc: int = 1, ep: int = 1, tp: int = 8, env: dict[str, str] | None = None,
          **flags: object) -> Observed:  # fmt: skip
    named: Flags = {"--" + k.replace("_", "-"): v for k, v in flags.items()}  # type: ignore[misc]  # test values
    return Observed(
        f"{arm}-tp{tp}-ep{ep}-c{conc}", arm, tp, ep, ep > 1, conc, named, dict(SEED) if env is None else env
    )


def test_base_is_what_every_point_shares() -> None:
    got = derive([point(conc=1, block_size=128, trust_remote_code=True), point(conc=8, block_size=128,
                                                                              trust_remote_code=True)])  # fmt: skip
    assert got.flags == {"--block-size": 128, "--trust-remote-code": True}
    assert not got.misfits and not got.per_conc and not got.ep_flags
    assert got.env_policy == SEED


def test_arm_delta_adds_and_removes_by_name() -> None:
    points = [
        point("none", 1, gpu_memory_utilization=0.9, enable_cumem_allocator=True),
        point("none", 4, gpu_memory_utilization=0.9, enable_cumem_allocator=True),
        point("lmcache", 1, gpu_memory_utilization=0.85, env={**SEED, "LMCACHE_X": "1"}),
        point("lmcache", 4, gpu_memory_utilization=0.85, env={**SEED, "LMCACHE_X": "1"}),
    ]
    got = derive(points)
    assert got.flags == {"--gpu-memory-utilization": 0.9, "--enable-cumem-allocator": True}
    assert got.arms["none"].add == {} and got.arms["none"].remove == []
    lm = got.arms["lmcache"]
    assert lm.add == {"--gpu-memory-utilization": 0.85}
    assert sorted(lm.remove) == ["--enable-cumem-allocator", "--gpu-memory-utilization"]
    assert lm.env == {"LMCACHE_X": "1"} and got.env_policy == SEED


def test_ep_flags_are_present_exactly_on_ep_points() -> None:
    points = [point(conc=1), point(conc=64, ep=8, moe_backend="mega"), point(conc=128, ep=8, moe_backend="mega")]
    got = derive(points)
    assert got.ep_flags == {"--moe-backend": "mega"} and got.flags == {} and not got.misfits


def test_per_conc_contiguous_ranges() -> None:
    spec = [{"k": 3}, {"k": 3}, {"k": 2}, {"k": 2}, {"k": 1}]
    points = [point(conc=c, speculative_config=s) for c, s in zip((1, 4, 8, 16, 32), spec, strict=True)]
    got = derive(points)
    assert [(r.conc_min, r.conc_max, r.flags) for r in got.per_conc] == [
        (None, 4, {"--speculative-config": {"k": 3}}),
        (8, 16, {"--speculative-config": {"k": 2}}),
        (32, None, {"--speculative-config": {"k": 1}}),
    ]
    assert "--speculative-config" not in got.flags


def test_conc_ranges_refuse_two_values_at_one_conc() -> None:
    assert conc_ranges([(1, "a"), (1, "b")]) is None
    assert conc_ranges([(1, "a"), (2, "a")]) == [(None, None, "a")]


def test_max_num_seqs_per_conc_and_capture_sizes() -> None:
    def at(conc: int) -> Observed:
        seqs = 2 * conc
        sizes = [3 * n for n in range(1, seqs + 1)]
        return point(conc=conc, max_num_seqs=seqs, max_cudagraph_capture_size=seqs,
                     compilation_config={"cudagraph_capture_sizes": sizes, "mode": 0})  # fmt: skip

    got = derive([at(1), at(4), at(16)])
    assert got.max_num_seqs_per_conc == 2
    assert got.capture_size_is_max_num_seqs and got.capture_tokens_per_seq == 3
    assert got.flags == {"--compilation-config": {"mode": 0}} and not got.misfits


def test_a_fixed_max_num_seqs_is_a_base_flag() -> None:
    got = derive([point(conc=1, max_num_seqs=256), point(conc=8, max_num_seqs=256)])
    assert got.max_num_seqs_per_conc is None and got.flags == {"--max-num-seqs": 256}


def test_a_flag_no_rule_fits_is_a_misfit() -> None:
    # follows TP, not the arm, EP or concurrency: the model has no rule for it
    points = [point(conc=1, tp=4, x=1), point(conc=1, tp=8, x=2)]
    got = derive(points)
    assert [m.item for m in got.misfits] == ["--x"]
    assert "none-tp4-ep1-c1=1" in got.misfits[0].line()


def test_arms_setting_two_hash_seeds_are_refused() -> None:
    points = [point("none", env={"PYTHONHASHSEED": "0"}), point("lmcache", env={"PYTHONHASHSEED": "42"})]
    _, problem = one_hash_seed(points, "0")
    assert problem is not None and "none: 0" in problem and "lmcache: 42" in problem


def test_an_arm_without_a_hash_seed_gets_the_one_its_sibling_arms_set() -> None:
    points = [point("none", env={}), point("vllm-simple", env={"PYTHONHASHSEED": "42", "A": "1"})]
    seeded, problem = one_hash_seed(points, "0")
    assert problem is None
    assert [p.env for p in seeded] == [{"PYTHONHASHSEED": "42"}, {"PYTHONHASHSEED": "42", "A": "1"}]
    assert derive(seeded).env_policy == {"PYTHONHASHSEED": "42"}


def test_no_arm_setting_a_hash_seed_gets_the_default() -> None:
    seeded, problem = one_hash_seed([point("none", env={}), point("lmcache", env={})], "7")
    assert problem is None and {p.env["PYTHONHASHSEED"] for p in seeded} == {"7"}


def test_parse_flags_reads_values_bare_flags_and_json() -> None:
    positional, flags = parse_flags(["serve", "/m", "--tp=8", "--x", "0.90", "--bare", "--j", '{"a":[1]}', "--s", "v"])
    assert positional == ["serve", "/m"]
    assert flags == {"--tp": 8, "--x": 0.9, "--bare": True, "--j": {"a": [1]}, "--s": "v"}


def test_engine_env_on_concurrency_ranges_is_a_per_conc_rule() -> None:
    # dsv4-fp4-b200's shape: an allocator setting from conc 32 up
    alloc = {**SEED, "PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    points = [point(conc=c, env=alloc if c >= 32 else dict(SEED)) for c in (1, 4, 32, 64)]
    got = derive(points)
    assert not got.misfits and got.env_policy == SEED
    assert [(r.conc_min, r.conc_max, r.flags, r.env) for r in got.per_conc] == [
        (32, None, {}, {"PYTORCH_ALLOC_CONF": "expandable_segments:True"})
    ]


def test_engine_env_following_nothing_is_a_misfit() -> None:
    points = [point(conc=1, env={**SEED, "X": "a"}), point(conc=1, env={**SEED, "X": "b"})]
    assert [m.item for m in derive(points).misfits] == ["env X"]
