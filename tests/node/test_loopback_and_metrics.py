"""Calls to servers on the node ignore proxies, and an engine /metrics scrape that does not parse fails
its point with that reason instead of crashing the job's server group."""

from __future__ import annotations

import http.server
import shutil
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmx.inputs import load_inputs
from slurmx.node import loopback
from slurmx.node.recorder import PointFailed, StageRecorder
from slurmx.node.serving_body import Member, Servers, aggregate
from slurmx.node.supervisor import probe
from slurmx.process import ServerPorts
from slurmx.results.aggregate import ReplayWindow
from slurmx.store.ledger import queue_point
from slurmx.store.lockfile import NodeLock
from slurmx.store.state import read_state
from slurmx.store.tree import ResultsTree
from slurmx.submit.resolved import resolve_points

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "data" / "aiperf" / "lmcache-replay"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self._answer(b"vllm:num_requests_running 0\n")

    def do_POST(self) -> None:
        self._answer(b"")

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_loopback_calls_bypass_an_unreachable_proxy(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    closed = socket_port_nobody_listens_on()
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{closed}")
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    # The environment is in force: a plain urllib call goes to the dead proxy and fails.
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{server}/metrics", timeout=5)
    assert loopback.get_text(f"{server}/metrics") == "vllm:num_requests_running 0\n"
    assert loopback.post_ok(f"{server}/reset_prefix_cache")
    assert probe(f"{server}/health", 5.0) == (True, "HTTP 200")


def test_non_loopback_urls_are_refused() -> None:
    with pytest.raises(ValueError, match="loopback"):
        loopback.request("http://example.invalid/metrics")


def socket_port_nobody_listens_on() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unparsable_metrics_scrape_fails_the_point_with_the_reason(tmp_path: Path) -> None:
    key = "tiny-fp32-local-vllm-agentic-lmcache"
    inputs = load_inputs(None, None, [key])
    item = resolve_points(inputs.points, inputs)[0]
    point = ResultsTree(tmp_path).sweep(key, "s1").point(item.point.point_id)
    record = item.record("s1")
    queue_point(point, record)
    shutil.copytree(SAMPLE, point.aiperf)
    member = Member(point, record, StageRecorder(point))
    assert record.serving is not None
    lock = NodeLock(image=item.point.image, runtime="venv", node="node01", slurmx_version="test")
    servers = Servers(plan=None, ports=ServerPorts(engine=1), processes=[], spec=record.serving, lock=lock)  # type: ignore[arg-type]  # aggregate reads only processes
    good = (SAMPLE / "engine_metrics_after.prom").read_text()
    window = ReplayWindow(
        1.0, 2.0, engine_metrics_before='vllm:prompt_tokens_total{model="tiny 12\n', engine_metrics_after=good
    )
    with pytest.raises(PointFailed) as caught:
        aggregate(member, window, servers)
    assert str(caught.value).startswith(
        "replay artifacts unusable: the engine's /metrics scrape does not parse: line 1"
    )
    assert not point.result_json.exists()
    state = read_state(point.state_json)
    assert state is not None and state.stage == "aggregate"  # run_group then records "failed" with this reason
