#!/usr/bin/env bash
# Create or refresh slurmx's own venv (outside the checkout, reused across runs) and print its path.
# Usage: scripts/dev-env.sh   -> prints the venv's bin directory on the last line.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
stack=${SLURMX_STACK:-/opt/slurmx-stack}
venv=${SLURMX_VENV:-$stack/venvs/slurmx}
if [ ! -x "$venv/bin/python" ]; then
  echo "slurmx: creating $venv" >&2
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --progress-bar off --upgrade pip >&2
fi
# Editable install of *this* checkout: CI clones elsewhere, so this runs every time (seconds when cached).
"$venv/bin/pip" install -q --progress-bar off -e "$here[test,plots,report]" >&2
echo "$venv/bin"
