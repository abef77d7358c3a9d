"""``atb ab``'s preflight: everything both arms need is checked before the A/B is registered.

Why before: a registration is permanent (its id can never be registered again with another spec), so an
A/B that registers and then fails on its first arm (no API key, an endpoint that is down, a task that
does not load, a store that cannot be written) has spent its id on nothing. The preflight opens
nothing that writes: no store is created or opened for writing, no session, no sandbox, no model
call beyond a read-only probe of each endpoint (``GET /models``). A failed preflight therefore leaves a
SQLite store byte-identical and adds no row to a PostgreSQL one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from atb_agent.errors import AgentError

CheckName = Literal["arms", "protocol", "budget", "seeds", "task", "tuner", "config", "api_key", "endpoint",
                    "backend", "store", "transcripts"]
SEED_MAX = 2**62 - 1          # the bound `atb run --seed` takes (atb_agent/cli/_args.py says why)
BUDGET_MAX = 10_000
PROBE_TIMEOUT_S = 5.0


class PreflightFailed(AgentError):
    """An A/B cannot run as specified; nothing was registered or stored (exit 2, one line)."""


class Check(BaseModel):
    """One thing the preflight looked at: what, for which arm (None: the whole A/B), and what it found."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    check: CheckName
    arm: str | None = None
    ok: bool
    detail: str


class PreflightReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    ok: bool
    checks: list[Check]

    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def one_line(self) -> str:
        """The failures in one line, each naming its arm and what is missing."""
        return "; ".join((f"{c.arm}: " if c.arm else "") + f"{c.check}: {c.detail}" for c in self.failures())


def preflight_ab(spec: Any, *, db: str, backend: str, protocol: Any,
                 transcripts_dir: Path | None = None) -> PreflightReport:
    """Check every arm of the A/B ``spec`` (a :class:`harness.science.prereg.ABSpec`, arms' endpoints
    already resolved) against the store ``db``; write nothing. Never raises for what it checks."""
    from harness.science.prereg import arms_cannot_differ

    checks: list[Check] = []
    same = arms_cannot_differ(spec)
    checks.append(Check(check="arms", ok=same is None, detail=same or "the arms differ"))
    bar = protocol.usability.ci_relative_halfwidth_max
    checks.append(Check(check="protocol", ok=spec.usability.ci_relative_halfwidth_max == bar,
                        detail=f"usability bar {spec.usability.ci_relative_halfwidth_max} (protocol's: {bar})"))
    checks.append(Check(check="budget", ok=1 <= spec.budget <= BUDGET_MAX,
                        detail=f"budget {spec.budget} (1..{BUDGET_MAX} iterations)"))
    bad = [s for s in spec.seeds if not 0 <= s <= SEED_MAX]
    checks.append(Check(check="seeds", ok=not bad, detail=f"seeds out of 0..2**62-1: {bad}" if bad else
                        f"{len(spec.seeds)} seeds"))
    checks.append(_task(spec.task))
    pending = _pending_arms(spec, db)
    for arm in (spec.control, spec.treatment):
        if pending is not None and arm.name not in pending:
            checks.append(Check(check="tuner", arm=arm.name, ok=True,
                                detail="every seed of this arm has finished: it needs nothing to run"))
            continue
        checks += _arm(arm)
    from harness.measure.backends import backend_named

    if backend_named(backend).gpus:   # a GPU backend: is a CUDA device visible
        checks.append(_cuda())
    checks += _store(db, transcripts_dir)
    return PreflightReport(ok=all(c.ok for c in checks), checks=checks)


class StoredRegistration(BaseModel):
    """A registration as the store holds it, read without writing: its digest, spec and finished runs."""

    model_config = ConfigDict(frozen=True)
    spec_sha256: str
    spec: Any                            # the registered spec, decoded
    finished: list[tuple[str, int]]      # (arm, seed) with a finished campaign


def stored_registration(reg_id: str, db: str) -> StoredRegistration | None:
    """The registration ``reg_id`` in ``db``, read through a read-only store (SQLite opened so that no
    byte changes beside the file; nothing created), or None when the store or the registration does not
    exist or cannot be read (the store check says why)."""
    from harness.store import open_read_only

    try:
        store = open_read_only(db, follow_writers=False)
    except Exception:  # noqa: BLE001 - unreadable here means "not known"; the store check reports it
        return None
    try:
        reg = store.preregistration(reg_id)
        if reg is None:
            return None
        finished = [(str(c.arm), c.seed) for c in store.campaigns(preregistration_id=reg_id)
                    if store.campaign_outcome(c.id) is not None]
    except Exception:  # noqa: BLE001 - e.g. an empty PostgreSQL database has no tables yet
        return None
    finally:
        store.close()
    return StoredRegistration(spec_sha256=reg.spec_sha256, spec=reg.spec, finished=finished)


def _pending_arms(spec: Any, db: str) -> set[str] | None:
    """Arms that still have a seed to run when ``spec`` is already registered (same digest) in ``db``;
    None when it is not registered there. Why: re-deciding a finished A/B must not need its API keys."""
    stored = stored_registration(spec.id, db)
    if stored is None or stored.spec_sha256 != spec.digest:
        return None
    finished = set(stored.finished)
    return {a.name for a in (spec.control, spec.treatment) if any((a.name, s) not in finished for s in spec.seeds)}


def _task(task: str) -> Check:
    from harness.errors import HarnessError
    from harness.tuning.subjects import load_subject

    try:
        subject = load_subject(task)
    except (HarnessError, OSError, ValueError) as exc:
        return Check(check="task", ok=False, detail=f"{task!r} does not load: {_line(exc)}")
    return Check(check="task", ok=True, detail=f"{subject.id} ({subject.kind})")


def _arm(arm: Any) -> list[Check]:
    """The arm's tuner resolves (spec known, transcript readable, key present), its config is one the
    tuner takes, and its endpoint answers."""
    from atb_agent.errors import MissingApiKeyError, TunerSpecError
    from atb_agent.tuners import ARM_CONFIG_KEYS, apply_arm_config, parse_spec

    name = arm.name
    try:
        parsed = parse_spec(arm.tuner)
    except TunerSpecError as exc:
        return [Check(check="tuner", arm=name, ok=False, detail=_line(exc))]
    out: list[Check] = []
    if parsed.kind in ("openai", "anthropic") and arm.base_url:
        out.append(_endpoint(name, parsed.kind, arm.base_url))
        if not out[-1].ok:
            return out
    elif arm.base_url and parsed.kind in ("random", "replay"):
        out.append(Check(check="endpoint", arm=name, ok=False,
                         detail=f"base_url {arm.base_url!r} given to {parsed.kind}, which calls no endpoint"))
        return out
    if parsed.kind == "random":
        unknown = sorted(set(arm.config) - set(ARM_CONFIG_KEYS))
        out.append(Check(check="tuner", arm=name, ok=True, detail="random (the harness's seeded search)"))
        out.append(Check(check="config", arm=name, ok=not unknown,
                         detail=f"unknown key(s) {', '.join(unknown)}; known: {', '.join(ARM_CONFIG_KEYS)}"
                         if unknown else "ok"))
        return out
    try:
        from atb_agent.campaign import _tuner_for

        tuner = _tuner_for(arm.tuner, arm.base_url)
    except MissingApiKeyError as exc:
        return out + [Check(check="api_key", arm=name, ok=False, detail=_line(exc))]
    except (AgentError, OSError, ValueError) as exc:
        return out + [Check(check="tuner", arm=name, ok=False, detail=_line(exc))]
    except Exception as exc:  # noqa: BLE001 - a transcript or plug-in that fails to load is this arm's problem
        return out + [Check(check="tuner", arm=name, ok=False, detail=f"{type(exc).__name__}: {_line(exc)}")]
    out.append(Check(check="tuner", arm=name, ok=True, detail=arm.tuner))
    try:
        apply_arm_config(tuner, arm.config)
    except TunerSpecError as exc:
        out.append(Check(check="config", arm=name, ok=False, detail=_line(exc)))
    else:
        out.append(Check(check="config", arm=name, ok=True, detail="ok"))
    return out


def _endpoint(arm: str, kind: str, base_url: str) -> Check:
    """Does ``base_url`` answer HTTP? Any status is an answer (a 401 still proves the server is there);
    a refused connection, a timeout or a malformed URL is not."""
    import httpx

    url = base_url.rstrip("/") + ("/models" if kind == "openai" else "/v1/models")
    try:
        with httpx.Client(timeout=PROBE_TIMEOUT_S, trust_env=False) as client:
            status = client.get(url).status_code
    except (httpx.HTTPError, ValueError) as exc:
        return Check(check="endpoint", arm=arm, ok=False, detail=f"{base_url} is not reachable ({_line(exc)}); "
                     "start the server (e.g. `atb model serve`) or fix base_url / --base-url")
    return Check(check="endpoint", arm=arm, ok=True, detail=f"{base_url} answered HTTP {status}")


def _cuda() -> Check:
    try:
        import torch

        ok = bool(torch.cuda.is_available())
    except ImportError:
        ok = False
    return Check(check="backend", ok=ok, detail="CUDA available" if ok else "--backend cuda but no CUDA device")


def _store(db: str, transcripts_dir: Path | None) -> list[Check]:
    from harness.store._open import sqlite_path, store_kind
    from harness.store import StoreError

    try:
        kind = store_kind(db)
    except StoreError as exc:
        return [Check(check="store", ok=False, detail=_line(exc))]
    checks = [_sqlite_writable(sqlite_path(db)) if kind == "sqlite" else _pg_writable(db)]
    if kind == "postgresql":
        from atb_agent.campaign import transcripts_home

        home = transcripts_home(db, transcripts_dir)
        checks.append(_dir_writable(home, "transcripts"))
    return checks


def _dir_writable(path: Path, what: CheckName) -> Check:
    """``path`` (or its nearest existing ancestor, which a run would create it under) is writable."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    ok = probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)
    return Check(check=what, ok=ok, detail=f"{path} is writable" if ok else f"cannot write in {probe}")


def _sqlite_writable(path: Path) -> Check:
    """The file is a SQLite database we may write (opened read-only here), or its folder exists and is
    writable so it can be created; SQLite also needs the folder for its journal files."""
    folder = path.resolve().parent
    if not folder.is_dir():
        return Check(check="store", ok=False, detail=f"the folder of --db {path} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        return Check(check="store", ok=False, detail=f"cannot write in {folder} (the store and its journal live there)")
    if not path.exists():
        return Check(check="store", ok=True, detail=f"{path} will be created")
    if not path.is_file() or not os.access(path, os.R_OK | os.W_OK):
        return Check(check="store", ok=False, detail=f"--db {path} is not a writable file")
    from harness.store import StoreUnavailable, open_read_only

    try:
        open_read_only(path, follow_writers=False).close()
    except StoreUnavailable as exc:
        return Check(check="store", ok=False, detail=f"--db {path} is not a SQLite database ({_line(exc)})")
    return Check(check="store", ok=True, detail=f"{path} is writable")


def _pg_writable(url: str) -> Check:
    """The server answers and this user may write the results tables (or create them in an empty
    database) and the graph checkpointer's schema; read-only queries only."""
    from atb_agent._checkpointer import PG_SCHEMA
    from harness.store._postgres import pg_dsn, redact

    shown = redact(url)
    try:
        import psycopg
    except ImportError:
        return Check(check="store", ok=False, detail="the PostgreSQL store needs psycopg 3: pip install 'psycopg[binary]'")
    try:
        with psycopg.connect(pg_dsn(url), autocommit=True, connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT to_regclass('preregistrations') IS NOT NULL, "
                "has_database_privilege(current_database(), 'CREATE'), "
                "has_schema_privilege(current_schema(), 'CREATE'), "
                "to_regnamespace(%s) IS NOT NULL", (PG_SCHEMA,)).fetchone()
            assert row is not None
            installed, db_create, schema_create, graph_schema = (bool(x) for x in row)
            if installed:
                can = conn.execute("SELECT has_table_privilege('preregistrations', 'INSERT') AND "
                                   "has_table_privilege('campaigns', 'INSERT')").fetchone()
                if not (can and can[0]):
                    return Check(check="store", ok=False, detail=f"{shown}: this user may not insert into the results tables")
            elif not schema_create:
                return Check(check="store", ok=False, detail=f"{shown}: empty database and no CREATE on its schema")
            if graph_schema:
                ok = conn.execute("SELECT has_schema_privilege(%s, 'USAGE')", (PG_SCHEMA,)).fetchone()
                if not (ok and ok[0]):
                    return Check(check="store", ok=False, detail=f"{shown}: no access to schema {PG_SCHEMA}")
            elif not db_create:
                return Check(check="store", ok=False,
                             detail=f"{shown}: may not create schema {PG_SCHEMA} for the graph checkpoints")
    except psycopg.Error as exc:
        return Check(check="store", ok=False, detail=f"cannot reach the results store {shown}: {_line(exc)}")
    return Check(check="store", ok=True, detail=f"{shown} is writable")


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:400] or type(exc).__name__


__all__ = ["Check", "PreflightFailed", "PreflightReport", "StoredRegistration", "preflight_ab", "stored_registration"]
