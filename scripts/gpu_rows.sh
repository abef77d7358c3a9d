#!/usr/bin/env bash
# Run the next part of issue 25's GPU evidence plan within a time limit, resumably.
#
# Why: device time comes as 10-minute commands on a machine that goes back 30 s after each, and a
# complete set of GPU rows under one measuring digest (honest corpus, GPU cheats, the max-autotune
# probe, KernelBench A/A on Levels 3, 1 and 2) takes about an hour. Each step below skips what its
# output file already holds, so the same command, called again with the same STATE folder, goes on
# where the last call stopped. Steps run in the order of benchmarks/results/honest_h200/STATUS_issue25.md
# ("Device plan").
#
# Usage, from the root of a `git archive` snapshot on the GPU machine (PYTHONPATH and ATB_BWRAP set):
#   bash scripts/gpu_rows.sh STATE_DIR SECONDS [KB_ROOT]
# STATE_DIR holds every row file and log; carry it back in when the machine went cold. Carry the same
# paths on every call, the snapshot included: an ignored path left out of a call's carry was gone there. KB_ROOT is a
# KernelBench checkout (the A/A steps are skipped without one). Prints one line per step.
set -uo pipefail
STATE=${1:?usage: gpu_rows.sh STATE_DIR SECONDS [KB_ROOT]}
SECONDS_GIVEN=${2:?usage: gpu_rows.sh STATE_DIR SECONDS [KB_ROOT]}
KB=${3:-}
mkdir -p "$STATE"
END=$((SECONDS + SECONDS_GIVEN))
DIGEST=$(python3 scripts/measuring_digest.py) || { echo "gpu_rows: cannot compute the measuring digest" >&2; exit 2; }
echo "gpu_rows: digest $DIGEST, $SECONDS_GIVEN s, state $STATE"
H=benchmarks/honest_corpus.py
O="$STATE/honest.jsonl"

left() { echo $((END - SECONDS)); }

step() {   # step NAME MIN_SECONDS COMMAND...: run COMMAND under timeout if MIN_SECONDS are left
    local name=$1 need=$2; shift 2
    local l; l=$(left)
    if [ "$l" -lt "$need" ]; then echo "gpu_rows: $name not started ($l s left, needs $need)"; return 1; fi
    local t0=$SECONDS
    timeout "$l" "$@" > "$STATE/$name.last" 2>&1
    local rc=$?
    cat "$STATE/$name.last" >> "$STATE/$name.log"
    echo "gpu_rows: $name rc=$rc ($((SECONDS - t0)) s)"
    return 0
}

have() { grep -q "\"name\": \"$1\"" "$O" 2>/dev/null; }   # a row for entry $1 is in the corpus file

have gpu:escape_side_stream_matmul || step escape_matmul 320 python3 $H --device cuda --cheats gpu \
    --only gpu:escape_side_stream_matmul --per-entry-timeout-s 280 --out "$O" || exit 0
have compile_max_autotune_tiny_mlp || step max_autotune 90 python3 $H --device cuda --cheats none \
    --only compile_max_autotune_tiny_mlp --out "$O" || exit 0
step corpus 90 python3 $H --device cuda --cheats gpu --out "$O" --time-budget-s $(( $(left) - 60 )) || exit 0
grep -q "^stopped: budget spent" "$STATE/corpus.last" && exit 0
if [ ! -s "$STATE/max_autotune_confined.json" ] || ! grep -q '"unconfined+child-env"' "$STATE/max_autotune_confined.json"; then
    step probe 420 python3 benchmarks/probe_max_autotune_confined.py "$STATE/max_autotune_confined.json" || exit 0
fi
[ -n "$KB" ] || { echo "gpu_rows: no KernelBench root given; the A/A steps are left"; exit 0; }
for level in 3 1 2; do
    step "level$level" 120 python3 benchmarks/kernelbench_sweep.py --kb "$KB" --level "$level" \
        --out "$STATE/level$level.jsonl" --device cuda --time-budget-s $(( $(left) - 60 )) || exit 0
    grep -q "^done: all" "$STATE/level$level.last" || exit 0
done
echo "gpu_rows: every step done"
