"""Pydantic model of a serving recipe file; flags are a mapping so each is named exactly once."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, field_validator, model_validator

from slurmx import engines
from slurmx.config.master import kebab
from slurmx.engines import RecipeSizing
from slurmx.flags import Flags

# Hashing env decides prefix-cache block keys: it belongs to the recipe's one env policy, never to an arm
# (each engine adds its own: Engine.hash_env).
HASH_ENV = frozenset({"PYTHONHASHSEED", "LMCACHE_HASH_SEED"}).union(*(e.hash_env for e in engines.REGISTRY.values()))
# the default engine's, which recipes that name no other serve
TOOL_CALL_FLAGS = engines.default().tool_call_flags
REPLAY_ENV = {
    "AIPERF_DATASET_CONFIGURATION_TIMEOUT": "1800",
    "AIPERF_SERVICE_PROFILE_CONFIGURE_TIMEOUT": "1800",  # aiperf requires >= the dataset timeout
    "AIPERF_DATASET_WEKA_LIVE_ASSISTANT_RESPONSES": "0",  # pre-canned assistant replay
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, alias_generator=kebab, populate_by_name=True)


class Match(_Model):
    """Which points a recipe serves: every field that decides what runs. InferenceX picks its script by
    prefix, precision, hardware, framework and spec-decoding (the `_mtp` suffix); the flags in it are
    tuned for one model and one image, and it branches on DCP. A point must equal all of them."""

    model: str
    model_prefix: str
    precision: str
    framework: str
    # the slurmx engine the recipe is written for (engines' registry key): the framework's own unless a Dynamo
    # key's srt-slurm recipes serve directly with another (config/srt.py's served_framework decides, per point)
    engine: str
    runner: str
    image: str
    spec_decoding: str = "none"
    dcp_size: PositiveInt = 1

    FIELDS: ClassVar[tuple[str, ...]] = (
        "model", "model_prefix", "precision", "framework", "engine", "runner", "image", "spec_decoding", "dcp_size",
    )  # fmt: skip

    @model_validator(mode="before")
    @classmethod
    def _engine_is_the_frameworks(cls, data: Any) -> Any:
        if isinstance(data, dict) and "engine" not in data and "framework" in data:
            return {**data, "engine": data["framework"]}
        return data

    def values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.FIELDS)


class ConcRule(_Model):
    """Flags and engine env that apply when conc-min <= conc <= conc-max (e.g. speculative depth by load, an
    allocator setting at high concurrency), on the points whose data-parallel attention is `dp-attn` when set
    (a script's `if DP_ATTENTION` branch: DEP's scheduler flags, the allreduce of pure TP), and only at one worker
    TP size or on one arm where `tp` or `arm` is given (InferenceX's multinode rows each carry their own srt-slurm
    recipe)."""

    conc_min: PositiveInt | None = None
    conc_max: PositiveInt | None = None
    dp_attn: bool | None = None  # None: DP-attention and other points alike
    tp: PositiveInt | None = None  # the worker's tensor parallelism (a multinode point's prefill worker)
    arm: str | None = None  # the kv-offload arm ("none" without one)
    flags: Flags = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)  # the engine's env on these concurrencies
    # typed replay fields (REPLAY_FIELDS, kebab-case) on these concurrencies: a script that sets one by its CONC
    # (dsv4_fp4_mi355x_sglang_mtp.sh: AGENTIC_WARMUP_GRACE_PERIOD=3600 from conc 32)
    replay: dict[str, int | str | None] = Field(default_factory=dict)

    @field_validator("replay")
    @classmethod
    def _typed_replay_fields(cls, replay: dict[str, int | str | None]) -> dict[str, int | str | None]:
        names = {kebab(name): name for name in REPLAY_FIELDS.values()}
        unknown = sorted(set(replay) - set(names))
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not a typed replay field (have: {', '.join(sorted(names))})")
        try:
            Replay.model_validate({"kind": "production", **{names[k]: v for k, v in replay.items()}})
        except ValidationError as error:  # one line, at the rule's replay (not the Replay model's inner field)
            first = error.errors()[0]
            raise ValueError(f"{kebab(str(first['loc'][0]))}: {first['msg']}") from None
        return replay

    def replay_update(self) -> dict[str, int | str | None]:
        """The rule's replay fields by the Replay model's attribute names (what model_copy updates)."""
        names = {kebab(name): name for name in REPLAY_FIELDS.values()}
        return {names[k]: v for k, v in self.replay.items()}

    def applies(self, conc: int, dp_attn: bool, tp: int | None = None, arm: str | None = None) -> bool:
        within = (self.conc_min is None or conc >= self.conc_min) and (self.conc_max is None or conc <= self.conc_max)
        return (
            within
            and self.dp_attn in (None, dp_attn)
            and (self.tp is None or self.tp == tp)
            and (self.arm is None or self.arm == arm)
        )


class Engine(_Model):
    launcher: list[str] = Field(min_length=1)  # argv head; {engine_python} is the runtime's interpreter
    model_flag: str | None = None  # None: the model path is positional after the launcher
    block_size: PositiveInt
    health_path: str | None = None  # None: the engine's readiness path
    startup_timeout_s: PositiveInt = 1800
    flags: Flags
    max_num_seqs_per_conc: PositiveInt | None = None  # --max-num-seqs = this x conc
    # on data-parallel-attention points, when it differs there (default: max-num-seqs-per-conc)
    dp_attn_max_num_seqs_per_conc: PositiveInt | None = None
    # --max-cudagraph-capture-size = --max-num-seqs (decode graphs up to the largest batch)
    capture_size_is_max_num_seqs: bool = False
    # With drafting, capture sizes are in tokens: one graph per batch of 1..max-num-seqs sequences, each
    # (1 + K) tokens; --compilation-config cudagraph_capture_sizes = [n x this for n in 1..max-num-seqs].
    capture_tokens_per_seq: PositiveInt | None = None
    ep_flags: Flags = Field(default_factory=dict)  # added on points with expert parallelism (ep > 1)
    # A draft model (spec decoding) pre-downloaded under the runtime's model root; its local path is the
    # --speculative-config "model".
    draft_model: str | None = None
    per_conc: list[ConcRule] = Field(default_factory=list)

    def sizing(self, dp_attn: bool = False) -> RecipeSizing:
        """The sizing of a point with (or without) data-parallel attention."""
        per_conc = self.dp_attn_max_num_seqs_per_conc if dp_attn and self.dp_attn_max_num_seqs_per_conc else None
        return RecipeSizing(
            block_size=self.block_size,
            max_num_seqs_per_conc=per_conc or self.max_num_seqs_per_conc,
            capture_size_is_max_num_seqs=self.capture_size_is_max_num_seqs,
            capture_tokens_per_seq=self.capture_tokens_per_seq,
            draft_model=self.draft_model,
        )


# what the production replay builds itself (node/replay.py production_argv): not for a recipe's replay.flags
REPLAY_BUILT_FLAGS = frozenset({
    "--scenario", "--url", "--endpoint", "--endpoint-type", "--streaming", "--model", "--tokenizer",
    "--tokenizer-trust-remote-code", "--concurrency", "--benchmark-duration", "--random-seed",
    "--failed-request-threshold", "--trajectory-start-min-ratio", "--trajectory-start-max-ratio",
    "--warmup-grace-period", "--use-server-token-count", "--no-gpu-telemetry", "--num-dataset-entries",
    "--slice-duration", "--public-dataset", "--ui-type", "--output-artifact-dir", "--stats-interval",
    "--warmup-requests-per-lane", "--agentic-cache-warmup-duration", "--trace-idle-gap-cap-seconds",
    "--server-metrics",
})  # fmt: skip
# the built flags a typed replay field gives (recipes import reads them back from the script's replay)
REPLAY_FIELDS = {
    "--scenario": "scenario", "--public-dataset": "public_dataset", "--num-dataset-entries": "num_dataset_entries",
    "--random-seed": "random_seed", "--failed-request-threshold": "failed_request_threshold",
    "--warmup-grace-period": "warmup_grace_period_s", "--stats-interval": "stats_interval_s",
    "--warmup-requests-per-lane": "warmup_requests_per_lane", "--agentic-cache-warmup-duration": "cache_warmup_duration_s",
    "--trace-idle-gap-cap-seconds": "trace_idle_gap_cap_s",
}  # fmt: skip


class Replay(_Model):
    """How the agentic trace is replayed: InferenceX's production scenario, or a local synthetic trace."""

    kind: Literal["production", "synthetic"]
    scenario: str = "inferencex-agentx-mvp"
    public_dataset: str = "semianalysis_cc_traces_weka_062126"
    num_dataset_entries: PositiveInt = 393
    # The aiperf fork's warmup: requests per trajectory lane (newer), or a cache-warmup duration (older).
    warmup_requests_per_lane: int | None = Field(default=10, ge=0)
    cache_warmup_duration_s: PositiveInt | None = None
    stats_interval_s: PositiveInt | None = 30
    trace_idle_gap_cap_s: PositiveInt | None = 300
    # how long the fork waits for the warmup's responses before the measured window; "inf": until they are in
    warmup_grace_period_s: PositiveInt | Literal["inf"] = 1800
    # benchmark_lib.sh's replay env: dataset set-up and configure timeouts absorb many jobs starting at once.
    env: dict[str, str] = Field(default_factory=lambda: dict(REPLAY_ENV))
    failed_request_threshold: float = Field(default=0.10, ge=0, le=1)
    random_seed: int = 42
    # production: aiperf flags a script appends to benchmark_lib.sh's command (e.g. --apply-chat-template)
    flags: Flags = Field(default_factory=dict)
    # the commit of InferenceX's aiperf fork (its utils/aiperf submodule) the key's upstream replays with;
    # provisioning fails the point when the checkout it installs from is at another
    aiperf_revision: str | None = Field(default=None, pattern=r"^[0-9a-f]{7,40}$")
    # synthetic
    sessions_per_conc: PositiveInt = 2
    turns: PositiveInt = 3
    first_turn_tokens: PositiveInt = 600
    turn_delta_tokens: PositiveInt = 100
    shared_prefix_tokens: int = Field(default=512, ge=0)
    output_tokens: PositiveInt = 16
    block_tokens: PositiveInt = 128

    @field_validator("flags")
    @classmethod
    def _not_built(cls, flags: Flags) -> Flags:
        built = sorted(set(flags) & REPLAY_BUILT_FLAGS)
        if built:
            raise ValueError(f"{', '.join(built)}: the replay builds these itself (typed replay fields)")
        return flags


class RouterRecipe(_Model):
    """A request router in front of the engine: its own process, started when a point's config names
    this router, or on every data-parallel-attention point when `dp-attn` says so."""

    name: str  # the config's router name this serves, e.g. vllm-router
    version: str | None = None  # installed by the provisioning step when set
    # the image's own router runs, as the script starts it without installing one: provisioning installs none,
    # whatever version the point's config names (InferenceX hands that to the script only as ROUTER_METADATA)
    from_image: bool = False
    launcher: list[str] = Field(min_length=1)
    dp_attn: bool = False  # start it for every DEP point (one logical worker per DP rank)
    metrics_port: bool = False  # --prometheus-host/--prometheus-port on a port chosen on the node
    flags: Flags = Field(default_factory=dict)
    replay_env: dict[str, str] = Field(default_factory=dict)  # env the replay needs behind this router
    health_path: str = "/health"
    startup_timeout_s: PositiveInt = 300


class PipInstall(_Model):
    """Packages the script pip-installs before serving beyond any pin slurmx types (a nightly image's missing
    runtime deps); provisioning installs them where the runtime installs (the job's own container)."""

    packages: list[str] = Field(min_length=1)
    flags: list[str] = Field(default_factory=list)  # pip's options, as the script passes them


class UpstreamScript(_Model):
    """A file of InferenceX's tree the script runs before serving (a container patch script): provisioning runs
    it, by the same program and arguments, from the checkout the runtime mounts, once it is the file reviewed."""

    path: str = Field(pattern=r"^[^/].*[^/]$")  # relative to the InferenceX checkout
    program: Literal["bash", "python3", "python"] = "bash"
    args: list[str] = Field(default_factory=list)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")  # of the file imported; another file fails the point


class EditGuard(_Model):
    """The script's test that an image file still needs its edit: `sed SED FILE | grep GREP` finding nothing."""

    sed: list[str] = Field(min_length=1)  # sed's arguments before the file (-n and the lines it prints)
    grep: list[str] = Field(min_length=1)  # grep's arguments (-q and what the edited file holds)


class ImageEdit(_Model):
    """A file of the engine's image the script edits in place before serving (qwen3.5_fp8_h200_mtp.sh's `sed -i` of
    SGLang's multi_tokenizer_mixin.py): provisioning makes the same edit in the job's container, guarded as the
    script guards it (a file already edited is left as it is), and fails the point where the file is not there."""

    path: str = Field(pattern=r"^/")  # in the image
    sed: list[str] = Field(min_length=1)  # sed's arguments before the file (-i and its script)
    unless: EditGuard | None = None


class FindEnv(_Model):
    """An env variable the script sets to the first file a `find` in the image finds, exported only when it finds
    one (dsv4_fp4_b{200,300}_sglang_mtp.sh's TRITON_PTXAS_PATH: the ptxas of the image's CUDA for Triton):
    provisioning runs the same search in the job's runtime and gives what it finds to the engine."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # where find starts, as the script spells them: absolute, globs expanded by bash in the job's runtime
    roots: list[str] = Field(min_length=1)
    tests: list[str] = Field(min_length=1)  # find's expression after the roots (-type f -name ptxas -perm -u+x)

    @field_validator("roots")
    @classmethod
    def _plain_paths(cls, roots: list[str]) -> list[str]:
        # they reach bash unquoted (for their globs): a path with anything else in it would be run as shell
        bad = [r for r in roots if not re.fullmatch(r"/[A-Za-z0-9_.+*?/\[\]-]*", r)]
        if bad:
            raise ValueError(f"{', '.join(bad)}: not an absolute path or glob (letters, digits, _.+-/ and *?[])")
        return roots


class Provision(_Model):
    """What the script provisions beyond the typed pins (backend, router): `recipes import` reads it."""

    pip: list[PipInstall] = Field(default_factory=list)
    scripts: list[UpstreamScript] = Field(default_factory=list)
    edits: list[ImageEdit] = Field(default_factory=list)
    find_env: list[FindEnv] = Field(default_factory=list)


class Recipe(_Model):
    recipe: str
    match: Match
    scenario: Literal["agentic-coding", "fixed-seq-len"] = "agentic-coding"
    model_path: str | None = None  # under the runtime's model-root; default: the config's model name
    served_model_name: str | None = None
    # the model's hub commit the upstream run pins (srt recipes' identity.model.revision); a full sha, which the hub
    # cache names its snapshot by; provisioning fetches and checks it, the engine loads it (revision_flag)
    model_revision: str | None = Field(default=None, pattern=r"^[0-9a-f]{40}$")
    # the job's wall-clock limit where the upstream run asks its own (srt-slurm's slurm.time_limit); default: the profile's
    time_limit_min: PositiveInt | None = None
    env_policy: dict[str, str]  # shared by every arm of this recipe
    engine: Engine
    # arm name (a registered kv-offload backend) -> its fields; typed by the backend when the recipe loads
    arms: dict[str, dict[str, Any]]
    replay: Replay
    router: RouterRecipe | None = None
    provision: Provision = Field(default_factory=Provision)

    @field_validator("env_policy")
    @classmethod
    def _hash_env_in_policy(cls, env_policy: dict[str, str]) -> dict[str, str]:
        # A field validator, so the error is located at env-policy (file:line), not at the file.
        if "PYTHONHASHSEED" not in env_policy:
            raise ValueError("env-policy must set PYTHONHASHSEED: every arm hashes prefixes the same way")
        return env_policy
