"""The importer's derivation rules on small hand-made point sets (slurmx.upstream.derive): pure, fast."""

from __future__ import annotations

from slurmx.flags import Flags
from slurmx.upstream.derive import Observed, conc_ranges, derive, one_hash_seed, parse_flags

SEED = {"PYTHONHASHSEED": "0"}


def point(arm: str = "none", conc: int = 1, ep: int = 1, tp: int = 8, env: dict[str, str] | None = None,
          dp: bool | None = None, **flags: object) -> Observed:  # fmt: skip
    named: Flags = {"--" + k.replace("_", "-"): v for k, v in flags.items()}  # type: ignore[misc]  # test values
    dp_attn = ep > 1 if dp is None else dp
    return Observed(
        f"{arm}-tp{tp}-ep{ep}{'-dp' * dp_attn}-c{conc}", arm, tp, ep, dp_attn, conc, named,
        dict(SEED) if env is None else env,
    )  # fmt: skip


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
    # follows TP and concurrency together: no one selector of a rule (arm, EP, DP side, conc range, TP) fits it
    points = [point(conc=1, tp=4, x=1), point(conc=2, tp=4, x=2), point(conc=1, tp=8, x=2), point(conc=2, tp=8, x=1)]
    got = derive(points)
    assert [m.item for m in got.misfits] == ["--x"]
    assert "none-tp4-ep1-c1=1" in got.misfits[0].line()


def test_a_flag_that_follows_tp_alone_is_one_rule_per_tp() -> None:
    got = derive([point(conc=1, tp=4, x=1), point(conc=1, tp=8, x=2)])
    assert got.misfits == []
    assert [(r.tp, r.flags) for r in got.per_conc] == [(4, {"--x": 1}), (8, {"--x": 2})]


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


def test_flags_and_env_that_follow_dp_attention_are_rules_of_their_side() -> None:
    # dsv4_fp4_mi355x_vllm_mtp.sh's DEP scheduler flags (DP attention with ep 1, so no EP rule) and b300's pure-TP
    # allreduce branch; conc 64 runs on both sides, so no concurrency range could hold them
    dep = {"prefill_schedule_interval": 8, "long_prefill_token_threshold": 16384}
    alloc, allreduce = {**SEED, "PYTORCH_ALLOC_CONF": "expandable_segments:True"}, {**SEED, "ALLREDUCE": "1"}
    points = [*(point(conc=c, env=allreduce, disable_custom_all_reduce=True) for c in (1, 8, 64)),
              point(conc=64, dp=True, env=alloc, **dep), point(conc=128, dp=True, env=alloc, **dep)]  # fmt: skip
    got = derive(points)
    assert not got.misfits and not got.ep_flags and got.env_policy == SEED
    assert [(r.conc_min, r.conc_max, r.dp_attn, r.flags, r.env) for r in got.per_conc] == [
        (None, None, False, {"--disable-custom-all-reduce": True}, {"ALLREDUCE": "1"}),
        (None, None, True, {"--prefill-schedule-interval": 8, "--long-prefill-token-threshold": 16384},
         {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}),
    ]  # fmt: skip


def test_a_flag_on_concurrency_ranges_of_one_dp_attention_side() -> None:
    # DEP4 at 48-64 and DEP8 from 128 take another prefill budget; pure TP at 64 passes none
    points = [point(conc=64), point(conc=128), point(conc=64, dp=True, max_num_batched_tokens=8192),
              point(conc=128, dp=True, max_num_batched_tokens=16384)]  # fmt: skip
    got = derive(points)
    assert not got.misfits
    assert [(r.conc_min, r.conc_max, r.dp_attn, r.flags) for r in got.per_conc] == [
        (None, 64, True, {"--max-num-batched-tokens": 8192}),
        (128, None, True, {"--max-num-batched-tokens": 16384}),
    ]


def test_max_num_seqs_takes_its_own_k_on_dp_attention_points() -> None:
    # MAX_NUM_SEQS=$((2 * CONC)), and "$CONC" under DP_ATTENTION: one k per side
    points = [point(conc=c, max_num_seqs=2 * c) for c in (1, 8, 64)] + [point(conc=64, dp=True, max_num_seqs=64)]
    got = derive(points)
    assert (got.max_num_seqs_per_conc, got.dp_attn_max_num_seqs_per_conc) == (2, 1)
    assert not got.misfits and not got.per_conc and "--max-num-seqs" not in got.flags
    one_side = derive([point(conc=c, max_num_seqs=2 * c) for c in (1, 8)])
    assert (one_side.max_num_seqs_per_conc, one_side.dp_attn_max_num_seqs_per_conc) == (2, None)
