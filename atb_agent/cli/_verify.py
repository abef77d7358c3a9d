"""``atb verify-verdict ID``: does a stored verdict's ratio recompute from its stored samples?

Reads the verdict's two measurement sets (samples in measuring order, with their round boundaries)
and recomputes the ratio and its bootstrap interval with the one estimator
(:func:`harness.stats.measurement_set_ratio`) under the verdict's own protocol. The comparison is
exact (bit for bit), not within a tolerance: the estimator is deterministic, its bootstrap seeded by
the protocol. Exit 0 on a match, 1 on a mismatch, 2 when it cannot be recomputed (an unknown id, a
verdict without a ratio or measurement sets, samples stored without round boundaries, a protocol this
code does not hold). It adds no row of its own.

Why it verifies the store first (issue 27): samples divided by 3 and a ratio tripled, with the chain
recomputed, recompute to the forged ratio; only the store's signed checkpoints tell. So the whole store
is verified first (chain, rules, checkpoints against ``--key-dir``'s key and log, as ``atb store
verify``), and the output's ``store`` says how it stands: a store that fails verification is not agreed
with whatever the recomputation says (exit 1, ``store.verified`` false, ``store.first_problem`` named);
a verdict after the newest checkpoint of a store this key has signed before is not vouched for (exit 1,
``store.signed`` false: run ``atb store checkpoint`` if it is yours); in a store never signed by the key
the recomputation stands alone and says so (exit 0 on a match).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from atb_agent.cli._common import EXIT_OK, BadInput, add_db, add_json

EXIT_MISMATCH = 1
_FIELDS = ("ratio", "ci_low", "ci_high")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("verify-verdict", help="recompute a stored verdict's ratio and CI from its stored samples")
    p.add_argument("verdict_id", metavar="ID", help="the verdict's id (verdict-...)")
    add_db(p)
    p.add_argument("--key-dir", default=None,
                   help="folder of the trusted checkpoint key and its log (default $ATB_KEY_DIR, else "
                        "~/.config/autotunebench)")
    add_json(p)
    p.set_defaults(handler=run)


def recompute(store: Any, verdict_id: str) -> dict[str, Any]:
    """The stored and the recomputed ratio and interval of one verdict, and whether they are identical.

    Raises:
        BadInput: no such verdict, or it cannot be recomputed (no ratio, no sets, time samples without
            round boundaries, a protocol other than the one this code holds).
    """
    from harness.store import NotFound
    from harness.stats import measurement_set_ratio
    from protocol import load_protocol

    try:
        v = store.verdict(verdict_id)
    except NotFound:
        raise BadInput(f"no verdict {verdict_id!r} in {store.path}") from None
    if v.ratio is None or v.candidate_set_id is None or v.baseline_set_id is None:
        raise BadInput(f"verdict {verdict_id} has no ratio to recompute (status {v.status}: {v.reason[:120]})")
    proto = load_protocol()
    if proto.sha256 != v.protocol.sha256:
        raise BadInput(f"verdict {verdict_id} was made under protocol {v.protocol.version} "
                       f"({v.protocol.sha256[:12]}…); this code holds {proto.version} ({proto.sha256[:12]}…), whose "
                       "bootstrap parameters may differ: use the AutoTuneBench of that protocol version")
    cset, bset = store.measurement_set(v.candidate_set_id), store.measurement_set(v.baseline_set_id)
    if cset.unit == "ns" and any(s.round_lengths is None for s in (*cset.samples, *bset.samples)):
        raise BadInput(f"verdict {verdict_id}'s samples were stored without round boundaries (before schema 3): "
                       "its per-round ratio cannot be recomputed")
    est = measurement_set_ratio(cset, bset, proto, backend=store.device(cset.device_sha256).backend)
    stored = {"ratio": v.ratio, "ci_low": v.ci_low, "ci_high": v.ci_high}
    got = {"ratio": est.ratio, "ci_low": est.ci_low, "ci_high": est.ci_high}
    return {"verdict_id": v.id, "kind": v.kind, "unit": cset.unit, "protocol_version": v.protocol.version,
            "protocol_sha256": v.protocol.sha256, "n_pairs": est.n_pairs, "stored": stored, "recomputed": got,
            "match": all(stored[k] == got[k] for k in _FIELDS),
            "differs": [k for k in _FIELDS if stored[k] != got[k]]}


def store_standing(result: Any, verdict_seq: int | None) -> dict[str, Any]:
    """Whether the verified store vouches for the verdict's row: covered by a checkpoint signed by the
    trusted key (``signed``), and whether that key has signed this store before (``signed_before``)."""
    cp = result.checkpoint
    covered = cp.covered_seq if cp is not None else 0
    signed_before = cp is not None and (cp.checkpoints > 0 or cp.logged_heads > 0)
    signed = verdict_seq is not None and verdict_seq <= covered
    return {"verified": bool(result.ok), "first_problem": result.first_problem, "problems": len(result.problems),
            "head_seq": result.head_seq, "verdict_chain_seq": verdict_seq,
            "covered_seq": covered, "signed": signed, "signed_before": signed_before,
            "signature_id": cp.signature_id if cp is not None else None, "key_id": cp.key_id if cp is not None else None,
            "checkpoint": cp.line() if cp is not None else None}


def run(args: argparse.Namespace) -> int:
    from harness.store import open_store
    from harness.store._open import sqlite_path, store_kind

    if store_kind(args.db) == "sqlite" and not sqlite_path(args.db).is_file():
        raise BadInput(f"no results store at {sqlite_path(args.db)}")
    if store_kind(args.db) == "sqlite":     # verified read-only before it is opened
        from harness.store import verify_path

        result = verify_path(sqlite_path(args.db), args.key_dir)
    store = open_store(args.db)
    try:
        if store_kind(args.db) != "sqlite":
            result = store.verify(args.key_dir)
        out = recompute(store, args.verdict_id)
        out["store"] = store_standing(result, store.verdict_chain_seq(args.verdict_id))
    finally:
        store.close()
    st = out["store"]
    vouched = st["verified"] and (st["signed"] or not st["signed_before"])
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        s, r = out["stored"], out["recomputed"]
        word = ("MISMATCH" if not out["match"] else "match" if vouched else
                "UNVERIFIED" if not st["verified"] else "UNSIGNED")
        if not st["verified"]:
            where = (f"the STORE FAILS VERIFICATION ({st['problems']} problem(s)): {st['first_problem']}; "
                     f"`atb store verify --db {args.db}` lists them")
        elif st["signed"]:
            where = f"store verified, row covered by checkpoint {st['signature_id']}"
        elif st["signed_before"]:
            where = (f"store verified, but the verdict's row (chain_seq {st['verdict_chain_seq']}) is after the newest "
                     f"checkpoint ({st['covered_seq']}): UNSIGNED, not vouched for (`atb store checkpoint` if it is yours)")
        else:
            where = "store verified (chain and rules); never signed by this key: the row is unsigned"
        print(f"{word}: verdict {out['verdict_id']} stored ratio {s['ratio']!r} [{s['ci_low']!r}, {s['ci_high']!r}], "
              f"recomputed {r['ratio']!r} [{r['ci_low']!r}, {r['ci_high']!r}] from {out['n_pairs']} pairs "
              f"(protocol {out['protocol_version']}); {where}")
    return EXIT_OK if out["match"] and vouched else EXIT_MISMATCH
