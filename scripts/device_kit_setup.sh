#!/usr/bin/env bash
# The GPU machine's side of scripts/device_kit.py (its docstring has the whole recipe and the commands).
# Run from the repository root in each device call that carries a part of the kit (.kit/partN), and in
# later calls on the same warm machine: it stashes this call's part in $ATB_KIT_DIR (default /tmp/atb-kit)
# after checking its SHA-256, installs the packages, llama-server and bwrap once the payload is there,
# reassembles and checks SmolLM2's GGUF once every chunk is there, starts llama-server on CPU threads
# (its own process session, so it outlives this call on a warm machine) and starts the tuner's sandbox
# once. Idempotent: what exists is kept. Then `. $ATB_KIT_DIR/env.sh` sets PYTHONPATH, ATB_CACHE_DIR,
# ATB_BWRAP, ATB_KB and ATB_MODEL_URL for the benchmarks.
#   bash scripts/device_kit_setup.sh [--threads N] [--no-sandbox-probe]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
KIT=${ATB_KIT_DIR:-/tmp/atb-kit}
exec python3 scripts/device_kit.py setup --kit "$KIT" --src .kit --repo "$PWD" "$@"
