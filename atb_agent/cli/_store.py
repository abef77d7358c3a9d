"""``atb store verify``: is the results store exactly what AutoTuneBench wrote?

Checks the schema version, every table/index/trigger against ``harness/store/schema.sql``, the hash
chain over every row, and every ingest rule on every row (``harness.store.verify_path``). Read-only:
the file is never created, repaired or rewritten. Exit 0 when it verifies; exit 2 when it does not
(one line on stderr naming the first bad row; with ``--json`` the full :class:`StoreVerification`).
"""

from __future__ import annotations

import argparse
import json

from atb_agent.cli._common import EXIT_BAD_INPUT, EXIT_OK, add_db, add_json, emit_error


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("store", help="verify the results store (hash chain, triggers, schema version, rules)")
    p.add_argument("action", choices=["verify"])
    add_db(p)
    add_json(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from harness.store import verify_path

    db = str(args.db)
    path = db[len("sqlite:///"):] if db.startswith("sqlite:///") else db
    result = verify_path(path)   # StoreError (exit 2) when there is no such file
    data = result.model_dump(mode="json")
    data["first_problem"] = result.first_problem
    if args.json:
        print(json.dumps(data, sort_keys=True))
    elif result.ok:
        print(f"store {result.path} verified: schema version {result.schema_version}, {result.rows_checked} rows, "
              f"chain head {result.head_seq} {result.head_hash}")
    else:
        for p in result.problems:
            print(p.line())
    if result.ok:
        return EXIT_OK
    if not args.json:
        emit_error(f"store {result.path} fails verification ({len(result.problems)} problem(s)): "
                   f"{result.first_problem}", False, EXIT_BAD_INPUT)
    return EXIT_BAD_INPUT
