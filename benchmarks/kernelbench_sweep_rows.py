"""The paper's table from an ``atb sweep`` store: one row per finished random-search campaign.

Why: ``benchmarks/kernelbench_random.py`` runs the random arm itself, one campaign process per problem,
because ``atb sweep`` needed Ray and the GPU hosts have none. ``atb sweep --local`` now runs the same
grid there (one campaign per GPU, resumable from the store across calls and sessions). This turns such a
sweep's store into the same rows (``kind: random_campaign``, read back by the same
:func:`kernelbench_random.campaign_row`), so ``render_kernelbench_arms.py`` renders either.

Usage::

    atb sweep SPEC.yaml --local --db STORE.sqlite --json     # tasks: ["KB/level1/*.py"], tuners: [random]
    python benchmarks/kernelbench_sweep_rows.py SPEC.yaml --db STORE.sqlite --out ROWS.jsonl
    python benchmarks/render_kernelbench_arms.py ROWS.jsonl --out TABLE.md

A row's ``code_rev`` and ``measuring_digest`` are those of the tree this script runs in: run it in the
snapshot that ran the sweep (the device command that runs one runs the other). A campaign stored under
another protocol than this tree's is refused (exit 2). Rows are written for campaigns with an outcome; unfinished ones are counted and skipped (run the sweep
again). A campaign whose row is already in ``--out`` is not written twice. LLM campaigns of a sweep are
counted and skipped: their rows come from ``kernelbench_llm.py``, which reads the transcripts as well.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _code_rev import checked_code_rev  # noqa: E402
from _measuring_digest import process_measuring_digest  # noqa: E402
from kernelbench_random import campaign_row  # noqa: E402
from kernelbench_sweep import ROOT, append_line, problem_id  # noqa: E402

_LEVEL = re.compile(r"level(\d+)$")


def level_of(task: Path) -> int | None:
    """KernelBench's level from the problem's folder (``.../level1/19_ReLU.py`` -> 1)."""
    m = _LEVEL.search(task.parent.name)
    return int(m.group(1)) if m else None


def written(out: Path) -> set[str]:
    """Campaign ids whose row ``out`` already holds (torn lines ignored)."""
    if not out.exists():
        return set()
    ids: set[str] = set()
    for line in out.read_text(encoding="utf-8").splitlines():
        try:
            ids.add(str(json.loads(line)["campaign_id"]))
        except (ValueError, KeyError, TypeError):
            continue
    return ids


def tree_protocol_sha256() -> str:
    """The SHA-256 of the protocol this tree measures under (what a campaign row must carry)."""
    from protocol import load_protocol

    return load_protocol().ref().sha256


def rows(spec: Path, db: str, device: str) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The finished random campaigns' rows, and counts of what was skipped and why."""
    from atb_agent.sweep import attempts, load_spec, states
    from harness.store import open_store

    sweep = load_spec(spec)
    rev, digest = checked_code_rev(ROOT), process_measuring_digest(ROOT)
    protocol_sha = tree_protocol_sha256()
    out: list[dict[str, Any]] = []
    skipped = {"unfinished": 0, "not_random": 0}
    with open_store(db) as store:
        st = states(store, sweep.campaigns)
        for key in sweep.campaigns:
            s = st[key.key]
            if key.tuner != "random":
                skipped["not_random"] += 1
                continue
            if s.outcome is None or s.campaign_id is None:
                skipped["unfinished"] += 1
                continue
            task = Path(key.task)
            tries = attempts(store, key)
            base = {"problem": task.stem, "id": problem_id(task), "level": level_of(task), "code_rev": rev,
                    "device": device, "measuring_digest": digest, "tuner": key.tuner, "seed": key.seed,
                    "budget": sweep.spec.budget, "sweep_id": sweep.sweep_id, "driver": "atb sweep",
                    "attempts": len(tries), "started_utc": str(tries[0]["body"].get("started_at", "")) if tries else ""}
            row = campaign_row(store, s.campaign_id)
            if row["protocol_sha256"] != protocol_sha:
                raise ProtocolMismatch(f"campaign {s.campaign_id} ran under protocol {str(row['protocol_sha256'])[:12]}…, "
                                       f"not this tree's {protocol_sha[:12]}…: export the rows in the tree that ran "
                                       "the sweep, so that their code_rev and measuring digest are its own")
            out.append({**base, "kind": "random_campaign", **row})
    return out, skipped


class ProtocolMismatch(RuntimeError):
    """The store's campaigns ran under another protocol than the tree the rows would be stamped with."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("spec", type=Path, help="the sweep spec the store was filled by")
    ap.add_argument("--db", required=True, help="the sweep's store (SQLite path or postgresql://...)")
    ap.add_argument("--out", type=Path, required=True, help="rows file (JSON lines), appended to")
    ap.add_argument("--device", default=None, help="the rows' device label (default: the spec's backend)")
    args = ap.parse_args(argv)
    from atb_agent.sweep import load_spec

    device = args.device or load_spec(args.spec).spec.devices.backend
    try:
        found, skipped = rows(args.spec, args.db, device)
    except ProtocolMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    have = written(args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    new = [r for r in found if r["campaign_id"] not in have]
    for r in new:
        append_line(args.out, r)
    print(f"{len(new)} row(s) written to {args.out} ({len(found) - len(new)} already there); skipped: "
          f"{skipped['unfinished']} unfinished, {skipped['not_random']} not random search")
    return 0


if __name__ == "__main__":
    sys.exit(main())
