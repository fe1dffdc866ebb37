"""The processes of a disaggregated Dynamo point, as argv: rendered for review, never started.

KV transfer between prefill and decode workers (NIXL over RDMA, GPU memory to GPU memory) needs GPUs and
RDMA NICs; the CPU build has neither, so `submit` refuses these points and `render` prints what they would
start. Node 0 carries Dynamo's control plane (etcd for discovery, NATS for events) and the frontend the
replay talks to; prefill workers fill the first nodes, decode workers the following ones.

Flag names are Dynamo's documented ones: `python -m dynamo.frontend --http-port`, `--router-mode kv`
(Dynamo frontend configuration reference), `ETCD_ENDPOINTS` / `NATS_SERVER` for discovery and events. The
workers' own argv and env are their engine's (`engines.DISAGG_WORKERS`, by framework).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from slurmx import engines
from slurmx.config.master import WorkerSpec
from slurmx.engines import DisaggWorkers
from slurmx.plan import Point, server_gpus
from slurmx.process import COMMON_ENV, Process, loopback
from slurmx.runtimes import Runtime

Role = Literal["prefill", "decode"]

# InferenceX's fixed frontend port, as the other rendered points use; the control plane's stock ports.
FRONTEND_PORT = 8888
ETCD_PORT = 2379
NATS_PORT = 4222
HEAD_ADDRESS = "$HEAD_ADDRESS"  # node 0's address, read on the node at run time
NODE_ADDRESS = "$NODE_ADDRESS"  # this node's own address

WHY_NOT_SUBMITTED = (
    "KV transfer between prefill and decode workers (NIXL over RDMA, GPU to GPU) needs GPUs and RDMA NICs; "
    "slurmx renders these processes for review and does not submit them"
)


@dataclass(frozen=True)
class Placed:
    """One process on one node of the allocation (0: the head)."""

    node: int
    process: Process


def why_not_rendered(point: Point, gpus_per_node: int) -> str | None:
    """What keeps a disaggregated point's processes from being rendered here, or None."""
    workers = engines.disagg_workers(point.framework)
    if workers is None:
        have = ", ".join(sorted(engines.DISAGG_WORKERS))
        return f"framework {point.framework}: only {have} disaggregated points are rendered"
    if point.kv_p2p_transfer not in workers.kv_connectors:
        return f"kv-p2p-transfer {point.kv_p2p_transfer}: only {', '.join(workers.kv_connectors)} is rendered"
    for role, worker in (("prefill", point.prefill), ("decode", point.decode)):
        assert worker is not None
        if worker.num_worker and server_gpus(worker.tp, worker.pp, worker.pcp_size) > gpus_per_node:
            return (
                f"a {role} worker spanning nodes (tp*pp*pcp={server_gpus(worker.tp, worker.pp, worker.pcp_size)} "
                f"over gpus-per-node={gpus_per_node}); slurmx renders workers within one node"
            )
    return None


def control_plane_env() -> dict[str, str]:
    return {"ETCD_ENDPOINTS": f"http://{HEAD_ADDRESS}:{ETCD_PORT}", "NATS_SERVER": f"nats://{HEAD_ADDRESS}:{NATS_PORT}"}


def etcd_argv() -> list[str]:
    url = f"http://{HEAD_ADDRESS}:{ETCD_PORT}"
    return ["etcd", "--listen-client-urls", f"http://0.0.0.0:{ETCD_PORT}", "--advertise-client-urls", url,
            "--data-dir", "$POINT_DIR/etcd"]  # fmt: skip


def nats_argv() -> list[str]:
    return ["nats-server", "-js", "-p", str(NATS_PORT), "--store_dir", "$POINT_DIR/nats"]


def frontend_argv(port: int, kv_routing: bool) -> list[str]:
    argv = ["python3", "-m", "dynamo.frontend", "--http-host", "0.0.0.0", "--http-port", str(port)]
    return argv + (["--router-mode", "kv"] if kv_routing else [])


def worker_env(workers: DisaggWorkers) -> dict[str, str]:
    return {**COMMON_ENV, **control_plane_env(), **workers.worker_env(NODE_ADDRESS)}


def _workers(worker: WorkerSpec, first_node: int, gpus_per_node: int) -> list[tuple[int, int]]:
    """(node, index on that node) of each worker of one side, tiling nodes from `first_node`."""
    per_node = gpus_per_node // server_gpus(worker.tp, worker.pp, worker.pcp_size)
    return [(first_node + i // per_node, i % per_node) for i in range(worker.num_worker)]


def disagg_processes(point: Point, gpus_per_node: int, runtime: Runtime) -> list[Placed]:
    """Every process of the point by node, in start order: control plane and frontend on node 0, then the
    prefill workers, then the decode workers (each on nodes of its side's own)."""
    assert point.prefill is not None and point.decode is not None and point.kv_p2p_transfer is not None
    workers = engines.disagg_workers(point.framework)
    assert workers is not None, "why_not_rendered said it renders"
    model = runtime.model_path(point.model)
    kv_routing = point.router is not None and point.router.name == "dynamo-router"
    frontend_env = {**COMMON_ENV, **control_plane_env()}
    placed = [
        Placed(0, Process("etcd", runtime.wrap(etcd_argv(), "etcd"), dict(COMMON_ENV))),
        Placed(0, Process("nats", runtime.wrap(nats_argv(), "nats"), dict(COMMON_ENV))),
        Placed(0, Process("frontend", runtime.wrap(frontend_argv(FRONTEND_PORT, kv_routing), "frontend"),
                          frontend_env, loopback(FRONTEND_PORT, "/health"))),
    ]  # fmt: skip
    first = 0
    sides: tuple[tuple[Role, WorkerSpec], ...] = (("prefill", point.prefill), ("decode", point.decode))
    for role, worker in sides:
        slots = _workers(worker, first, gpus_per_node)
        for number, (node, _) in enumerate(slots):
            argv = workers.worker_argv(role, worker, model, point.model, point.kv_p2p_transfer)
            name = f"{role}-{number}"
            placed.append(Placed(node, Process(name, runtime.wrap(argv, name), worker_env(workers))))
        first = (slots[-1][0] + 1) if slots else first
    return placed
