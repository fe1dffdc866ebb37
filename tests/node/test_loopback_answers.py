"""HTTP on loopback against a real server on 127.0.0.1: what each helper makes of 2xx, 4xx/5xx, a refused
connection, a body larger than asked for, and URLs that would leave the node."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from slurmx.node import loopback
from slurmx.node.ports import free_port


class _Answers(BaseHTTPRequestHandler):
    """GET/POST /<status>: that status with body `<METHOD> <status>`; a POST's body length is echoed."""

    def _answer(self) -> None:
        status = int(self.path.strip("/").split("/")[0] or 200)
        sent = int(self.headers.get("Content-Length") or -1)
        body = b"ok \xff" if self.path.endswith("/latin") else f"{self.command} {status} {sent}".encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = _answer  # noqa: N815
    do_POST = _answer  # noqa: N815

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_get_text_is_the_body_of_a_2xx_only(server: str) -> None:
    assert loopback.get_text(f"{server}/200") == "GET 200 -1"
    assert loopback.get_text(f"{server}/299") == "GET 299 -1"
    assert loopback.get_text(f"{server}/404") is None
    assert loopback.get_text(f"{server}/200/latin") == "ok \ufffd"  # not UTF-8: replaced, not an error
    assert loopback.get_text(f"http://127.0.0.1:{free_port()}/metrics", timeout_s=2) is None  # refused


def test_post_ok_posts_an_empty_body(server: str) -> None:
    assert loopback.request(f"{server}/200", method="POST") == (200, b"POST 200 0")
    assert loopback.post_ok(f"{server}/204") is True
    assert loopback.post_ok(f"{server}/500") is False
    assert loopback.post_ok(f"http://127.0.0.1:{free_port()}/x", timeout_s=2) is False


def test_a_body_is_read_up_to_the_bound(server: str) -> None:
    assert loopback.request(f"{server}/200", max_bytes=5) == (200, b"GET 2")


def test_urls_off_the_node_are_refused() -> None:
    for url in ("https://127.0.0.1:1/x", "http://10.0.0.1:8000/health", "ftp://localhost/x"):
        with pytest.raises(
            ValueError, match=r"^URL must be http:// on loopback \(\['127.0.0.1', '::1', 'localhost'\]\)"
        ):
            loopback.require_loopback(url)
    for url in ("http://localhost:1/x", "http://[::1]:1/x", "http://127.0.0.1/x"):
        loopback.require_loopback(url)  # nothing raised


def test_what_a_failed_probe_saw(server: str) -> None:
    import urllib.error

    with pytest.raises(urllib.error.HTTPError) as http_error:
        loopback.request(f"{server}/503")
    assert loopback.probe_error(http_error.value) == "HTTP 503"
    port = free_port()
    with pytest.raises(urllib.error.URLError) as refused:
        loopback.request(f"http://127.0.0.1:{port}/x", timeout_s=2)
    assert loopback.probe_error(refused.value) == "[Errno 111] Connection refused"
    assert loopback.probe_error(TimeoutError("timed out")) == "TimeoutError: timed out"


@pytest.fixture
def silent() -> Iterator[str]:
    """A server that takes connections (the kernel's backlog) and never answers; closed after 5 s at most, so a
    request that would wait forever ends with a reset instead of hanging the suite."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    closer = threading.Timer(5.0, sock.close)
    closer.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    closer.cancel()
    sock.close()


@pytest.mark.parametrize("call", ["request", "get_text", "post_ok"])
def test_a_server_that_never_answers_times_out_as_asked(silent: str, call: str) -> None:
    began = time.monotonic()
    if call == "request":
        with pytest.raises(TimeoutError):
            loopback.request(f"{silent}/x", timeout_s=0.3)
    elif call == "get_text":
        assert loopback.get_text(f"{silent}/x", timeout_s=0.3) is None
    else:
        assert loopback.post_ok(f"{silent}/x", timeout_s=0.3) is False
    assert time.monotonic() - began < 2.5
