#!/usr/bin/env bash
# The main job, on a fresh machine with no API key and no GPU: set up, then compare the seeded
# random-search baseline with an LLM tuner's recorded trajectory (a scripted fixture transcript,
# replayed byte-for-byte through the real OpenAI SDK path, its candidates measured afresh by the
# harness here) on one native task, with the same budget, and write the report.
#   bash scripts/demo.sh [OUT_DIR]        (default out/demo)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT=${1:-out/demo}
TASK=gelu
BUDGET=3
TRANSCRIPT=transcripts/recorded/scripted-openai-docker.jsonl
mkdir -p "$OUT"
DB="$OUT/atb.sqlite"
rm -f "$DB" "$DB-wal" "$DB-shm"
atb=.venv/bin/atb
run_id() { .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["run_id"])'; }

echo "== protocol" >&2
$atb protocol verify
echo "== seeded random search: $TASK, budget $BUDGET, seed 1" >&2
RANDOM_RUN=$($atb run "$TASK" --tuner random --budget "$BUDGET" --seed 1 --db "$DB" --json | run_id)
echo "== replay of the recorded (scripted) LLM trajectory: $TRANSCRIPT" >&2
LLM_RUN=$($atb run "$TASK" --tuner "replay:$TRANSCRIPT" --budget "$BUDGET" --seed 0 --db "$DB" --json | run_id)
echo "== compare" >&2
$atb compare "$RANDOM_RUN" "$LLM_RUN" --db "$DB" | tee "$OUT/compare.txt"
$atb compare "$RANDOM_RUN" "$LLM_RUN" --db "$DB" --json > "$OUT/compare.json"
echo "== report" >&2
$atb report "$RANDOM_RUN" "$LLM_RUN" --db "$DB" --out "$OUT"
echo "report: $OUT/report.html (runs $RANDOM_RUN, $LLM_RUN)"
