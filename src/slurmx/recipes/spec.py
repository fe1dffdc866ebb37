"""ServingSpec: everything the node needs to start a point's servers and replay, fixed at submit time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from slurmx import backends, engines
from slurmx.backends import AnyBackendSpec, Backend
from slurmx.engines import DEFAULT as DEFAULT_ENGINE
from slurmx.engines import Engine
from slurmx.recipes.model import Provision, Replay

DRAFT_PATH = "{draft_model_path}"  # replaced by the draft's local path where the runtime is known
# a flag naming the served model's own path (--tokenizer-path) or a file in it (trtllm-serve's --chat_template
# {model_path}/chat_template.jinja): replaced by the runtime's model path on the node
MODEL_PATH = "{model_path}"
# a flag naming a file of InferenceX's checkout (dsv4_fp4_b200_sglang_mtp.sh's --chat-template
# "$SCRIPT_DIR/../chat_templates/deepseek_v4_thinking.jinja"): {inferencex}/PATH, PATH relative to the checkout as
# the script spells it; replaced by where the runtime mounts the checkout on the node
INFERENCEX_FILE = "{inferencex}"


@dataclass(frozen=True)
class Implementation:
    """What serves a point in slurmx, looked up once: its engine and its KV-offload backend."""

    engine: Engine
    backend: Backend[Any]


class RouterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str | None = None
    launcher: list[str]
    flags: list[str]  # without the ports and worker URLs (chosen on the node)
    metrics_port: bool = False  # add --prometheus-host/--prometheus-port (a port chosen on the node)
    replay_env: dict[str, str] = {}
    health_path: str
    startup_timeout_s: int
    # how it is told where to listen and whom to route to: a router's --host/--port/--worker-urls; an engine's own
    # frontend (Dynamo's) listens by its own flags and finds the workers itself (worker_urls_flag None)
    host_flag: str = "--host"
    port_flag: str = "--port"
    worker_urls_flag: str | None = "--worker-urls"
    env: dict[str, str] = {}  # its own env (a frontend's, as its recipe sets it)


class ServingSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    recipe: str
    recipe_file: str
    recipe_sha256: str
    engine: str = DEFAULT_ENGINE  # a registered serving engine (slurmx.engines), the config's framework
    launcher: list[str]
    model_flag: str | None
    model: str  # path under the runtime's model-root, or the config's model name
    model_revision: str | None = None  # the recipe's pinned hub commit of `model`
    served_model_name: str
    engine_flags: list[str]  # without host, port, model and kv-transfer-config (chosen on the node)
    env: dict[str, str]
    block_size: int
    health_path: str
    startup_timeout_s: int
    gpus: int  # GPUs the engine runs on (per node): the point's tp x pp x pcp, or a multinode node's share
    backend: AnyBackendSpec
    replay: Replay
    conc: int
    duration_s: int
    router: RouterSpec | None = None
    draft_model: str | None = None  # under the runtime's model root; DRAFT_PATH in engine_flags stands for it
    nodes: int = 1  # > 1: one engine across nodes, the head serving and the others headless (docs/multinode.md)
    ranks_per_node: int = 1  # data-parallel engine ranks on each node of a multinode engine
    provision: Provision = Provision()  # the recipe's own provisioning beyond the typed pins
    time_limit_min: int | None = None  # the recipe's own Slurm time limit, over the cluster profile's

    @property
    def implementation(self) -> Implementation:
        """The engine and backend this spec names, from their registries: the one place the node and render
        look them up by name."""
        return Implementation(engines.get(self.engine), backends.get(self.backend.name))

    def provenance_free(self) -> dict[str, object]:
        """The spec without where the recipe came from: equal when the same thing would run."""
        return self.model_dump(exclude={"recipe_file", "recipe_sha256"})
