#!/usr/bin/env bash
# Make this machine ready for the sandbox tests: packages, a running Docker daemon, the sandbox image.
#
# Idempotent and cached: each step is skipped when its result is already there (packages installed,
# daemon answering, root filesystem under the cache directory, image present), so .ci/run can call it
# every time. The Docker daemon uses the vfs storage driver, the one that works on these machines.
#
# Usage: sandbox/ci_setup.sh [--tag TAG]   (TAG defaults to protocol.sandbox.image)
# Environment: ATB_SANDBOX_CACHE (root filesystem and .deb cache, default /var/cache/atb-sandbox),
#              ATB_DOCKERD_LOG (default /var/log/atb-dockerd.log).
# Exit status: 0 ready; 1 a step failed (its log is printed); 2 bad arguments or no readable protocol.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
log() { echo "[atb-ci-setup] $*" >&2; }

TAG=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG="$2"; shift 2 ;;
    *) echo "ci_setup.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [ -z "$TAG" ]; then
  PY="$REPO/.venv/bin/python"; [ -x "$PY" ] || PY=python3
  TAG="$(cd "$REPO" && "$PY" -c 'from protocol import load_protocol; print(load_protocol().sandbox.image)')" \
    || { log "cannot read protocol.sandbox.image with $PY; make the venv first or pass --tag"; exit 2; }
fi

missing=""
command -v dockerd >/dev/null || missing="$missing docker.io"
command -v debootstrap >/dev/null || missing="$missing debootstrap"
command -v bwrap >/dev/null || missing="$missing bubblewrap"
if [ -n "$missing" ]; then
  log "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  # shellcheck disable=SC2086
  apt-get install -y -qq $missing >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  DLOG="${ATB_DOCKERD_LOG:-/var/log/atb-dockerd.log}"
  log "starting dockerd (vfs), log: $DLOG"
  setsid nohup dockerd --storage-driver=vfs >"$DLOG" 2>&1 < /dev/null &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { log "dockerd did not answer within 60 s"; tail -30 "$DLOG" >&2; exit 1; }
fi
log "docker daemon answers ($(docker version --format '{{.Server.Version}}'))"

"$HERE/build_image.sh" --tag "$TAG" >/dev/null
log "sandbox image $TAG ready"
