"""What the engine output gate sees on a real model: honest and output-changing configurations side by side
(issue 30, step 4: evidence for the output-match rule proposed in docs/output_match_proposal.md).

Each configuration is one engine trial on SmolLM2-135M-Instruct (the CPU build of llama-server through the
``llama-server-cuda`` adapter, so the GPU flag space's KV types and flash attention are what is launched), with a
shortened engine section (``--seeds`` paired seeds x ``--reps`` repetitions x ``--requests`` requests; every other
value the released protocol's). Reported per configuration, from the same trial:

* ``old_rule``: completions equal to the default's completion of the same request *and repetition* (protocol
  1.0.0/1.1.0's rule);
* ``any_rep_equal``: equal to the default's completion of the same request in any repetition;
* ``gate``: the released rule (equal, or the default's greedy decode up to near ties within the tolerance), as
  the ``output_match`` gate judges it, and its verdict;
* ``divergences_per_1k_tokens``: near-tie and clear divergences found by the walk, per 1,000 candidate tokens,
  and the gaps of the near ties (a lossy numeric change leaves the default's path more often, each time by a
  little).

``wrong-rope`` adds ``--rope-freq-base 50`` to the candidate's launch only (the corrupting configuration of
protocol/JUSTIFICATION.md section 6).

Usage: ``python benchmarks/output_match_study.py --out benchmarks/results/output_match_study.json``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from harness.engines.adapters.llamacpp import BINARY_ENV, LlamaServerAdapter  # noqa: E402
from harness.engines.llamacpp_build import cached_binary  # noqa: E402
from harness.engines.task import TASKS_DIR, load_engine_task  # noqa: E402
from harness.measure.serving.trial import run_engine_trial  # noqa: E402
from harness.verdict.engine import judge_engine_trial  # noqa: E402
from protocol import load_protocol  # noqa: E402

CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "flash-attn-on": {"flash_attn": "on"},
    "kv-q8_0": {"cache_type": "q8_0", "flash_attn": "on"},
    "kv-q4_0": {"cache_type": "q4_0", "flash_attn": "on"},
    "wrong-rope": {"flash_attn": "auto"},   # a no-op value that marks the launch getting --rope-freq-base 50
}


def study(name: str, config: dict[str, Any], task_path: Path, seeds: list[int], reps: int, requests: int) -> dict[str, Any]:
    proto = load_protocol()
    proto = proto.model_copy(update={"engine": proto.engine.model_copy(
        update={"requests_per_trial": requests, "reps_per_seed": reps, "warmup_requests": 1})})
    tol = proto.engine.output_tie_tolerance_nats
    render = LlamaServerAdapter.render_args
    if name == "wrong-rope":
        def corrupting(self: LlamaServerAdapter, cfg: dict[str, Any]) -> list[str]:
            return render(self, cfg) + (["--rope-freq-base", "50"] if cfg.get("flash_attn") == "auto" else [])
        LlamaServerAdapter.render_args = corrupting  # type: ignore[method-assign,assignment]
    try:
        t0 = time.monotonic()
        trial = run_engine_trial(load_engine_task(task_path), config, proto, seeds=seeds)
        wall = time.monotonic() - t0
    finally:
        LlamaServerAdapter.render_args = render  # type: ignore[method-assign]
    assert trial.candidate is not None, trial.launch_error
    base = {(run.seed, run.rep, r.index): r.text for run in trial.baseline.runs for r in run.results if r.ok}
    any_rep: dict[tuple[int, int], set[str]] = {}
    for (s, _rep, i), text in base.items():
        any_rep.setdefault((s, i), set()).add(text)
    cand = [(run.seed, run.rep, r) for run in trial.candidate.runs for r in run.results]
    old = sum(1 for s, rep, r in cand if r.ok and base.get((s, rep, r.index)) == r.text)
    anyeq = sum(1 for s, _rep, r in cand if r.ok and r.text in any_rep.get((s, r.index), set()))
    j = judge_engine_trial(trial, proto)
    gate = next(g for g in j.gates if g.name == "output_match")
    tokens = sum(r.completion_tokens for _s, _rep, r in cand if r.ok)
    # every distinct differing text was walked once; weight each walk by how many candidate completions it stands for
    weight: dict[tuple[int, int, str], int] = {}
    for s, _rep, r in cand:
        if r.ok and r.text not in any_rep.get((s, r.index), set()):
            weight[(s, r.index, r.text)] = weight.get((s, r.index, r.text), 0) + 1
    near, clear = 0, 0
    gaps: list[float] = []
    for c in trial.output_checks:
        w = weight.get((c.seed, c.index, c.text), 1)
        for d in c.divergences:
            if d.gap_nats is not None and d.gap_nats <= tol:
                near += w
                gaps.append(d.gap_nats)
            else:
                clear += w
    n = len(cand)
    return {
        "name": name, "config": config, "wall_s": round(wall, 1), "completions": n, "candidate_tokens": tokens,
        "old_rule": [old, n], "any_rep_equal": [anyeq, n], "gate_passed": gate.passed, "gate_detail": gate.detail,
        "verdict": j.status, "ratio": j.ratio,
        "distinct_checked": len(trial.output_checks),
        "near_tie_divergences": near, "clear_divergences": clear,
        "divergences_per_1k_tokens": round(1000 * (near + clear) / max(tokens, 1), 2),
        "near_ties_per_1k_tokens": round(1000 * near / max(tokens, 1), 2),
        "near_tie_gap_median": round(statistics.median(gaps), 4) if gaps else None,
        "near_tie_gap_max": round(max(gaps), 4) if gaps else None,
        "load_avg": os.getloadavg()[0],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--seeds", default="11,22")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "output_match_study.json")
    args = ap.parse_args()
    exe = cached_binary()
    if exe is None:
        raise SystemExit("llama-server is not built here: run `atb engine build llama-cpp`")
    os.environ[BINARY_ENV] = str(exe)
    data = yaml.safe_load((TASKS_DIR / "llamacpp_smollm2.yaml").read_text())
    data.update(id="output-match-study", engine="llama-server-cuda", tunable=["cache_type", "flash_attn"])
    data.pop("bounds", None)
    task_path = Path(tempfile.mkdtemp(prefix="atb-om-")) / "task.yaml"
    task_path.write_text(yaml.safe_dump(data))
    rows = json.loads(args.out.read_text())["rows"] if args.out.is_file() else []
    done = {r["name"] for r in rows}
    seeds = [int(s) for s in args.seeds.split(",")]
    for name in args.configs.split(","):
        if name in done:
            continue
        row = study(name, CONFIGS[name], task_path, seeds, args.reps, args.requests)
        print(json.dumps({k: v for k, v in row.items() if k != "gate_detail"}), flush=True)
        rows.append(row)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"seeds": seeds, "reps": args.reps, "requests": args.requests,
                                        "binary": str(exe), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
