"""One attempt at one campaign, as a Ray task runs it: find the campaign, resume or start it, run it.

Why the whole campaign is one task: every verdict's measuring children (reference, candidate, start
candidate) are spawned by the process that runs the campaign, so they share its node and the one
device Ray gave it (``num_gpus=1`` sets ``CUDA_VISIBLE_DEVICES`` to that device before anything starts).
A ratio therefore never spans devices or nodes. If the worker dies, Ray runs this again (elsewhere,
perhaps) and the campaign resumes from the store: stored iterations are kept, none is stored twice
(the campaign machinery checks them against the tuner's sequence; the store's unique key refuses a
second row).
"""

from __future__ import annotations

import os
from typing import Any

from atb_agent.sweep._errors import CampaignFailed
from atb_agent.sweep._ledger import CONFIG_KEY, attempts, record_attempt, states
from atb_agent.sweep._node import node_fingerprint
from atb_agent.sweep._spec import CampaignKey


def run_attempt(key_data: dict[str, Any], *, budget: int, backend: str, base_url: str | None,
                db: str, transcripts_dir: str | None = None) -> dict[str, Any]:
    """Run (or resume) the campaign of ``key_data`` to its end and return what the store holds for it.

    ``transcripts_dir`` is where a campaign on a PostgreSQL store writes its transcript (the driver
    passes one absolute folder; a folder every node sees, on a multi-node cluster). An LLM or
    entry-point campaign on PostgreSQL checkpoints its graph on the same server, so a re-run on any
    node resumes it.

    Raises:
        CampaignFailed: the attempt raised (the message names the original type: a CampaignError,
            HarnessError, IngestRejected...). Not retried by Ray: an error is a result; only a dead
            worker is retried.
    """
    try:
        return _run_attempt(key_data, budget=budget, backend=backend, base_url=base_url, db=db,
                            transcripts_dir=transcripts_dir)
    except CampaignFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - carried across the process boundary as one string
        raise CampaignFailed(f"{type(exc).__name__}: {' '.join(str(exc).split())}") from None


def _run_attempt(key_data: dict[str, Any], *, budget: int, backend: str, base_url: str | None,
                 db: str, transcripts_dir: str | None = None) -> dict[str, Any]:
    from atb_agent.tuners import parse_spec
    from harness.store._open import open_store, sqlite_path, store_kind
    from protocol import load_protocol

    key = CampaignKey.model_validate(key_data)
    proto = load_protocol()
    ref = proto.ref()
    node = node_fingerprint()
    kind = parse_spec(key.tuner).kind
    store = open_store(db)
    try:
        state = states(store, [key])[key.key]
        if state.outcome is not None:        # finished before (a duplicate submission): nothing to repeat
            return {**state.model_dump(), "node_sha256": node.sha256, "ran": False}
        record_attempt(store, key, campaign_id=state.campaign_id or (key.campaign_id if kind == "random" else None),
                       node=node, pid=os.getpid(), attempt_of=len(attempts(store, key)) + 1, ref=ref)
        # an LLM, entry-point or replay campaign resumes from its graph checkpoint (a replay's recorded-call
        # cursor is put where the checkpoint stands): its stored iterations are kept, none is redone; a random
        # campaign runs under the key's campaign id, so a restarted one continues the stored iterations
        resume = key.campaign_id if kind == "random" else state.campaign_id
        store.close()                      # run_campaign opens its own connection to the store
        from atb_agent.campaign import CampaignSpec, run_campaign

        target: Any = sqlite_path(db) if store_kind(db) == "sqlite" else db
        config = {} if kind == "random" else {CONFIG_KEY: key.key, "sweep_id": key.sweep_id}
        run_campaign(CampaignSpec(task=key.task, tuner=key.run_tuner, budget=budget, seed=key.seed, store=target,
                                  base_url=base_url, resume=resume, backend=backend, config=config,
                                  transcripts_dir=transcripts_dir))
        store = open_store(db)
        final = states(store, [key])[key.key]
        return {**final.model_dump(), "node_sha256": node.sha256, "ran": True}
    finally:
        store.close()


__all__ = ["run_attempt"]
