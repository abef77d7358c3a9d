#!/usr/bin/env bash
# Build the AutoTuneBench sandbox root filesystem offline and import it as a Docker image.
#
# Why a script and not a Dockerfile: there is no image registry to pull a base image from, so the root
# filesystem is made from Debian's packages (debootstrap, from the mirror apt already uses) and then
# `docker import`ed. The same root filesystem is what the bubblewrap backend mounts read-only, so both
# backends run the tuner's commands on the same userland.
#
# What the image holds: Debian minbase, python3 with its headers and g++ (torch.compile and cpp extensions need a
# compiler), the two sandbox users, an empty /workspace mount point and the mount point for the
# host's site-packages (torch is mounted read-only at run time, not copied: that keeps the image small
# and container creation on vfs fast). It never holds harness code: nothing from this repository is
# copied in.
#
# Usage: build_image.sh --tag TAG [--cache-dir DIR] [--force] [--reimport] [--no-docker]
#   --tag        image tag (required: protocol.sandbox.image; `atb sandbox build` and ci_setup.sh pass it)
#   --cache-dir  where the root filesystem and downloaded .debs are kept (default: $ATB_SANDBOX_CACHE
#                or /var/cache/atb-sandbox)
#   --force      rebuild the root filesystem and re-import the image even when cached
#   --reimport   re-import the image from the cached root filesystem
#   --no-docker  only build the root filesystem (for the bubblewrap backend)
# Environment: ATB_DEBIAN_MIRROR, ATB_DEBIAN_SUITE override the mirror and suite read from this host.
# Exit status: 0 built or already present; 2 bad arguments or missing tools; 1 a step failed.
set -euo pipefail

TAG=""
CACHE_DIR="${ATB_SANDBOX_CACHE:-/var/cache/atb-sandbox}"
FORCE=0
REIMPORT=0
DOCKER=1
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG="$2"; shift 2 ;;
    --cache-dir) CACHE_DIR="$2"; shift 2 ;;
    --force) FORCE=1; shift ;;
    --reimport) REIMPORT=1; shift ;;
    --no-docker) DOCKER=0; shift ;;
    *) echo "build_image.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done

log() { echo "[atb-sandbox] $*" >&2; }
[ -n "$TAG" ] || { echo "build_image.sh: --tag is required (protocol.sandbox.image)" >&2; exit 2; }

TUNER_UID=61000
KEEPER_UID=61001
PACKAGES="python3,python3-dev,g++,ca-certificates"
SAFE_TAG="$(printf '%s' "$TAG" | tr -c 'A-Za-z0-9._-' '_')"
ROOTFS="$CACHE_DIR/rootfs-$SAFE_TAG"

if [ "$(id -u)" != 0 ]; then
  echo "build_image.sh: debootstrap needs root; run it as root (or via sudo)" >&2
  exit 2
fi
command -v debootstrap >/dev/null || { echo "build_image.sh: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 2; }

mirror_from_apt() {
  local m=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    m="$(awk '/^URIs:/ && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)"
  fi
  if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
    m="$(awk '$1=="deb" && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list)"
  fi
  printf '%s' "${m:-http://deb.debian.org/debian}"
}
MIRROR="${ATB_DEBIAN_MIRROR:-$(mirror_from_apt)}"
SUITE="${ATB_DEBIAN_SUITE:-bookworm}"

build_rootfs() {
  local tmp="$CACHE_DIR/.rootfs-$SAFE_TAG.partial"
  rm -rf "$tmp"
  mkdir -p "$CACHE_DIR/debs" "$tmp"
  log "debootstrap $SUITE from $MIRROR (packages: $PACKAGES)"
  debootstrap --variant=minbase --include="$PACKAGES" --cache-dir="$CACHE_DIR/debs" \
    "$SUITE" "$tmp" "$MIRROR" >"$CACHE_DIR/debootstrap.log" 2>&1 \
    || { log "debootstrap failed; see $CACHE_DIR/debootstrap.log"; tail -20 "$CACHE_DIR/debootstrap.log" >&2; return 1; }
  # Users: the tuner runs every command as TUNER_UID; the container's idle init runs as KEEPER_UID so
  # that `kill -9 -1` issued as the tuner (to end a runaway command) cannot stop the container.
  echo "tuner:x:$TUNER_UID:$TUNER_UID:atb tuner:/tmp:/bin/sh" >>"$tmp/etc/passwd"
  echo "keeper:x:$KEEPER_UID:$KEEPER_UID:atb keeper:/nonexistent:/usr/sbin/nologin" >>"$tmp/etc/passwd"
  echo "tuner:x:$TUNER_UID:" >>"$tmp/etc/group"
  echo "keeper:x:$KEEPER_UID:" >>"$tmp/etc/group"
  mkdir -p "$tmp/workspace" "$tmp/opt/atb/site-packages"
  # Trim what a tuner never needs; vfs copies the whole root filesystem for every container.
  rm -rf "$tmp"/var/cache/apt/* "$tmp"/var/lib/apt/lists/* "$tmp"/usr/share/doc/* \
    "$tmp"/usr/share/man/* "$tmp"/usr/share/locale/* "$tmp"/usr/share/info/*
  local pyver
  pyver="$(chroot "$tmp" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  cat >"$tmp/etc/atb-sandbox-release" <<EOF
{"tag": "$TAG", "suite": "$SUITE", "mirror": "$MIRROR", "packages": "$PACKAGES", "python": "$pyver", "tuner_uid": $TUNER_UID, "keeper_uid": $KEEPER_UID}
EOF
  rm -rf "$ROOTFS"
  mv "$tmp" "$ROOTFS"
  log "root filesystem ready at $ROOTFS ($(du -sh "$ROOTFS" | cut -f1), python $pyver)"
}

if [ "$FORCE" = 1 ] || [ ! -f "$ROOTFS/etc/atb-sandbox-release" ]; then
  build_rootfs
else
  log "root filesystem cached at $ROOTFS"
fi

if [ "$DOCKER" = 1 ]; then
  command -v docker >/dev/null || { echo "build_image.sh: docker CLI not found (apt-get install docker.io) or pass --no-docker" >&2; exit 2; }
  docker info >/dev/null 2>&1 || { echo "build_image.sh: no Docker daemon answers; start dockerd or pass --no-docker" >&2; exit 2; }
  if [ "$FORCE" = 1 ] || [ "$REIMPORT" = 1 ] || ! docker image inspect "$TAG" >/dev/null 2>&1; then
    log "importing $ROOTFS as $TAG"
    PYVER="$(sed -n 's/.*"python": "\([0-9.]*\)".*/\1/p' "$ROOTFS/etc/atb-sandbox-release")"
    tar -C "$ROOTFS" --numeric-owner -c . | docker import \
      --change "USER $KEEPER_UID:$KEEPER_UID" --change "WORKDIR /workspace" \
      --change "ENV PATH=/usr/local/bin:/usr/bin:/bin" \
      --change "LABEL org.autotunebench.sandbox-image=1" --change "LABEL org.autotunebench.python=$PYVER" \
      --message "atb-sandbox rootfs $SUITE" - "$TAG" >/dev/null
    log "image $TAG imported"
  else
    log "image $TAG present"
  fi
fi
echo "$ROOTFS"
