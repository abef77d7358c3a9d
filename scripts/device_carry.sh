#!/usr/bin/env bash
# Build the ignored paths a GPU device call carries for the measuring benchmarks (issue 25's rows, the
# KernelBench A/A sweeps), on a fresh checkout of this development machine.
#
# Why: the GPU machine has torch but not pydantic and friends, nor bubblewrap, nor KernelBench, and a call
# carries only what is in its `carry` list (64 MiB with the working tree). Those paths are ignored, so a new
# checkout has none of them; this makes them in about a minute (no network beyond the local package index).
#
#   bash scripts/device_carry.sh [ROWS.jsonl]
#
# Makes (each kept if it exists, except .snap, which is always the current HEAD):
#   .whl/               CPython 3.12 manylinux wheels of the packages `atb eval` needs beyond torch (~11 MB)
#   build/atb-confine/  Debian's bwrap with its loader and the libraries ldd lists, for ATB_BWRAP
#   .kb/KernelBench/    KernelBench's files, by `git archive` of the mirror that the search tool's fetch made
#                       ($ATB_KB_MIRROR, default /work/.mirror/ScalingIntelligence+KernelBench/repo)
#   .snap/              `git archive HEAD`: what the device measures (its measuring digest is printed)
#   .gpu_rows/honest.jsonl  ROWS.jsonl if given (rows already taken, so the corpus skips those entries)
# and adds .kb/, .snap/ and .kit/ to .git/info/exclude. The device command is in
# benchmarks/results/honest_h200/STATUS_issue25.md ("Device plan").
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "[device-carry] $*" >&2; }

grep -qx '/.kb/' .git/info/exclude 2>/dev/null || printf '/.kb/\n/.snap/\n/.kit/\n' >> .git/info/exclude

if ! ls .whl/pydantic_core-*cp312*.whl >/dev/null 2>&1; then
  log "downloading the CPython 3.12 wheels into .whl"
  mkdir -p .whl
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d .whl \
    pydantic pydantic-core annotated-types typing-inspection typing-extensions rich markdown-it-py mdurl \
    pygments httpx httpcore h11 anyio idna certifi sniffio click pyyaml cryptography cffi pycparser 2>&1 \
    | grep -v "^WARNING: Location" || true
  ls .whl/pydantic_core-*cp312*.whl >/dev/null || { log "the wheel download failed"; exit 1; }
fi

B=build/atb-confine
if [[ ! -x $B/bwrap ]]; then
  command -v bwrap >/dev/null || { log "bwrap is not installed (Debian package bubblewrap: run scripts/setup.sh)"; exit 1; }
  log "bundling $(command -v bwrap) into $B"
  mkdir -p "$B"
  cp "$(command -v bwrap)" "$B/"
  for lib in $(ldd "$(command -v bwrap)" | awk '/=>/ {print $3}'); do cp -L "$lib" "$B/"; done
  cp -L /lib64/ld-linux-x86-64.so.2 "$B/"
fi
"$B/ld-linux-x86-64.so.2" --library-path "$B" "$B/bwrap" --version >/dev/null

MIRROR=${ATB_KB_MIRROR:-/work/.mirror/ScalingIntelligence+KernelBench/repo}
if [[ ! -d .kb/KernelBench/KernelBench/level1 ]]; then
  [[ -d $MIRROR ]] || { log "no KernelBench mirror at $MIRROR (fetch github:ScalingIntelligence/KernelBench first)"; exit 1; }
  log "extracting KernelBench $(git --git-dir="$MIRROR" rev-parse --short HEAD) into .kb/KernelBench"
  mkdir -p .kb/KernelBench
  git --git-dir="$MIRROR" archive HEAD | tar -x -C .kb/KernelBench
fi

rm -rf .snap && mkdir .snap && git archive HEAD | tar -x -C .snap
log ".snap is $(git rev-parse --short HEAD), measuring digest $(cd .snap && python3 scripts/measuring_digest.py)"
[[ -z $(git status --porcelain -- harness protocol) ]] || log "uncommitted changes under harness/ or protocol/ are NOT in .snap"

if [[ $# -ge 1 ]]; then
  mkdir -p .gpu_rows && cp "$1" .gpu_rows/honest.jsonl
  log ".gpu_rows/honest.jsonl: $(wc -l < .gpu_rows/honest.jsonl) rows from $1"
fi
du -sh .whl "$B" .kb .snap 2>/dev/null | tr '\n' ' ' >&2; echo >&2
