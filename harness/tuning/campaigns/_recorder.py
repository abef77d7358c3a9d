"""The one way every tuner records a campaign: open, record each iteration once, finish.

The random-search baseline and the LLM tuner both write through :class:`CampaignRecorder`, so usable
iterations, best-so-far and outcomes mean the same thing for every arm of a comparison. Recording is
idempotent per index: a resumed run that re-records iteration ``i`` with the same candidate and verdict
gets the stored row back; with a different one it gets :class:`IterationConflict`, never a duplicate.

Sessions. A campaign starts in one measurement session; a resumed run (the process was killed, its
workers and session state are gone) measures in a new session of its own, attached to the campaign
before anything is measured (:meth:`CampaignRecorder.attach_session`, stored as a ``campaign_session``
report naming the campaign and the session). What keeps the numbers honest:

* every verdict's ratio is still taken within one session (the store's ``cross_session_ratio`` rule:
  candidate and eager baseline measured interleaved in the same evaluation, same session);
* every session of a campaign is on the campaign's device fingerprint and under its protocol digest
  (checked when a session is attached, and again for each verdict recorded);
* a verdict is recorded only if it was measured in one of the campaign's own sessions, so a verdict
  made for anything else cannot be slotted into a campaign.

Iterations of one campaign are then compared across sessions exactly as ``atb compare`` compares two
runs: ratios on the same device under the same protocol, never raw times.
"""

from __future__ import annotations

import logging
from typing import Any

from harness.records import SubjectKind, canonical_json, new_id
from harness.store import CampaignRow, Checkpoint, ResultStore, StoreError
from harness.tuning.campaigns._errors import CampaignError, IterationConflict
from harness.tuning.campaigns._models import (
    CampaignOutcome, CampaignSummary, IterationRecord, IterationUsage, OutcomeStatus,
)
from harness.tuning.campaigns._store import (
    add_campaign, add_outcome, get_campaign, get_iterations, get_outcome, insert_row, now, stamp,
)
from harness.tuning.campaigns._summary import summarize, truncated_fraction
from harness.tuning.campaigns._usability import assess_usability
from protocol import Protocol


_log = logging.getLogger(__name__)


def sign_campaign_end(store: ResultStore, campaign_id: str) -> Checkpoint | None:
    """The campaign-end hook (issue 27): sign the store's head now that the campaign's outcome is stored,
    so every row of the campaign is covered by a checkpoint and a campaign appended by someone without
    the key stays visibly outside any signature (``atb store verify`` counts it as unsigned).

    A key that cannot be made or a store that refuses the row does not undo the campaign (its rows are
    stored and verify as they are): it is logged, the rows stay unsigned, and ``atb store checkpoint``
    can sign them later. Returns the checkpoint, or None when none was written.
    """
    try:
        return store.checkpoint()
    except StoreError as exc:
        _log.warning("campaign %s: no checkpoint was signed at its end (%s); its rows stay unsigned until "
                     "`atb store checkpoint --db %s`", campaign_id, exc, store.path)
        return None


SESSION_REPORT_KIND = "campaign_session"
"""Report kind of a session attached to a campaign after its first (a resumed run's session)."""

SANDBOX_REPORT_KIND = "campaign_sandbox"
"""Report kind of the tuner's sandbox a resumed run started (the first run's is in the campaign's
``config['sandbox']``): which backend, over which root and why (issue 26)."""


def campaign_sandboxes(store: ResultStore, campaign_id: str) -> list[dict[str, Any]]:
    """The tuner's sandbox of every run of a campaign, in order: the first run's (``config['sandbox']``),
    then each resumed run's (``campaign_sandbox`` reports). Empty for a campaign with no sandbox (random
    search) or one recorded before sandboxes were recorded.

    Raises:
        NotFound: no such campaign.
    """
    first = get_campaign(store, campaign_id).config.get("sandbox")
    out = [first] if isinstance(first, dict) else []
    for rep in store.reports(SANDBOX_REPORT_KIND, campaign_id):
        sandbox = rep["body"].get("sandbox")
        if isinstance(sandbox, dict):
            out.append(sandbox)
    return out


_RESUME_KEYS = ("task_id", "kind", "tuner_spec", "seed", "budget", "preregistration_id", "arm")


class CampaignRecorder:
    """Records one campaign in a store under a verified protocol."""

    def __init__(self, store: ResultStore, protocol: Protocol, info: CampaignRow) -> None:
        self.store = store
        self.protocol = protocol
        self.info = info
        self.checkpoint: Checkpoint | None = None   # signed at the campaign's end (finish)

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, store: ResultStore, protocol: Protocol, *, task_id: str, kind: SubjectKind,
             tuner_spec: str, seed: int, budget: int, session_id: str,
             preregistration_id: str | None = None, arm: str | None = None,
             config: dict[str, Any] | None = None, campaign_id: str | None = None) -> "CampaignRecorder":
        """Start a new campaign, or resume ``campaign_id`` if it is stored with the same parameters.

        Raises:
            CampaignError: ``campaign_id`` is stored with other parameters, or a registration is
                claimed without an arm (or the other way round).
            IngestRejected: the store refused the campaign (unknown session or registration).
        """
        ref = protocol.ref()
        if (preregistration_id is None) != (arm is None):
            raise CampaignError("a campaign claims a pre-registration and an arm together, or neither")
        if campaign_id is not None and store.campaign(campaign_id) is not None:
            rec = cls.check_resume(store, protocol, campaign_id, task_id=task_id, kind=kind, tuner_spec=tuner_spec,
                                   seed=seed, budget=budget, preregistration_id=preregistration_id, arm=arm)
            rec.attach_session(session_id)
            return rec
        session = store.session(session_id)
        info = CampaignRow(
            id=campaign_id or new_id("run"), task_id=task_id, kind=kind, tuner_spec=tuner_spec, seed=seed,
            budget=budget, session_id=session_id, device_sha256=session["device_sha256"],
            protocol_version=ref.version, protocol_sha256=ref.sha256, preregistration_id=preregistration_id,
            arm=arm, config=dict(config or {}), created_at=now())
        add_campaign(store, info)
        return cls(store, protocol, info)

    @classmethod
    def resume(cls, store: ResultStore, protocol: Protocol, campaign_id: str) -> "CampaignRecorder":
        """Reopen a stored campaign to record its missing iterations.

        Raises:
            NotFound: no such campaign.
            CampaignError: the campaign was made under another protocol digest, or has finished.
        """
        info = get_campaign(store, campaign_id)
        if info.protocol_sha256 != protocol.sha256:
            raise CampaignError(f"campaign {campaign_id} was recorded under protocol {info.protocol_sha256[:12]}…, "
                                f"not the loaded {protocol.sha256[:12]}…; it cannot be resumed")
        return cls(store, protocol, info)

    @classmethod
    def check_resume(cls, store: ResultStore, protocol: Protocol, campaign_id: str, **wanted: Any) -> "CampaignRecorder":
        """Reopen ``campaign_id`` and check it is the campaign asked for, writing nothing.

        Call it before opening a measurement session for a resume, so a refused resume leaves no
        session and no verdict behind. ``wanted`` holds any of the campaign's parameters (task_id,
        kind, tuner_spec, seed, budget, preregistration_id, arm) to compare with the stored ones.

        Raises:
            NotFound: no such campaign.
            CampaignError: another protocol digest, or a parameter differs (the message lists them).
        """
        unknown = sorted(set(wanted) - set(_RESUME_KEYS))
        if unknown:
            raise TypeError(f"check_resume got unknown parameters {unknown}")
        rec = cls.resume(store, protocol, campaign_id)
        differs = {k: (getattr(rec.info, k), v) for k, v in wanted.items() if getattr(rec.info, k) != v}
        if differs:
            raise CampaignError(f"campaign {campaign_id} is stored with other parameters "
                                f"(stored, asked): {differs}; resume it with the same arguments or start a new campaign")
        return rec

    def finished(self) -> bool:
        return get_outcome(self.store, self.info.id) is not None

    # ------------------------------------------------------------------ sessions
    def sessions(self) -> list[str]:
        """The measurement sessions this campaign measures in: its first, then each attached one."""
        out = [self.info.session_id]
        for rep in self.store.reports(SESSION_REPORT_KIND, self.info.id):
            sid = rep["body"].get("session_id")
            if isinstance(sid, str) and sid not in out:
                out.append(sid)
        return out

    def check_session(self, session_id: str) -> None:
        """Raise unless ``session_id`` could be a session of this campaign (same device, same protocol).

        Raises:
            NotFound: no such session.
            CampaignError: the session is on another device fingerprint or under another protocol digest.
        """
        row = self.store.session(session_id)
        if row["device_sha256"] != self.info.device_sha256:
            raise CampaignError(f"session {session_id} measures on device {str(row['device_sha256'])[:12]}…, campaign "
                                f"{self.info.id} on {self.info.device_sha256[:12]}…: a campaign resumes only on the "
                                "device it started on")
        if row["protocol_sha256"] is not None and row["protocol_sha256"] != self.info.protocol_sha256:
            raise CampaignError(f"session {session_id} runs under another protocol digest than campaign {self.info.id}")

    def attach_session(self, session_id: str) -> None:
        """Make ``session_id`` (a resumed run's new session) one of this campaign's sessions.

        Idempotent. Call it right after the session is opened and before anything is measured in it.

        Raises:
            NotFound, CampaignError: see :meth:`check_session`; also when the campaign has finished.
        """
        if session_id in self.sessions():
            return
        if self.finished():
            raise CampaignError(f"campaign {self.info.id} has finished; it takes no new session")
        self.check_session(session_id)
        self.store.add_report(SESSION_REPORT_KIND, self.info.id,
                              {"campaign_id": self.info.id, "session_id": session_id,
                               "device_sha256": self.info.device_sha256, "attached_at": now(),
                               "why": "resumed run"}, self.protocol.ref())

    def note_sandbox(self, sandbox: dict[str, Any], session_id: str | None = None) -> None:
        """Record the tuner's sandbox a resumed run of this campaign started (``sandbox``: its backend,
        root, image, root identity and selection reasons). A new campaign keeps its first run's in
        ``config['sandbox']`` instead; :func:`campaign_sandboxes` reads both."""
        self.store.add_report(SANDBOX_REPORT_KIND, self.info.id,
                              {"campaign_id": self.info.id, "session_id": session_id, "sandbox": dict(sandbox),
                               "recorded_at": now(), "why": "resumed run"}, self.protocol.ref())

    # ------------------------------------------------------------------ iterations
    @property
    def campaign_id(self) -> str:
        return self.info.id

    def recorded(self) -> dict[int, IterationRecord]:
        return {it.idx: it for it in get_iterations(self.store, self.info.id)}

    def next_index(self) -> int | None:
        """The first index not yet recorded, or None when the budget is spent."""
        done = self.recorded()
        for i in range(self.info.budget):
            if i not in done:
                return i
        return None

    def record(self, idx: int, *, verdict_id: str | None, candidate_sha256: str | None = None,
               built: bool = True, no_verdict_reason: str = "", usage: IterationUsage | None = None,
               detail: dict[str, Any] | None = None) -> IterationRecord:
        """Store iteration ``idx`` exactly once and return it as read back.

        Usability is decided here from the stored verdict (never from the tuner's own claims).

        Raises:
            CampaignError: the campaign has finished, ``idx`` is outside the budget, or the verdict was
                measured in another session, on another device, task or protocol.
            IterationConflict: ``idx`` is already stored with a different candidate or verdict.
            IngestRejected: the store refused the row.
        """
        if get_outcome(self.store, self.info.id) is not None:
            raise CampaignError(f"campaign {self.info.id} has finished; it takes no more iterations")
        if not 0 <= idx < self.info.budget:
            raise CampaignError(f"iteration {idx} is outside the budget of {self.info.budget} (0..{self.info.budget - 1})")
        verdict = self.store.verdict(verdict_id) if verdict_id is not None else None
        if verdict is not None:
            self._check_verdict_origin(verdict.session_id, verdict.device_sha256, verdict.task_id,
                                       verdict.protocol.sha256)
            if candidate_sha256 is not None and candidate_sha256 != verdict.candidate_sha256:
                raise CampaignError(f"iteration {idx}: the candidate {candidate_sha256[:12]}… is not the one "
                                    f"verdict {verdict.id} judged ({verdict.candidate_sha256[:12]}…)")
            candidate_sha256 = verdict.candidate_sha256
        existing = self.recorded().get(idx)
        if existing is not None:
            if existing.verdict_id == verdict_id and existing.candidate_sha256 == candidate_sha256:
                return existing
            raise IterationConflict(
                f"iteration {idx} of campaign {self.info.id} is already stored with candidate "
                f"{existing.candidate_sha256} and verdict {existing.verdict_id}; the resumed run produced "
                f"candidate {candidate_sha256} and verdict {verdict_id}")
        usable, reason = assess_usability(verdict, self.protocol, built=built, no_verdict_reason=no_verdict_reason)
        u = usage or IterationUsage()
        insert_row(self.store, "iterations", {
            "campaign_id": self.info.id, "idx": idx, "candidate_sha256": candidate_sha256,
            "verdict_id": verdict_id, "usable": int(usable), "unusable_reason": reason,
            "tokens_in": u.tokens_in, "tokens_out": u.tokens_out, "cost_usd": u.cost_usd,
            "model_calls": u.model_calls, "truncated_calls": u.truncated_calls,
            "detail_json": canonical_json(detail or {}), "created_at": now(), **stamp(self.protocol.ref())})
        return self.recorded()[idx]

    def _check_verdict_origin(self, session_id: str, device: str, task_id: str, protocol_sha: str) -> None:
        problems = []
        sessions = self.sessions()
        if session_id not in sessions:
            problems.append(f"session {session_id} (campaign's: {', '.join(sessions)})")
        if device != self.info.device_sha256:
            problems.append("another device fingerprint")
        if task_id != self.info.task_id:
            problems.append(f"task {task_id!r} (campaign's: {self.info.task_id!r})")
        if protocol_sha != self.info.protocol_sha256:
            problems.append("another protocol digest")
        if problems:
            raise CampaignError(f"a verdict for campaign {self.info.id} was measured in " + "; ".join(problems)
                                + ": every iteration of a campaign is measured in one of its own sessions")

    # ------------------------------------------------------------------ finishing
    def finish(self, status: OutcomeStatus | None = None, reason: str = "",
               detail: dict[str, Any] | None = None) -> CampaignOutcome:
        """Store the campaign's outcome once (a second call returns the stored one if it agrees).

        With no ``status``: ``infrastructure_defect`` when the truncated fraction of model calls exceeds
        ``protocol.truncation.max_truncated_fraction``, ``aborted`` when fewer iterations than the budget
        are stored (the store refuses such a ``completed``), else ``completed``. A truncated run keeps its
        results but is excluded from comparisons.

        Raises:
            CampaignError: an outcome with a different status is already stored, or a non-completed
                status has no reason.
        """
        its = get_iterations(self.store, self.info.id)
        frac = truncated_fraction(its)
        cap = self.protocol.truncation.max_truncated_fraction
        if status is None:
            if frac > cap:
                status = "infrastructure_defect"
                reason = (f"{frac:.1%} of model calls were truncated, above the protocol's "
                          f"{cap:.1%}: a truncated run cannot stand for the model's ceiling")
            elif len(its) < self.info.budget:  # the store refuses 'completed' short of the budget (issue 14)
                status = "aborted"
                reason = f"the run stopped after {len(its)} of its {self.info.budget} iterations"
            else:
                status = "completed"
        if status != "completed" and not reason:
            raise CampaignError(f"an outcome of {status!r} needs a reason")
        stored = get_outcome(self.store, self.info.id)
        if stored is not None:
            if stored.status != status:
                raise CampaignError(f"campaign {self.info.id} already finished as {stored.status!r}")
            return stored
        body = {"iterations_recorded": len(its), "budget": self.info.budget, **(detail or {})}
        outcome = CampaignOutcome(campaign_id=self.info.id, status=status, truncated_fraction=frac,
                                  reason=reason, detail=body, created_at=now())
        add_outcome(self.store, outcome, self.protocol.ref())
        stored = get_outcome(self.store, self.info.id)
        if stored is None:
            raise CampaignError(f"the outcome of campaign {self.info.id} was not stored")
        self.checkpoint = sign_campaign_end(self.store, self.info.id)
        return stored

    def summary(self) -> CampaignSummary:
        return summarize(self.store, self.info.id)
