"""Test-only engine launcher: vLLM's OpenAI server started without the --kv-transfer-config that slurmx
put on its argv (the way a site wrapper or a stale launcher script could lose it).

slurmx's own record of the argv still shows the connector, so only the evidence can tell: the engine
receives no token from the offload tier, and the gate must say "offload tier not engaged".
"""

from __future__ import annotations

import runpy
import sys

SERVER = "vllm.entrypoints.openai.api_server"
FLAG = "--kv-transfer-config"


def without_connector(argv: list[str]) -> list[str]:
    if FLAG not in argv:
        raise SystemExit(f"{FLAG} is not on the argv: this launcher is for offload arms only")
    index = argv.index(FLAG)
    return argv[:index] + argv[index + 2 :]


if __name__ == "__main__":  # vLLM's spawned workers import this file again: only the first run serves
    sys.argv = [SERVER, *without_connector(sys.argv[1:])]
    runpy.run_module(SERVER, run_name="__main__", alter_sys=True)
