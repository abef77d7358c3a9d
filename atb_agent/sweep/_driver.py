"""The sweep driver: one attempt per unfinished campaign, progress polled from the shared store.

Why the store and not the executor decides what to run: the store outlives any Ray cluster or process.
A restarted driver registers the same sweep (same spec, same id), finds every finished campaign there
and submits only the others, each of which resumes from its stored iterations. The executor supplies
placement and re-runs an attempt whose process died (``max_retries``); the re-run resumes rather than
repeats. Ray is the executor by default (:class:`~atb_agent.sweep._executor.RayExecutor`: one GPU per
campaign on CUDA, ``cpus_per_campaign`` CPUs on CPU); ``local=True`` runs the campaigns as processes of
this machine instead (:class:`~atb_agent.sweep._local.LocalExecutor`, for a GPU host without Ray).
"""

from __future__ import annotations

import signal
import socket
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, Literal

from pydantic import BaseModel

from atb_agent.sweep._errors import SweepError
from atb_agent.sweep._executor import AttemptArgs, Executor, installed_ray_version
from atb_agent.sweep._ledger import CampaignState, attempts, register_sweep, states
from atb_agent.sweep._progress import ProgressRow, ProgressTable
from atb_agent.sweep._spec import CampaignKey, ResolvedSweep
from sandbox._cgroup import pid_alive

CampaignStatus = Literal["done", "failed", "unfinished"]
POLL_S = 1.0


class CampaignResult(BaseModel):
    key: str
    task_id: str
    tuner: str
    seed: int
    campaign_id: str | None
    status: CampaignStatus
    outcome: str | None
    iterations: int
    usable: int
    attempts: int
    ran_now: bool
    error: str | None = None


class SweepResult(BaseModel):
    sweep_id: str
    spec_sha256: str
    store: str
    ray_address: str
    ray_version: str
    executor: Literal["ray", "local"] = "ray"   # where the campaigns ran: Ray, or processes of this machine
    restarted: bool
    budget: int
    campaigns: list[CampaignResult]
    done: int
    failed: int
    iterations: int
    usable_iterations: int
    wall_s: float


def redact(url: str) -> str:
    """A store URL without its password, fit for output and logs."""
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    cred, host = rest.rsplit("@", 1)
    user = cred.split(":", 1)[0]
    return f"{scheme}://{user}@{host}"


def normalise_db(db: str) -> str:
    """An absolute SQLite path (workers do not share the driver's working directory), or the URL as given."""
    from harness.store._open import sqlite_path, store_kind

    if store_kind(db) == "sqlite":
        return str(sqlite_path(db).resolve())
    return db


def _transcripts_dir(db: str) -> str | None:
    """One absolute folder for the transcripts of a PostgreSQL store's campaigns (``$ATB_TRANSCRIPTS_DIR``,
    else the driver's working folder), handed to every worker: Ray workers do not share the driver's
    working folder. None for SQLite (transcripts sit beside the store file)."""
    from atb_agent.campaign import transcripts_home
    from harness.store._open import store_kind

    return None if store_kind(db) == "sqlite" else str(transcripts_home(db))


def _rows(sweep: ResolvedSweep, st: dict[str, CampaignState], running: set[str], failed: set[str],
          queued: set[str]) -> list[ProgressRow]:
    rows: dict[str, ProgressRow] = {t: ProgressRow(label=t) for t in sweep.spec.tuners}
    for k in sweep.campaigns:
        r, s = rows[k.tuner], st[k.key]
        r.campaigns += 1
        r.iterations += s.iterations
        r.usable += s.usable
        if k.key in failed:
            r.failed += 1
        elif s.outcome is not None and k.key not in queued:
            r.done += 1
        elif k.key in running:
            r.running += 1
        else:
            r.pending += 1
    return list(rows.values())


class _Stop(Exception):
    """SIGTERM: stop the sweep like Ctrl-C (workers cancelled, cluster shut down, store left resumable)."""


def run_sweep(sweep: ResolvedSweep, *, db: str, ray_address: str | None = None, local: bool = False,
              progress: ProgressTable | None = None,
              on_poll: Callable[[dict[str, CampaignState]], None] | None = None) -> SweepResult:
    """Run every unfinished campaign of ``sweep``, writing to the store ``db``; return the tally.

    On Ray (``ray_address``, else a local Ray instance), or with ``local`` as processes of this machine.

    Raises:
        SweepError: Ray cannot be reached, or the sweep id is stored with another spec.
        StoreError: the store cannot be opened.
        KeyboardInterrupt: the sweep was stopped (Ctrl-C or SIGTERM); it resumes when run again.
    """
    if local and ray_address:
        raise SweepError("--local runs the campaigns here, without Ray: it cannot be given with --ray")
    from harness.store._open import open_store
    from protocol import load_protocol

    t0 = time.monotonic()
    db = normalise_db(db)
    args = AttemptArgs(budget=sweep.spec.budget, backend=sweep.spec.devices.backend, base_url=sweep.spec.base_url,
                       db=db, transcripts_dir=_transcripts_dir(db))
    proto = load_protocol()
    store = open_store(db)
    restarted = register_sweep(store, sweep, proto.ref())
    if restarted:
        _reap(None)                    # a driver that was killed outright left its campaigns' sandboxes
    start = states(store, sweep.campaigns)
    todo = [k for k in sweep.campaigns if start[k.key].outcome is None]
    if not todo:                       # every campaign finished in an earlier run: nothing to run
        store.close()
        return _tally(sweep, start, {}, {}, db=db, address="not started (nothing to run)",
                      ray_version="" if local else installed_ray_version(), restarted=restarted, t0=t0, local=local)
    executor: Executor
    if local:
        from atb_agent.sweep._local import LocalExecutor

        executor = LocalExecutor(sweep, args)
    else:
        from atb_agent.sweep._executor import RayExecutor

        executor = RayExecutor(sweep, args, ray_address)
    old_term = signal.signal(signal.SIGTERM, _raise_stop) if _main_thread() else None
    cap = min(x for x in (sweep.spec.devices.max_concurrent, executor.capacity, len(todo)) if x)
    waiting = list(todo)
    inflight: dict[Any, CampaignKey] = {}
    results: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    try:
        while waiting or inflight:
            while waiting and len(inflight) < cap:
                k = waiting.pop(0)
                inflight[executor.submit(k)] = k
            for handle in executor.wait(list(inflight), POLL_S):
                k = inflight.pop(handle)
                try:
                    results[k.key] = executor.result(handle)
                except Exception as exc:  # noqa: BLE001 - a campaign's failure is reported, the sweep goes on
                    errors[k.key] = _one_line(exc)
            st = states(store, sweep.campaigns)
            if on_poll is not None:
                on_poll(st)
            if progress is not None:
                running = {k.key for k in inflight.values() if st[k.key].attempts > start[k.key].attempts}
                queued = {k.key for k in inflight.values()}
                progress.update(_rows(sweep, st, running, set(errors), queued))
    except _Stop:
        raise KeyboardInterrupt from None
    finally:
        cancelled = list(inflight.values())
        for handle in inflight:
            executor.cancel(handle)
        executor.shutdown()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        if cancelled:
            reap_cancelled(store, cancelled)
        final = states(store, sweep.campaigns)
        store.close()
        if progress is not None:
            progress.close()
    return _tally(sweep, final, results, errors, db=db, address=executor.address, ray_version=executor.version,
                  restarted=restarted, t0=t0, local=local)


def reap_cancelled(store: Any, keys: list[CampaignKey], wait_s: float = 15.0, removal_s: float = 90.0) -> None:
    """Remove what the campaigns cancelled by a stop left on this host: a force-cancelled Ray worker dies
    without closing its sandbox, so its container (Docker) or workspace would outlive the sweep.

    The workers that took those campaigns up on this host are known by the pids of their attempt rows.
    Waits up to ``wait_s`` for them to be gone, then removes every sandbox whose owner process is dead
    (:func:`sandbox.cleanup_leftovers`; a live run's sandbox is never touched), and goes on asking for up
    to ``removal_s`` until none of their containers is listed: on vfs under load one removal can outlast
    the client's timeout (a single pass once left the container up, still being removed, as the sweep
    ended), and a worker that died late is reaped by a later pass. Campaigns on other nodes are not
    reached: ``atb sandbox cleanup`` there.
    """
    from sandbox import containers_owned_by

    host = socket.gethostname()
    pids: list[int] = []
    for k in keys:
        tries = attempts(store, k)
        if tries and tries[-1]["body"].get("node", {}).get("hostname") == host:
            pid = tries[-1]["body"].get("pid")
            if isinstance(pid, int):
                pids.append(pid)
    deadline = time.monotonic() + wait_s
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    containers: set[str] = set()
    workspaces: set[str] = set()
    seen: set[str] = set()                         # listed after a pass: removal still under way
    deadline = time.monotonic() + removal_s
    while True:
        _remove_leftovers(containers, workspaces)
        left = containers_owned_by(pids)
        seen.update(left)
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    containers.update(seen.difference(left))       # a removal that outlasted its request finished meanwhile
    _say_removed(containers, workspaces, f"{len(keys)} cancelled campaign(s)")
    if left:
        print(f"atb sweep: {len(left)} sandbox container(s) of the cancelled campaign(s) still there after "
              f"{removal_s:.0f} s ({', '.join(left)}); `atb sandbox cleanup` removes them once their worker "
              "is gone", file=sys.stderr, flush=True)


def _reap(cancelled: int | None) -> None:
    containers: set[str] = set()
    workspaces: set[str] = set()
    _remove_leftovers(containers, workspaces)
    why = f"{cancelled} cancelled campaign(s)" if cancelled is not None else "an earlier run of the sweep"
    _say_removed(containers, workspaces, why)


def _remove_leftovers(containers: set[str], workspaces: set[str]) -> None:
    from sandbox import cleanup_leftovers

    report = cleanup_leftovers()
    containers.update(report.containers_removed)
    workspaces.update(report.workspaces_removed)


def _say_removed(containers: set[str], workspaces: set[str], why: str) -> None:
    if containers or workspaces:
        print(f"atb sweep: removed {len(containers)} sandbox container(s) and "
              f"{len(workspaces)} workspace(s) left by {why}", file=sys.stderr, flush=True)


def _tally(sweep: ResolvedSweep, final: dict[str, CampaignState], results: dict[str, Any], errors: dict[str, str],
           *, db: str, address: str, ray_version: str, restarted: bool, t0: float, local: bool) -> SweepResult:
    out: list[CampaignResult] = []
    for k in sweep.campaigns:
        s = final[k.key]
        status: CampaignStatus = ("failed" if k.key in errors or s.outcome in ("aborted",)
                                  else "done" if s.outcome is not None else "unfinished")
        out.append(CampaignResult(key=k.key, task_id=k.task_id, tuner=k.tuner, seed=k.seed, campaign_id=s.campaign_id,
                                  status=status, outcome=s.outcome, iterations=s.iterations, usable=s.usable,
                                  attempts=s.attempts, ran_now=k.key in results or k.key in errors,
                                  error=errors.get(k.key)))
    return SweepResult(
        sweep_id=sweep.sweep_id, spec_sha256=sweep.spec_sha256, store=redact(db), ray_address=address,
        ray_version=ray_version, executor="local" if local else "ray", restarted=restarted, budget=sweep.spec.budget,
        campaigns=out,
        done=sum(c.status == "done" for c in out), failed=sum(c.status != "done" for c in out),
        iterations=sum(c.iterations for c in out), usable_iterations=sum(c.usable for c in out),
        wall_s=round(time.monotonic() - t0, 3))


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop()


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _one_line(exc: BaseException) -> str:
    from atb_agent.sweep._errors import CampaignFailed

    cause = getattr(exc, "cause", None)
    inner = cause if isinstance(cause, BaseException) else exc
    text = " ".join(str(inner).split())
    if isinstance(inner, CampaignFailed):
        return text[:2000]
    return f"{type(inner).__name__}: {text[:2000]}"


__all__ = ["CampaignResult", "SweepResult", "normalise_db", "reap_cancelled", "redact", "run_sweep"]
