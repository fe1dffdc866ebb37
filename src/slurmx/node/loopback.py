"""HTTP to servers on this node: loopback only, never through a proxy (http_proxy would test the wrong server)."""

from __future__ import annotations

import http.client
import urllib.error
import urllib.parse
import urllib.request

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def require_loopback(url: str) -> None:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "http" or parsed.hostname not in LOOPBACK_HOSTS:
        raise ValueError(f"URL must be http:// on loopback ({sorted(LOOPBACK_HOSTS)}), got {url!r}")


def request(url: str, *, method: str = "GET", timeout_s: float = 10.0, max_bytes: int = 64 << 20) -> tuple[int, bytes]:
    """(status, body) of one request; raises OSError (URLError, HTTPError) or HTTPException on failure."""
    require_loopback(url)
    data = b"" if method == "POST" else None
    with _NO_PROXY.open(urllib.request.Request(url, data=data, method=method), timeout=timeout_s) as response:
        return int(response.status), response.read(max_bytes)


def get_text(url: str, timeout_s: float = 10.0) -> str | None:
    """The body of a 2xx GET, or None if the server did not give one."""
    try:
        status, body = request(url, timeout_s=timeout_s)
    except (OSError, http.client.HTTPException):
        return None
    return body.decode("utf-8", "replace") if 200 <= status < 300 else None


def post_ok(url: str, timeout_s: float = 30.0) -> bool:
    try:
        status, _ = request(url, method="POST", timeout_s=timeout_s)
    except (OSError, http.client.HTTPException):
        return False
    return 200 <= status < 300


def probe_error(exc: BaseException) -> str:
    """What a failed probe saw, in a few words."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return f"{type(exc).__name__}: {exc}"
