#!/usr/bin/env bash
# The main job, on a fresh machine with no API key and no GPU, live: set up, serve a real small model
# (SmolLM2-135M-Instruct, Q4_1 GGUF, via llama-server on loopback), then run seeded random search and
# that model as the LLM tuner (through the official OpenAI SDK) on the same native task with the same
# budget; record the live transcript, replay it byte-for-byte with `atb replay`, compare the arms and
# write the report. The LLM arm is a 135M model served locally: a weak tuner, every path real.
# Then the pre-registered A/B on the same served model (protocol/preregistrations/example-smollm2-ab.yaml:
# preflight, registration, 2 seeds x budget 3 per arm, treatment-delivery check, decision, report in
# OUT_DIR/ab/), and every transcript of both arms replayed byte-for-byte.
#   bash scripts/demo.sh [OUT_DIR]        (default out/demo)
# ATB_DEMO_SKIP_SETUP=1 skips setup (benchmarks/bench_demo.py times the job after set-up).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ "${ATB_DEMO_SKIP_SETUP:-0}" == 1 ]] || bash scripts/setup.sh
OUT=${1:-out/demo}
TASK=${ATB_DEMO_TASK:-relu}
BUDGET=${ATB_DEMO_BUDGET:-3}
SEED=${ATB_DEMO_SEED:-1}
mkdir -p "$OUT"
DB="$OUT/atb.sqlite"
rm -rf "$DB" "$DB-wal" "$DB-shm" "$OUT/transcripts" "$OUT/checkpoints.sqlite"
AB_SPEC=protocol/preregistrations/example-smollm2-ab.yaml
AB_OUT="$OUT/ab"
rm -rf "$AB_OUT"        # a fresh store: the A/B registers its id there
mkdir -p "$AB_OUT/replay"
atb=.venv/bin/atb
# one field of a --json answer; a failed command's error line goes to stderr and the job stops
field() { .venv/bin/python -c '
import json, sys
doc = json.load(sys.stdin)
if sys.argv[1] not in doc:
    sys.exit("demo: step failed: " + str(doc.get("error", doc)))
print(doc[sys.argv[1]])' "$1"; }

T0=$EPOCHREALTIME
# each step's line carries the seconds since the job started (benchmarks/bench_demo.py reads them)
step() { printf '== [%7.1f s] %s\n' "$(awk -v a="$EPOCHREALTIME" -v b="$T0" 'BEGIN { print a - b }')" "$*" >&2; }

step "protocol"
$atb protocol verify
step "serving the real model (SmolLM2-135M-Instruct, llama-server on loopback)"
SERVED=$($atb model serve smollm2 --json)
BASE_URL=$(field base_url <<<"$SERVED")
if [[ $(field already_running <<<"$SERVED") == False ]]; then
  trap '$atb model stop smollm2 >&2 || true' EXIT      # stop only the server this job started
fi
echo "   $BASE_URL" >&2
step "seeded random search: $TASK, budget $BUDGET, seed $SEED"
RANDOM_RUN=$($atb run "$TASK" --tuner random --budget "$BUDGET" --seed "$SEED" --db "$DB" --json | field run_id)
step "live LLM tuner: openai:smollm2 at $BASE_URL, $TASK, budget $BUDGET, seed $SEED"
LLM_RUN=$($atb run "$TASK" --tuner openai:smollm2 --base-url "$BASE_URL" --budget "$BUDGET" --seed "$SEED" \
  --db "$DB" --json | field run_id)
TRANSCRIPT="$OUT/transcripts/$LLM_RUN.jsonl"
cp "$TRANSCRIPT" "$OUT/live-transcript.jsonl"
# The replay, the comparison and the report only read what the two arms wrote, and nothing is measured
# any more: the replay (a fresh sandbox, the tool calls re-run) goes in the background meanwhile.
step "replay of the live transcript, byte-for-byte (in the background): $TRANSCRIPT"
$atb replay "$TRANSCRIPT" --json > "$OUT/replay.json" 2> "$OUT/replay.log" &
REPLAY_PID=$!
step "compare"
$atb compare "$RANDOM_RUN" "$LLM_RUN" --db "$DB" | tee "$OUT/compare.txt"
$atb compare "$RANDOM_RUN" "$LLM_RUN" --db "$DB" --json > "$OUT/compare.json"
step "report"
$atb report "$RANDOM_RUN" "$LLM_RUN" --db "$DB" --out "$OUT"
step "pre-registered A/B on the served model: $AB_SPEC (control vs treatment, 2 seeds x budget 3)"
AB_RC=0
$atb ab "$AB_SPEC" --base-url "$BASE_URL" --db "$AB_OUT/atb.sqlite" --out "$AB_OUT" --json \
  > "$AB_OUT/ab.json" 2> "$AB_OUT/ab.log" || AB_RC=$?
cat "$AB_OUT/ab.log" >&2
if [[ $AB_RC != 0 ]]; then
  echo "demo: step failed: atb ab exited with status $AB_RC: $(cat "$AB_OUT/ab.json")" >&2
  exit "$AB_RC"
fi
.venv/bin/python - "$AB_OUT/ab.json" >&2 <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"   decision: {r['status']} ({r['explanation']}); treatment delivered: {r['delivery']['delivered']}")
for s in r["seeds"]:
    c = s["comparison"]
    print(f"   seed {s['seed']}: {s['detail']}; truncated fraction control {c['a']['truncated_fraction']}, "
          f"treatment {c['b']['truncated_fraction']}")
PY
step "replay of the A/B's transcripts (both arms), byte-for-byte"
for t in "$AB_OUT"/transcripts/*.jsonl; do
  $atb replay "$t" --json > "$AB_OUT/replay/$(basename "$t" .jsonl).json" 2>> "$AB_OUT/replay/replay.log" || {
    cat "$AB_OUT/replay/replay.log" >&2; echo "demo: step failed: atb replay $t" >&2; exit 1; }
done
.venv/bin/python - "$AB_OUT"/replay/*.json >&2 <<'PY'
import json, sys
bad = []
for path in sys.argv[1:]:
    r = json.load(open(path))
    print(f"   {path.rsplit('/', 1)[-1]}: ok={r['ok']}, {r['requests_identical']}/{r['model_calls']} requests identical, "
          f"verdicts reproduced={r['verdicts_reproduced']}")
    bad += [] if r["ok"] else [path]
if len(sys.argv) != 5 or bad:
    sys.exit(f"demo: step failed: {len(sys.argv) - 1} A/B transcripts replayed (4 expected); not byte-for-byte: {bad}")
PY
step "replay: waiting for it"
REPLAY_RC=0
wait "$REPLAY_PID" || REPLAY_RC=$?
cat "$OUT/replay.log" >&2
if [[ $REPLAY_RC != 0 ]]; then
  echo "demo: step failed: atb replay exited with status $REPLAY_RC" >&2
  exit "$REPLAY_RC"
fi
.venv/bin/python - "$OUT/replay.json" >&2 <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"   replay ok={r['ok']}: {r['requests_identical']}/{r['model_calls']} requests identical, "
      f"{r['tool_calls']} tool calls, {r['submissions_checked']} submissions checked, "
      f"verdicts reproduced={r['verdicts_reproduced']}")
if not r["ok"]:
    sys.exit("demo: step failed: the live transcript did not replay byte-for-byte")
PY
step "done"
echo "report: $OUT/report.html (runs $RANDOM_RUN random, $LLM_RUN live SmolLM2-135M served locally; transcript $OUT/live-transcript.jsonl)"
echo "A/B report: $AB_OUT/report.html (decision in $AB_OUT/ab.json; replays in $AB_OUT/replay/)"
