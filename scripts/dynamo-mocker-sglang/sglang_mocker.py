"""SIMULATOR, local stack only: SGLang's server argv answered by Dynamo's mocker, no model and no SGLang.

`python -m sglang_mocker` (from the Dynamo venv, this directory on PYTHONPATH: only a test's own cluster profile
puts it there; nothing shipped renders it) takes the argv slurmx renders for `python3 -m sglang.launch_server`,
starts `python -m dynamo.frontend` and `python -m dynamo.mocker --engine-type sglang` in its own process group
(docs/local-stack.md, "Dynamo mocker": file discovery, no etcd or NATS, loopback) and serves SGLang's endpoints on
--host/--port in front of them:
- `/health`: 200 once the frontend lists the served model, 503 before;
- `/metrics`: the mocker's own /metrics, its `sglang:` families only (its `dynamo_*` ones would make InferenceX's
  aggregation read the export as Dynamo-vLLM), under a comment naming the simulator;
- `/flush_cache`: 503, the mocker has no cache flush (a shared server's second point fails, not silently passes);
- `/get_model_info`: the model path, and `simulator`;
- anything else (`/v1/chat/completions`, ...): passed through to the frontend, streamed.
The SGLang flags it maps: --model-path, --served-model-name, --page-size (the mocker's block), --max-running-requests
(its max sequences), --chunked-prefill-size, --max-prefill-tokens, --schedule-policy; every other flag is listed in
the log as ignored.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from aiohttp import ClientSession, ClientTimeout, web

SIMULATOR = "dynamo.mocker"
# every Dynamo listener it can put on loopback (its ZMQ publishers still bind 0.0.0.0: docs/local-stack.md)
LOOPBACK = {
    "DYN_TCP_RPC_HOST": "127.0.0.1", "DYN_EVENT_PLANE_HOST": "127.0.0.1", "DYN_SYSTEM_HOST": "127.0.0.1",
    "DYN_TCP_RESPONSE_STREAM_HOST": "127.0.0.1",
}  # fmt: skip
# SGLang's flag -> the mocker's, where the mocker simulates the same setting
MAPPED = {
    "--page-size": "--block-size", "--max-running-requests": "--max-num-seqs",
    "--chunked-prefill-size": "--sglang-chunked-prefill-size", "--max-prefill-tokens": "--sglang-max-prefill-tokens",
    "--schedule-policy": "--sglang-schedule-policy",
}  # fmt: skip
HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}


def free_port() -> int:
    """A free loopback port under 32768: Dynamo reads DYN_SYSTEM_PORT as an i16."""
    for port in random.sample(range(20000, 32768), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32767")


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="sglang_mocker", add_help=False)
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--served-model-name")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    for flag in MAPPED:
        parser.add_argument(flag)
    return parser.parse_known_args(argv)


def sglang_families(text: str) -> str:
    """The exposition text's lines of `sglang:` families (samples and their HELP/TYPE comments)."""
    kept = []
    for line in text.splitlines():
        name = line.split()[2] if line.startswith(("# HELP ", "# TYPE ")) and len(line.split()) > 2 else line
        if name.startswith("sglang:"):
            kept.append(line)
    return "\n".join([f"# SIMULATOR: {SIMULATOR} (ai-dynamo), no engine ran", *kept, ""])


def main(argv: list[str] | None = None) -> int:
    args, ignored = parse(list(sys.argv[1:] if argv is None else argv))
    served = args.served_model_name or args.model_path
    http = free_port()
    system = next(p for p in iter(free_port, None) if p != http)
    run = Path(tempfile.mkdtemp(prefix="sglang-mocker-"))
    env = {**os.environ, **LOOPBACK, "DYN_FILE_KV": str(run / "kv"), "HOME": str(run)}  # HOME: ~/.cache/dynamo
    mapped: list[str] = []
    for flag, theirs in MAPPED.items():
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None:
            mapped += [theirs, value]
    print(
        f"[SIMULATOR {SIMULATOR}] serving {served} on {args.host}:{args.port}; ignored SGLang flags: {ignored}",
        flush=True,
    )
    common = ["--discovery-backend", "file"]
    frontend = [sys.executable, "-m", "dynamo.frontend", "--http-host", "127.0.0.1", "--http-port", str(http), *common]
    mocker = [
        sys.executable,
        "-m",
        "dynamo.mocker",
        "--model-path",
        args.model_path,
        "--model-name",
        served,
        "--engine-type",
        "sglang",
        *mapped,
        *common,
    ]
    # the same process group as this one: whoever stops the engine's group stops both
    children = [
        subprocess.Popen(frontend, env=env, stdin=subprocess.DEVNULL),
        subprocess.Popen(mocker, env=env | {"DYN_SYSTEM_PORT": str(system)}, stdin=subprocess.DEVNULL),
    ]
    base, worker_metrics = f"http://127.0.0.1:{http}", f"http://127.0.0.1:{system}/metrics"

    async def serve() -> None:
        session = ClientSession(timeout=ClientTimeout(total=None), trust_env=False)

        async def health(request: web.Request) -> web.Response:
            try:
                async with session.get(f"{base}/v1/models") as r:
                    listed = served in await r.text()
            except OSError:
                listed = False
            return web.Response(status=200 if listed else 503, text="ok" if listed else "starting")

        async def metrics(request: web.Request) -> web.Response:
            async with session.get(worker_metrics) as r:
                text = await r.text()
            return web.Response(text=sglang_families(text), content_type="text/plain")

        async def flush(request: web.Request) -> web.Response:
            return web.Response(status=503, text=f"SIMULATOR {SIMULATOR}: no cache flush")

        async def model_info(request: web.Request) -> web.Response:
            return web.json_response({"model_path": args.model_path, "simulator": SIMULATOR})

        async def passthrough(request: web.Request) -> web.StreamResponse:
            headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
            async with session.request(
                request.method, base + request.rel_url.path_qs, headers=headers, data=await request.read()
            ) as upstream:
                response = web.StreamResponse(status=upstream.status)
                for key, value in upstream.headers.items():
                    if key.lower() not in HOP_HEADERS:
                        response.headers[key] = value
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response

        app = web.Application()
        app.router.add_get("/health", health)
        app.router.add_get("/metrics", metrics)
        app.router.add_route("*", "/flush_cache", flush)
        app.router.add_get("/get_model_info", model_info)
        app.router.add_route("*", "/{tail:.*}", passthrough)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, args.host, args.port).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        while not stop.is_set() and all(c.poll() is None for c in children):
            try:
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            except TimeoutError:
                continue
        await runner.cleanup()
        await session.close()

    try:
        asyncio.run(serve())
    finally:
        for child in children:
            if child.poll() is None:
                child.terminate()
        for child in children:
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()
        shutil.rmtree(run, ignore_errors=True)
    died = [c.args[2] for c in children if c.returncode not in (0, -signal.SIGTERM, None)]
    if died:
        print(f"[SIMULATOR {SIMULATOR}] stopped by its own exit: {died}", flush=True)
    return 1 if died else 0


if __name__ == "__main__":
    sys.exit(main())
