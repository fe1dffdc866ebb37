"""A stand-in for vLLM's OpenAI server, for the job-body tests: real process, real HTTP, no model.

Takes vLLM's argv (uses only --port; `-c CODE` runs CODE, as the engine venv's python would), answers GET /health and GET /metrics (a real vLLM scrape from
tests/data) and POST /reset_prefix_cache. Environment, for the test to steer it:
  FAKE_ENGINE_DIR       where it writes engine.pid and appends one line per cache reset to resets
  FAKE_ENGINE_RESET     HTTP status for cache resets (default 200)
  FAKE_ENGINE_EXIT      exit at once with this code and a last log line, before serving
"""

from __future__ import annotations

import argparse
import http.server
import os
import sys
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "aiperf" / "lmcache-replay"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/health":
            self._answer(200, b"")
        elif self.path == "/metrics":
            self._answer(200, (SAMPLE / "engine_metrics_after.prom").read_bytes())
        else:
            self._answer(404, b"")

    def do_POST(self) -> None:
        if not self.path.startswith("/reset_prefix_cache"):
            self._answer(404, b"")
            return
        with (Path(os.environ["FAKE_ENGINE_DIR"]) / "resets").open("a") as log:
            log.write(self.path + "\n")
        self._answer(int(os.environ.get("FAKE_ENGINE_RESET", "200")), b"")

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> int:
    if sys.argv[1:2] == ["-c"]:  # as the engine environment's python: provisioning runs snippets with it
        os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args, _vllm_flags = parser.parse_known_args()
    if code := os.environ.get("FAKE_ENGINE_EXIT"):
        print("RuntimeError: fake engine refuses to start", flush=True)
        return int(code)
    (Path(os.environ["FAKE_ENGINE_DIR"]) / "engine.pid").write_text(str(os.getpid()))
    http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
