"""Before/after checks that a refactor changed no verdict: run one source tree, write what it decided.

Run it with ``cwd`` = the tree under test and ``PYTHONPATH=<that tree>`` (every row records the file the
``harness`` package was imported from, so a run that imported the wrong tree shows it). The subcommands:

    corpus   the red-team corpora (tests/redteam/{cheats,honest,neutralised}) through
             ``evaluate_candidate`` in one CPU measurement session, as the red-team tests run them; one JSON
             line per entry: status, failed gates, the gate names its reason cites, speedup, and the timed
             output checks (repetition, pool, pass) behind the stale-output gate
    draws    the seeded random-search draws of every task (kernel, engine, KernelBench module space) on
             every backend that has a space, seeds 0..N-1, first K proposals each; the SHA-256 of every
             task/backend/seed draw list and of them all
    cli      deterministic CLI output on a copy of a fixed store: each command's stdout, exit status and
             SHA-256 (``--json`` and text forms)
    compare  two ``corpus`` outputs (or more, per side) side by side: statuses and failing-gate sets

    cd /tmp/wt-before && PYTHONPATH=$PWD python /path/to/benchmarks/verdict_diff.py corpus --out /tmp/vd/before_1.jsonl
    python benchmarks/verdict_diff.py compare --before /tmp/vd/before_*.jsonl --after /tmp/vd/after_*.jsonl

Timings and speedups differ run to run; only statuses and gate sets are compared.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FOLDERS = ("cheats", "honest", "neutralised")


def _tree() -> Path:
    import harness

    return Path(harness.__file__).resolve().parents[1]


def _provenance() -> dict[str, Any]:
    tree = _tree()
    rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    return {"tree": str(tree), "rev": rev}


# ----------------------------------------------------------------------------------- corpus
def _reason_gates(reason: str, names: list[str]) -> list[str]:
    return sorted(n for n in names if re.search(rf"\b{re.escape(n)}\b", reason or ""))


def _timed_checks(r: Any) -> list[dict[str, Any]]:
    """Each captured timed output of the candidate: seed, repetition, the pool it came from (first pool seed),
    the seed's repetition count, and whether the parent's comparison passed."""
    ev = r.evidence
    if ev is None:
        return []
    timed = [c for c in ev.comparisons if c.phase == "timed"]
    by_seed: dict[int, bool] = {}
    for c in timed:
        by_seed[c.seed] = by_seed.get(c.seed, True) and c.passed
    from harness.measure.runner._inputs import buffer_seed

    out = []
    for i, t in enumerate(ev.candidate_timed):
        for o in t.timed_outputs:
            pools = o.spec.get("pool_seeds") or []
            # which of the seed's pools (0 = the first) the captured set was cut from
            pool = next((p for p in range(1000) if pools and buffer_seed(buffer_seed(t.seed, 1_000_003 + p), 0)
                         == pools[0]), None)
            out.append({"seed_index": i, "seed": t.seed, "reps": len(t.times_ns), "rep": o.rep,
                        "input_seed": o.input_seed, "pool": pool, "kind": o.spec.get("kind"),
                        "passed": by_seed.get(o.input_seed)})
    return out


def cmd_corpus(a: argparse.Namespace) -> int:
    import torch

    tree = _tree()
    sys.path.insert(0, str(tree / "tests" / "redteam"))
    from harness.measure.session import open_measurement_session
    from harness.store import open_store
    from harness.verdict.evaluate import evaluate_candidate
    from harness.verdict.gates import gate_names
    from redteam_corpus import corpus

    names = gate_names()
    only = set(a.only.split(",")) if a.only else None
    todo = [(f, e) for f in a.folders for e in corpus(f) if only is None or e.name in only]
    torch.set_num_threads(1)
    prov = _provenance()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vd-corpus-") as tmp:
        store = open_store(Path(tmp) / "atb.sqlite")
        with open_measurement_session(store, "cpu", note="verdict_diff corpus") as session:
            for rep in range(a.repeat):
                for folder, e in todo:
                    t0 = time.monotonic()
                    r = evaluate_candidate(e.task_ref, e.source, store=store, session=session)
                    failed = sorted(g.name for g in r.gates if not g.passed)
                    row = {"folder": folder, "name": e.name, "expected_gate": e.gate, "repeat": rep,
                           "status": r.verdict, "failed_gates": failed,
                           "reason_gates": _reason_gates(r.reason, names),
                           "correct": r.correct, "speedup": r.speedup,
                           "details": {g.name: g.detail[:400] for g in r.gates if not g.passed},
                           "passed_details": {g.name: g.detail[:400] for g in r.gates if g.passed},
                           "ceilings": (r.evidence.ceilings.model_dump(mode="json")
                                        if r.evidence is not None and r.evidence.ceilings is not None else None),
                           "timed_checks": _timed_checks(r), "wall_s": round(time.monotonic() - t0, 2),
                           "loadavg_1m": float(Path("/proc/loadavg").read_text().split()[0]), **prov}
                    with a.out.open("a", encoding="utf-8") as fh:
                        fh.write(json.dumps(row, sort_keys=True) + "\n")
                    print(f"{folder}/{e.name}: {r.verdict} failed={failed} ({row['wall_s']} s)", flush=True)
        store.close()
    return 0


# ----------------------------------------------------------------------------------- draws
def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def draw_lists(seeds: int, k: int) -> dict[str, Any]:
    """task/backend/seed -> the first ``k`` proposals of RandomSearch(space, seed), for every task that loads."""
    from harness.tuning.search import RandomSearch
    from harness.tuning.search._task import on_backend
    from harness.tuning.subjects import load_subject

    from harness.engines.task import engine_task_names
    from harness.tasks import native_task_names

    tree = _tree()
    refs: list[str] = [*native_task_names(), *engine_task_names()]
    # KernelBench-format files shipped in the tree (searched over the module space)
    for folder in ("tests/redteam/tasks", "tests/fixtures/kernelbench", "tests/fixtures/kernelbench_like/KernelBench"):
        refs += sorted(str(p) for p in (tree / folder).rglob("*.py"))
    lists: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for ref in refs:
        label = ref if not ref.startswith(str(tree)) else os.path.relpath(ref, tree)
        try:
            subject = load_subject(ref)
        except Exception as exc:  # noqa: BLE001 - a task that does not load is listed, not fatal
            skipped[label] = f"load: {type(exc).__name__}: {exc}".replace(str(tree), "{tree}")[:200]
            continue
        for backend in ("cpu", "cuda", "mlx"):
            try:
                space = on_backend(subject, backend).search_space()  # type: ignore[arg-type]
                for s in range(seeds):
                    lists[f"{label}|{backend}|{s}"] = RandomSearch(space, s).sequence(k)
            except Exception as exc:  # noqa: BLE001
                skipped[f"{label}|{backend}"] = f"{type(exc).__name__}: {exc}".replace(str(tree), "{tree}")[:200]
    return {"lists": lists, "skipped": skipped}


def cmd_draws(a: argparse.Namespace) -> int:
    d = draw_lists(a.seeds, a.k)
    per = {key: _sha(v) for key, v in sorted(d["lists"].items())}
    out = {**_provenance(), "seeds": a.seeds, "k": a.k, "n_lists": len(per), "all_sha256": _sha(per),
           "per_list_sha256": per, "skipped": d["skipped"]}
    a.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(per)} draw lists, sha256 {out['all_sha256']}; {len(d['skipped'])} task/backend pairs without a space")
    return 0


# ----------------------------------------------------------------------------------- cli
def cmd_cli(a: argparse.Namespace) -> int:
    """Each command of ``--commands`` (one per line, ``{db}`` replaced by a fresh copy of ``--store``),
    run with this interpreter's ``-m atb_agent.cli``; stdout, stderr, exit status and their SHA-256."""
    rows = []
    for line in a.commands.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        with tempfile.TemporaryDirectory(prefix="vd-cli-") as tmp:
            db = Path(tmp) / "atb.sqlite"
            if a.store is not None:
                shutil.copy2(a.store, db)
            argv = [x.replace("{db}", str(db)) for x in line.split()]
            p = subprocess.run([sys.executable, "-m", "atb_agent.cli", *argv], capture_output=True, text=True,
                               env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}, timeout=600)
            out = p.stdout.replace(str(db), "{db}")
            err = p.stderr.replace(str(db), "{db}")
        rows.append({"command": line, "rc": p.returncode, "stdout_sha256": hashlib.sha256(out.encode()).hexdigest(),
                     "stdout_bytes": len(out.encode()), "stderr_sha256": hashlib.sha256(err.encode()).hexdigest(),
                     "stdout": out, "stderr": err[-2000:]})
        print(f"rc={p.returncode} {len(out.encode()):>7} B {rows[-1]['stdout_sha256'][:16]}  {line}", flush=True)
    a.out.write_text(json.dumps({**_provenance(), "rows": rows}, indent=1) + "\n", encoding="utf-8")
    return 0


# ----------------------------------------------------------------------------------- address-reuse probe
# tests/redteam/cheats/physical_pool_view_precompute.py, instrumented: it behaves exactly as the cheat does
# (same allocations, the stored answer returned whenever the storage address matches), and also notes, per
# timed-input pool it meets (one per paired seed), the pool's address and whether that address was the one
# it remembered while the contents had changed (a stale answer: the only way this cheat's timed output is
# wrong). After the last paired seed, the first plain (non-pool) input is the harness's reuse probe: it
# raises there with the history, so the verdict's reason carries it.
PROBE_CANDIDATE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = {}
        self.mark = None
        self.history = []

    def forward(self, x):
        storage = x.untyped_storage()
        n_all = storage.nbytes() // x.element_size()
        if not x.is_contiguous() or n_all <= x.numel():
            if len(self.history) >= PAIRED_SEEDS:
                raise RuntimeError("POOL_HISTORY " + ",".join(self.history) + " END")
            return torch.relu(x)
        key = storage.data_ptr()
        flat = torch.empty(0, dtype=x.dtype, device=x.device).set_(storage, 0, (n_all,), (1,))
        done = self.pool.get(key)
        if done is not None and not torch.equal(self.mark, flat[:64]):
            self.history.append(f"{key:x}:stale")
            self.mark = flat[:64].clone()
        if done is None:
            self.history.append(f"{key:x}:new")
            done = torch.relu(flat)
            self.pool = {key: done}
            self.mark = flat[:64].clone()
        return done[x.storage_offset():x.storage_offset() + x.numel()].view(x.shape)
"""


def cmd_reuse(a: argparse.Namespace) -> int:
    """Evaluate PROBE_CANDIDATE on relu ``--repeat`` times in one session; one line per run: each paired seed's
    pool address, and at which seeds the address of the previous seed's pool came back (a stale answer)."""
    import torch

    from harness.measure.session import open_measurement_session
    from harness.store import open_store
    from harness.verdict.evaluate import evaluate_candidate
    from protocol import load_protocol

    proto = load_protocol()
    seeds, checks = proto.seeds.paired_seeds, proto.gates.timed_output_checks
    src = PROBE_CANDIDATE.replace("PAIRED_SEEDS", str(seeds))
    torch.set_num_threads(1)
    prov = _provenance()
    with tempfile.TemporaryDirectory(prefix="vd-reuse-") as tmp:
        store = open_store(Path(tmp) / "atb.sqlite")
        with open_measurement_session(store, "cpu", note="verdict_diff address-reuse probe") as session:
            for rep in range(a.repeat):
                r = evaluate_candidate("relu", src, store=store, session=session)
                m = re.search(r"POOL_HISTORY (\S+) END", r.reason or "")
                hist = [h.split(":") for h in m.group(1).split(",")] if m else []
                stale = [i for i, (_, what) in enumerate(hist) if what == "stale"]
                row = {"repeat": rep, "history_found": m is not None, "pools": [h[0] for h in hist],
                       "stale_seed_indexes": stale,
                       # the collector captures timed outputs on seed indexes k % seeds, k < timed_output_checks
                       "stale_on_captured_seed": any(i in {k % seeds for k in range(checks)} for i in stale),
                       "reason": (r.reason or "")[-300:] if m is None else "", **prov}
                with a.out.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(row, sort_keys=True) + "\n")
                print(f"{rep}: pools {row['pools']} stale at {stale}", flush=True)
        store.close()
    return 0


# ----------------------------------------------------------------------------------- compare
def _load(paths: list[Path]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in paths:
        for line in p.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                rows.setdefault((r["folder"], r["name"]), []).append(r)
    return rows


def _summary(rs: list[dict[str, Any]]) -> str:
    seen: dict[str, int] = {}
    for r in rs:
        k = f"{r['status']} [{', '.join(r['failed_gates']) or '-'}]"
        seen[k] = seen.get(k, 0) + 1
    return "; ".join(f"{k} x{n}" if len(rs) > 1 else k for k, n in sorted(seen.items()))


def cmd_compare(a: argparse.Namespace) -> int:
    before, after = _load(a.before), _load(a.after)
    keys = sorted(set(before) | set(after), key=lambda k: (FOLDERS.index(k[0]) if k[0] in FOLDERS else 9, k[1]))
    same = 0
    lines = ["| corpus | entry | meant for | before (status [failed gates]) | after (status [failed gates]) | same |",
             "|---|---|---|---|---|---|"]
    for k in keys:
        b, af = before.get(k, []), after.get(k, [])
        sb = {(r["status"], tuple(r["failed_gates"])) for r in b}
        sa = {(r["status"], tuple(r["failed_gates"])) for r in af}
        ok = bool(b) and bool(af) and sb == sa
        same += ok
        gate = (b or af)[0]["expected_gate"] or "(honest)"
        lines.append(f"| {k[0]} | {k[1]} | {gate} | {_summary(b)} | {_summary(af)} | {'yes' if ok else '**no**'} |")
    lines.append("")
    lines.append(f"{same}/{len(keys)} entries with the same set of outcomes in every run on both sides")
    text = "\n".join(lines)
    print(text)
    if a.md:
        a.md.write_text(text + "\n", encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--folders", nargs="+", default=list(FOLDERS), choices=FOLDERS)
    c.add_argument("--only", default=None, help="comma-separated entry names")
    c.add_argument("--repeat", type=int, default=1, help="evaluate the selection this many times in the session")
    d = sub.add_parser("draws")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--seeds", type=int, default=8)
    d.add_argument("--k", type=int, default=12)
    cl = sub.add_parser("cli")
    cl.add_argument("--out", type=Path, required=True)
    cl.add_argument("--commands", type=Path, required=True)
    cl.add_argument("--store", type=Path, default=None)
    cm = sub.add_parser("compare")
    cm.add_argument("--before", type=Path, nargs="+", required=True)
    cm.add_argument("--after", type=Path, nargs="+", required=True)
    cm.add_argument("--md", type=Path, default=None)
    rp = sub.add_parser("reuse")
    rp.add_argument("--out", type=Path, required=True)
    rp.add_argument("--repeat", type=int, default=5)
    a = p.parse_args(argv)
    return {"reuse": cmd_reuse, "corpus": cmd_corpus, "draws": cmd_draws, "cli": cmd_cli, "compare": cmd_compare}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
