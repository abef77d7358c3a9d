#!/usr/bin/env bash
# Servers the test suite needs beyond Docker: a throwaway PostgreSQL 15 for the PostgreSQL store.
#
#   source scripts/services.sh          # install if missing, start, export ATB_TEST_PG_URL
#   bash scripts/services.sh start      # the same, printing the URL (also written to $ATB_PG_DIR/url)
#   bash scripts/services.sh stop       # stop the server this script started
#   bash scripts/services.sh url        # print the URL of the running server
#
# The server is Debian's PostgreSQL (package `postgresql`), run as the unprivileged `postgres` user
# (initdb refuses root), listening on 127.0.0.1:$ATB_PG_PORT and a unix socket in its own data folder,
# trust authentication on loopback only. Nothing outside $ATB_PG_DIR is written; it is idempotent: a
# running server is reused. Tests read ATB_TEST_PG_URL (tests/conftest.py: `pg_url`); under CI=true a
# test that needs PostgreSQL fails when it is unset and no server can be started.

_atb_pg_main() {
  local cmd="${1:-start}"
  local dir="${ATB_PG_DIR:-/tmp/atb-pg}"
  local port="${ATB_PG_PORT:-55432}"
  local data="$dir/data"
  local bindir runas=()

  bindir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
  if [[ -z "$bindir" || ! -x "$bindir/initdb" ]]; then
    if [[ "$cmd" != start ]]; then echo "PostgreSQL is not installed" >&2; return 1; fi
    if [[ $(id -u) -ne 0 ]]; then
      echo "PostgreSQL is not installed and this is not root: apt-get install -y postgresql" >&2; return 1
    fi
    echo "[atb-services] installing PostgreSQL (Debian package postgresql)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2 || {
      apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2; } || return 1
    bindir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
  fi
  if [[ $(id -u) -eq 0 ]]; then runas=(runuser -u postgres --); fi
  local url="postgresql://postgres@127.0.0.1:${port}/postgres"

  case "$cmd" in
    stop)
      if [[ -f "$data/postmaster.pid" ]]; then "${runas[@]}" "$bindir/pg_ctl" -D "$data" -m fast -w stop >&2; fi
      return 0 ;;
    url)
      echo "$url"; return 0 ;;
    start) ;;
    *) echo "usage: services.sh [start|stop|url]" >&2; return 2 ;;
  esac

  mkdir -p "$dir"
  if [[ $(id -u) -eq 0 ]]; then chown postgres: "$dir"; chmod 0755 "$dir"; fi
  if [[ ! -f "$data/PG_VERSION" ]]; then
    "${runas[@]}" "$bindir/initdb" -D "$data" -U postgres --auth=trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 || {
      cat "$dir/initdb.log" >&2; return 1; }
  fi
  if ! "${runas[@]}" "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    "${runas[@]}" "$bindir/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 \
      -o "-k $data -p $port -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off" start >&2 || {
      tail -n 20 "$dir/server.log" >&2; return 1; }
  fi
  "$bindir/pg_isready" -h 127.0.0.1 -p "$port" -t 30 >/dev/null || { echo "PostgreSQL did not answer on $port" >&2; return 1; }
  echo "$url" > "$dir/url"
  export ATB_TEST_PG_URL="$url"
  echo "[atb-services] PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on $url" >&2
  [[ "${BASH_SOURCE[0]}" == "$0" ]] && echo "$url"
  return 0
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  _atb_pg_main "$@"
else
  _atb_pg_main start
fi
