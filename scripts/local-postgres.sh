#!/usr/bin/env bash
# local-postgres.sh — a real PostgreSQL server on loopback for the index's tests (`slurmx history --db`).
#
#   scripts/local-postgres.sh up       install Debian's postgresql if missing, initdb once, start, create db
#   scripts/local-postgres.sh down     stop the server this script started (its data is kept)
#   scripts/local-postgres.sh status   exit 0 when it answers, 1 otherwise
#   scripts/local-postgres.sh url      print the URL the tests use (postgresql://slurmx@127.0.0.1:PORT/slurmx)
#
# As scripts/local-slurm.sh runs MariaDB: its own data directory under the state dir, owned by the postgres
# user (initdb refuses root), listening on 127.0.0.1 only with trust auth for the one local database.
# Environment (all optional):
#   SLURMX_LOCAL_STATE   state directory (default /var/lib/slurmx-local; the server's data is in postgres/)
#   SLURMX_PG_PORT       TCP port on 127.0.0.1 (default 15432, away from a system PostgreSQL)
set -euo pipefail

STATE_DIR=${SLURMX_LOCAL_STATE:-/var/lib/slurmx-local}
PORT=${SLURMX_PG_PORT:-15432}
PG_DIR=$STATE_DIR/postgres
DATA=$PG_DIR/data
RUN=$PG_DIR/run    # unix socket directory
LOG=$PG_DIR/server.log
DB=slurmx
ROLE=slurmx

say() { printf '[local-postgres] %s\n' "$*"; }
die() { say "ERROR: $*" >&2; exit 1; }

bindir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
  [[ -n $d && -x $d/pg_ctl ]] && echo "$d"
}

ensure_packages() {
  bindir >/dev/null && return 0
  [[ $(id -u) == 0 ]] || die "postgresql is not installed and this is not root: apt-get install postgresql"
  say "installing postgresql (Debian packages)"
  mkdir -p "$PG_DIR"
  { DEBIAN_FRONTEND=noninteractive apt-get update &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql; } >"$PG_DIR/apt.log" 2>&1 ||
    { tail -n 30 "$PG_DIR/apt.log" >&2; die "package install failed (log: $PG_DIR/apt.log)"; }
  # the package's own cluster is not ours: this script runs its own server on its own port
  command -v pg_ctlcluster >/dev/null && pg_lsclusters -h 2>/dev/null | while read -r ver name _; do
    pg_ctlcluster "$ver" "$name" stop 2>/dev/null || true
  done
}

as_pg() { if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }

answers() { "$(bindir)/pg_isready" -q -h 127.0.0.1 -p "$PORT"; }

cmd_up() {
  ensure_packages
  local bin; bin=$(bindir)
  mkdir -p "$PG_DIR" "$RUN"
  if [[ $(id -u) == 0 ]]; then chown postgres:postgres "$PG_DIR" "$RUN"; fi
  if [[ ! -s $DATA/PG_VERSION ]]; then
    say "initdb $DATA"
    as_pg "$bin/initdb" -D "$DATA" -U postgres -A trust --no-instructions >"$PG_DIR/initdb.log" 2>&1 ||
      { tail -n 20 "$PG_DIR/initdb.log" >&2; die "initdb failed"; }
  fi
  if ! answers; then
    as_pg "$bin/pg_ctl" -D "$DATA" -l "$LOG" -w -t 30 \
      -o "-c listen_addresses=127.0.0.1 -p $PORT -k $RUN -c fsync=off" start >/dev/null ||
      { tail -n 20 "$LOG" >&2; die "postgres did not start"; }
  fi
  local psql=("$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qtA)
  [[ $("${psql[@]}" -c "SELECT 1 FROM pg_roles WHERE rolname='$ROLE'") == 1 ]] || "${psql[@]}" -c "CREATE ROLE $ROLE LOGIN CREATEDB"
  [[ $("${psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname='$DB'") == 1 ]] || "${psql[@]}" -c "CREATE DATABASE $DB OWNER $ROLE"
  say "up: $(cmd_url)"
}

cmd_down() {
  local bin; bin=$(bindir) || { say "not installed"; return 0; }
  if [[ -s $DATA/postmaster.pid ]]; then as_pg "$bin/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null && say "down"; fi
}

cmd_status() { if bindir >/dev/null && answers; then echo "up: $(cmd_url)"; else echo "DOWN"; return 1; fi; }
cmd_url() { echo "postgresql://$ROLE@127.0.0.1:$PORT/$DB"; }

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  url) cmd_url ;;
  *) echo "usage: $0 up|down|status|url" >&2; exit 2 ;;
esac
