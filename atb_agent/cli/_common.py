"""Shared pieces of the CLI contract: exit codes, JSON output, error classification."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, ClassVar

from pydantic import BaseModel

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2


class BadInput(Exception):
    """The user's input is wrong (a path, a flag, a name): exit 2 with this one-line message."""

    user_fixable: ClassVar[bool] = True


def is_user_fixable(exc: BaseException) -> bool:
    """Whether ``exc`` is an error the user can fix: its class (or a base) sets ``user_fixable = True``
    (HarnessError, ProtocolError, AgentError, SandboxError, TranscriptError, BadInput and all their
    subclasses), or it is Python's own ``FileNotFoundError`` (a path the user gave)."""
    return getattr(type(exc), "user_fixable", False) is True or isinstance(exc, FileNotFoundError)


def classify(exc: BaseException) -> tuple[int, str]:
    """Map an exception to (exit code, one-line message): a user-fixable error is bad input (exit 2,
    ``Type: message``); anything else is an internal failure (exit 1)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if is_user_fixable(exc):
        return EXIT_BAD_INPUT, f"{type(exc).__name__}: {text}"
    return EXIT_INTERNAL, f"internal error ({type(exc).__name__}): {text}"


def emit_error(message: str, want_json: bool, code: int) -> None:
    line = " ".join(message.split())
    if want_json:
        print(json.dumps({"ok": False, "error": line, "exit_code": code}))
    else:
        print(f"atb: error: {line}", file=sys.stderr)


def emit(payload: BaseModel | dict[str, Any], args: argparse.Namespace, human: str | None = None) -> None:
    """Print a command's result: one JSON object with --json, else the human text."""
    data = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
    if getattr(args, "json", False):
        print(json.dumps(data, sort_keys=True, default=str))
    else:
        print(human if human is not None else json.dumps(data, indent=2, sort_keys=True, default=str))


def progress(message: str) -> None:
    """Progress for long work: stderr only, never stdout."""
    print(message, file=sys.stderr, flush=True)


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout and nothing else")


def add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default="atb.sqlite", help="results store (SQLite file), default ./atb.sqlite")


def open_verified_store(db: str) -> Any:
    """Open the results store for a command that reads results (compare, report, remeasure, retest).

    A SQLite file is verified read-only before it is opened (nothing is appended to a store that
    fails), so a store with a broken hash chain, a row that breaks a rule, a dropped or altered trigger
    or another schema version is refused here, by every such command alike.

    Raises:
        StoreTampered: the store fails verification (exit 2, one line naming the first bad row).
        StoreSchemaVersionError: the file has another schema version (exit 2).
    """
    from pathlib import Path

    from harness.store import (ResultStore, StoreSchemaVersionError, StoreTampered, StoreVerification, open_store,
                               verify_path)

    text = str(db)
    store: ResultStore | None
    result: StoreVerification | None
    if "://" in text and not text.startswith("sqlite:///"):
        store = open_store(text)
        result = store.verify()
    else:
        path = Path(text[len("sqlite:///"):] if text.startswith("sqlite:///") else text)
        result = verify_path(path) if path.is_file() else None
        if result is None or result.ok:
            return open_store(path)
        store = None
    if result.ok:
        return store
    if store is not None:
        store.close()
    first = result.problems[0]
    if first.kind == "schema_version":
        raise StoreSchemaVersionError(f"results store {result.path}: {first.detail}")
    raise StoreTampered(result.path, result.first_problem or "unknown problem", len(result.problems))
