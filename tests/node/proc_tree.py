"""A process tree for the supervisor tests (run as a script, never imported by the package).

usage: proc_tree.py PIDFILE PORT MODE   (MODE: stay | escape | stubborn)
Starts a child, a grandchild under a second child, optionally a grandchild that leaves the process
group (escape), serves GET /health -> "ok" on 127.0.0.1:PORT, and writes all pids to PIDFILE.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

SLEEP = "import time; time.sleep(60)"
SPAWN_DEEP = (
    f"import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', {SLEEP!r}]); "
    "print(p.pid, flush=True); p.wait()"
)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.path == "/health"
        body = b"ok" if ok else b"not found"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    pidfile, port, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    child = subprocess.Popen([sys.executable, "-c", SLEEP])
    middle = subprocess.Popen([sys.executable, "-c", SPAWN_DEEP], stdout=subprocess.PIPE, text=True)
    assert middle.stdout is not None
    deep = int(middle.stdout.readline())
    escapee = None
    if mode == "escape":
        escapee = subprocess.Popen([sys.executable, "-c", SLEEP], start_new_session=True).pid
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # after the spawns, so only this process ignores it
    server = http.server.HTTPServer(("127.0.0.1", port), Health)
    tmp = pidfile.with_suffix(".tmp")
    tmp.write_text(json.dumps({"tree": [os.getpid(), child.pid, middle.pid, deep], "escapee": escapee}))
    tmp.replace(pidfile)
    print("serving", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
