"""NVIDIA Dynamo's aggregated deployment, what every Dynamo worker shares whatever its engine: the frontend process
that serves the OpenAI API (`python3 -m dynamo.frontend`) and how it finds the worker behind it.

Measured with ai-dynamo 1.6.1 (docs/local-stack.md, "Dynamo frontend + a real dynamo.vllm worker"): file discovery
(`DYN_DISCOVERY_BACKEND=file`, the store a directory named by `DYN_FILE_KV`) lets the frontend find the worker
without etcd or NATS; the worker serves no OpenAI API, only Dynamo's system port (`DYN_SYSTEM_PORT`: `/health`,
`/metrics` with the engine's own metric families). The worker modules are their engines' (`engines/<engine>.py`).
"""

from __future__ import annotations

from pathlib import Path

from slurmx.engines.base import Frontend

# srt-slurm's frontend.type for Dynamo's own frontend; the frontend's own readiness answers before any worker
# registers, so it starts after the worker is ready (the worker's system /health)
FRONTEND = Frontend(
    launcher=("python3", "-m", "dynamo.frontend"),
    host_flag="--http-host",
    port_flag="--http-port",
    health_path="/health",
    startup_timeout_s=600,
)
SYSTEM_PORT_ENV = "DYN_SYSTEM_PORT"  # read as an i16: a port above 32767 stops the worker at start
DISCOVERY_DIR = "dynamo-discovery"  # the point's own store: two deployments on one node never see each other
# every Dynamo listener the frontend and the worker reach each other on stays on loopback (both on the head node)
LOOPBACK_HOSTS = ("DYN_TCP_RPC_HOST", "DYN_EVENT_PLANE_HOST", "DYN_SYSTEM_HOST", "DYN_TCP_RESPONSE_STREAM_HOST")


def port_env(port: int) -> dict[str, str]:
    return {SYSTEM_PORT_ENV: str(port)}


def deployment_env(run_dir: Path) -> dict[str, str]:
    return {
        "DYN_DISCOVERY_BACKEND": "file",
        "DYN_FILE_KV": str(run_dir / DISCOVERY_DIR),
        **dict.fromkeys(LOOPBACK_HOSTS, "127.0.0.1"),
    }


class DynamoWorker:
    """What a Dynamo aggregated worker changes of its engine (mixed in before the engine's class): Dynamo's frontend
    serves the API, the worker takes no host or port, its own port is its system port, and it has no HTTP reset."""

    model_flag: str | None
    frontend: Frontend | None = FRONTEND
    srt_direct_launch: tuple[str, ...] = ()  # never served directly: Dynamo's frontend serves

    def argv(
        self, head: list[str], model: str, model_flag: str | None, served_model_name: str, port: int,
        flags: list[str],
    ) -> list[str]:  # fmt: skip
        # no host or port: the frontend serves the API; the worker's own port is its system port (port_env)
        flag = model_flag or self.model_flag or "--model"
        return [*head, flag, model, "--served-model-name", served_model_name, *flags]

    def port_env(self, port: int) -> dict[str, str]:
        return port_env(port)

    def deployment_env(self, run_dir: Path) -> dict[str, str]:
        return deployment_env(run_dir)

    def cache_reset_path(self) -> str | None:
        return None  # the worker's reset (clear_kv_blocks) is a Dynamo endpoint, not HTTP on its system port
