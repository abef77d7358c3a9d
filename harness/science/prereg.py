"""Pre-registered A/B comparisons of tuner variants, and the treatment-delivery checkpoint.

An A/B spec (hypothesis, the two arms, what differs, the primary metric, usability bars, budget, seeds
and the decision rule) is registered in the store with its digest *before* either arm runs; arms
claim it through their campaign rows. The registration is immutable: the table is append-only in SQL,
and re-registering a changed spec under the same id is refused here with a message saying so.

After the runs, the checkpoint asks whether the treatment actually reached the model: its marker must
be in the treatment arm's recorded model requests and absent from the control arm's, and the arms'
trajectories must not be byte-identical replays of each other. A comparison failing it is *void*,
with the evidence, whatever its numbers say. This module reads recordings handed to it as bytes
(:class:`ArmRecording`); the harness never imports the transcript package.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.errors import HarnessError, IncomparableError
from harness.records import canonical_json, sha256_text, utc_now
from harness.store import CampaignRow, IngestRejected, ResultStore
from harness.tuning.campaigns import get_outcome, list_campaigns, summarize
from harness.tuning.compare import ComparisonResult, compare_runs
from protocol import Protocol, require_released

PrimaryMetric = Literal["best_speedup", "usable_iterations"]


class PreregistrationError(HarnessError):
    """A spec is malformed, does not fit the protocol, or its runs do not match what was registered."""


class RegistrationEdited(PreregistrationError):
    """A spec with a registered id was changed: registrations cannot be edited; register a new id."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArmSpec(_Frozen):
    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    tuner: str = Field(min_length=1, description="tuner spec as `atb run --tuner` takes it")
    config: dict[str, Any] = Field(default_factory=dict, description="tuner options, e.g. a prompt variant")
    base_url: str | None = Field(default=None, min_length=1, description=(
        "the model endpoint this arm's tuner calls (an OpenAI/Anthropic-compatible server); None: the "
        "provider's default, or `atb ab --base-url`. Part of the registered digest"))


class UsabilityBars(_Frozen):
    ci_relative_halfwidth_max: float = Field(gt=0, description="must equal the protocol's usability bar")
    min_usable_iterations: int = Field(default=1, ge=0, description="an arm below this cannot win a seed")


class DecisionRule(_Frozen):
    """How per-seed results become a decision.

    A seed counts for the treatment when, on the primary metric, the treatment is better beyond noise
    (best speedup: :func:`harness.tuning.compare.compare_runs` says beyond noise; usable iterations: at least
    ``min_usable_difference`` more). The treatment wins when at least ``min_seed_wins`` seeds count for
    it and none counts for the control; it loses symmetrically; otherwise the result is inconclusive.
    """

    min_seed_wins: int = Field(ge=1)
    min_usable_difference: int = Field(default=1, ge=1)


class ABSpec(_Frozen):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    hypothesis: str = Field(min_length=10)
    task: str = Field(min_length=1)
    control: ArmSpec
    treatment: ArmSpec
    differs: str = Field(min_length=3, description="what differs between the arms, in words")
    treatment_marker: str = Field(min_length=4, description="text present only in the treatment's model requests")
    primary_metric: PrimaryMetric
    usability: UsabilityBars
    budget: int = Field(gt=0)
    seeds: list[int] = Field(min_length=1)
    decision_rule: DecisionRule

    @model_validator(mode="after")
    def _shape(self) -> "ABSpec":
        if self.control.name == self.treatment.name:
            raise ValueError("the control and treatment arms need different names")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError("seeds must be distinct")
        if self.decision_rule.min_seed_wins > len(self.seeds):
            raise ValueError(f"min_seed_wins {self.decision_rule.min_seed_wins} exceeds the {len(self.seeds)} seeds")
        return self

    def arm(self, name: str) -> ArmSpec:
        for a in (self.control, self.treatment):
            if a.name == name:
                return a
        raise PreregistrationError(f"spec {self.id} has no arm {name!r} (arms: {self.control.name}, {self.treatment.name})")

    def registered_json(self) -> dict[str, Any]:
        """The spec as registered and hashed. An arm without a ``base_url`` is written without the key,
        so a spec registered before arms had endpoints keeps its digest."""
        doc = self.model_dump(mode="json")
        for arm in ("control", "treatment"):
            if doc[arm].get("base_url") is None:
                doc[arm].pop("base_url", None)
        return doc

    @property
    def digest(self) -> str:
        return sha256_text(canonical_json(self.registered_json()))


class Registration(_Frozen):
    id: str
    spec: ABSpec
    spec_sha256: str
    protocol_sha256: str
    created_at: str


def load_spec(path: Path | str) -> ABSpec:
    """Read an A/B spec from YAML or JSON.

    Raises:
        PreregistrationError: the file is missing, does not parse, or is not a valid spec (naming the field).
    """
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise PreregistrationError(f"cannot read the A/B spec {p}: {exc}") from exc
    try:
        return ABSpec.model_validate(data)
    except ValidationError as exc:
        raise PreregistrationError(f"{p} is not a valid A/B spec: {exc}") from exc


def get_registration(store: ResultStore, reg_id: str) -> Registration | None:
    """The stored registration, its digest re-checked against its stored spec."""
    r = store.preregistration(reg_id)
    if r is None:
        return None
    spec = ABSpec.model_validate(r.spec)
    if spec.digest != r.spec_sha256:
        raise PreregistrationError(f"registration {reg_id}'s stored spec does not hash to its stored digest")
    return Registration(id=r.id, spec=spec, spec_sha256=r.spec_sha256, protocol_sha256=r.protocol_sha256,
                        created_at=r.created_at)


def register(store: ResultStore, spec: ABSpec, protocol: Protocol, *, allow_draft: bool = False) -> Registration:
    """Register ``spec`` before its arms run; registering the identical spec again returns the stored one.

    A draft protocol (digest not released) is refused before anything is stored, unless ``allow_draft``
    (``atb ab --allow-draft-protocol``): an A/B decided under bars anyone can relock is not a finding.

    Raises:
        DraftProtocolRefused: a draft protocol without ``allow_draft``.
        RegistrationEdited: the id is registered with a different spec (the message gives both digests).
        PreregistrationError: the spec's usability bar is not the protocol's, its id is registered under
            another protocol, or the store refused the row.
    """
    require_released(protocol, f"register A/B {spec.id}", allow_draft=allow_draft)
    bar = protocol.usability.ci_relative_halfwidth_max
    if spec.usability.ci_relative_halfwidth_max != bar:
        raise PreregistrationError(
            f"spec {spec.id} sets ci_relative_halfwidth_max {spec.usability.ci_relative_halfwidth_max}, but the "
            f"protocol's usability bar is {bar}: usable iterations are judged by the protocol; state its bar")
    same = arms_cannot_differ(spec)
    if same is not None:
        raise PreregistrationError(same)
    stored = get_registration(store, spec.id)
    if stored is not None:
        if stored.spec_sha256 != spec.digest:
            changed = spec_differences(stored.spec, spec)
            raise RegistrationEdited(
                f"A/B {spec.id} is already registered with digest {stored.spec_sha256[:16]}… (at "
                f"{stored.created_at}); this spec hashes to {spec.digest[:16]}…"
                + (f" (differs in {', '.join(changed)})" if changed else "") + ". A registration cannot be "
                "edited: register the changed spec under a new id")
        if stored.protocol_sha256 != protocol.sha256:
            raise PreregistrationError(f"A/B {spec.id} was registered under protocol {stored.protocol_sha256[:12]}…, "
                                       f"not the loaded {protocol.sha256[:12]}…; register it again under a new id")
        return stored
    ref = protocol.ref()
    try:
        store.append("preregistrations", {
            "id": spec.id, "spec_sha256": spec.digest, "spec_json": canonical_json(spec.registered_json()),
            "protocol_version": ref.version, "protocol_sha256": ref.sha256, "created_at": utc_now()})
    except IngestRejected as exc:
        raise PreregistrationError(f"the store refused registration {spec.id}: {exc}") from exc
    reg = get_registration(store, spec.id)
    assert reg is not None
    return reg


def arms_cannot_differ(spec: ABSpec) -> str | None:
    """Why the two arms cannot differ (same tuner, same config, same endpoint), or None when they can.

    Why refuse at registration: such an A/B fails the treatment-delivery checkpoint by construction
    (the marker is in both arms or neither, and the trajectories can be byte-identical); registering it
    would only spend an id on a void result.
    """
    c, t = spec.control, spec.treatment
    if (c.tuner, canonical_json(c.config), c.base_url) == (t.tuner, canonical_json(t.config), t.base_url):
        return (f"A/B {spec.id}: the arms {c.name!r} and {t.name!r} have the same tuner, config and endpoint, so "
                "the treatment cannot differ from the control; give the treatment arm its treatment")
    return None


def spec_differences(stored: ABSpec, new: ABSpec) -> list[str]:
    """The fields (``control.base_url``, ``budget``...) in which ``new`` differs from the registered ``stored``."""
    a, b = stored.registered_json(), new.registered_json()
    out: list[str] = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) == b.get(key):
            continue
        if isinstance(a.get(key), dict) and isinstance(b.get(key), dict):
            sub = sorted(k for k in set(a[key]) | set(b[key]) if a[key].get(k) != b[key].get(k))
            out += [f"{key}.{k}" for k in sub]
        else:
            out.append(key)
    return out


def claimed_runs(store: ResultStore, reg: Registration) -> list[CampaignRow]:
    """Runs claiming ``reg``, each checked against what was registered.

    Raises:
        PreregistrationError: a run started before the registration, or its task, tuner, budget, seed
            or arm is not the registered one.
    """
    runs = list_campaigns(store, preregistration_id=reg.id)
    spec = reg.spec
    for run in runs:
        problems = []
        if run.created_at < reg.created_at:
            problems.append("it started before the registration")
        if run.arm not in (spec.control.name, spec.treatment.name):
            problems.append(f"arm {run.arm!r} is not registered")
        elif run.tuner_spec != spec.arm(run.arm).tuner:
            problems.append(f"tuner {run.tuner_spec!r} is not the arm's registered {spec.arm(run.arm).tuner!r}")
        if run.task_id != spec.task:
            problems.append(f"task {run.task_id!r} is not the registered {spec.task!r}")
        if run.budget != spec.budget:
            problems.append(f"budget {run.budget} is not the registered {spec.budget}")
        if run.seed not in spec.seeds:
            problems.append(f"seed {run.seed} is not among the registered {spec.seeds}")
        if problems:
            raise PreregistrationError(f"run {run.id} claims A/B {reg.id} but " + "; ".join(problems))
    return runs


# ---------------------------------------------------------------------- treatment-delivery checkpoint
class ArmRecording(_Frozen):
    """What one arm's run sent to and got from the model, as recorded (bytes, base64 in JSON)."""

    campaign_id: str
    seed: int
    requests: list[bytes] = Field(default_factory=list)
    responses: list[bytes] = Field(default_factory=list)
    candidates: list[str | None] = Field(default_factory=list, description="candidate sha per iteration")

    def trajectory_sha256(self) -> str:
        h = hashlib.sha256()
        for body in self.responses:
            h.update(hashlib.sha256(body).digest())
        h.update(canonical_json(self.candidates).encode())
        return h.hexdigest()


class DeliveryCheck(_Frozen):
    delivered: bool
    void_reasons: list[str]
    evidence: dict[str, Any]


def marker_forms(marker: str) -> list[bytes]:
    """The byte forms the marker takes in a request body: raw UTF-8 and JSON-escaped (ASCII or not)."""
    forms = {marker.encode("utf-8"), json.dumps(marker)[1:-1].encode("utf-8"),
             json.dumps(marker, ensure_ascii=False)[1:-1].encode("utf-8")}
    return sorted(forms)


def _has_marker(body: bytes, forms: list[bytes]) -> bool:
    return any(f in body for f in forms)


def check_treatment_delivery(spec: ABSpec, treatment: list[ArmRecording], control: list[ArmRecording]) -> DeliveryCheck:
    """Did the treatment reach the model, and only in the treatment arm?

    Void when: the treatment arm recorded no model request; any treatment request lacks the marker; any
    control request carries it; or, for a seed, the two arms' trajectories (model responses and
    candidate sequence) are byte-identical, so one arm replayed the other.
    """
    forms = marker_forms(spec.treatment_marker)
    reasons: list[str] = []
    evidence: dict[str, Any] = {"marker": spec.treatment_marker, "per_seed": []}
    by_seed_c = {r.seed: r for r in control}
    for t in treatment:
        c = by_seed_c.get(t.seed)
        t_hits = sum(_has_marker(b, forms) for b in t.requests)
        c_hits = sum(_has_marker(b, forms) for b in c.requests) if c else 0
        row: dict[str, Any] = {
            "seed": t.seed, "treatment_run": t.campaign_id, "control_run": c.campaign_id if c else None,
            "treatment_requests": len(t.requests), "treatment_requests_with_marker": t_hits,
            "control_requests": len(c.requests) if c else 0, "control_requests_with_marker": c_hits,
            "treatment_trajectory_sha256": t.trajectory_sha256(),
            "control_trajectory_sha256": c.trajectory_sha256() if c else None,
        }
        evidence["per_seed"].append(row)
        if not t.requests:
            reasons.append(f"seed {t.seed}: the treatment run {t.campaign_id} recorded no model request, so "
                           "nothing shows the treatment reached a model")
        elif t_hits < len(t.requests):
            reasons.append(f"seed {t.seed}: {len(t.requests) - t_hits} of {len(t.requests)} treatment requests "
                           f"lack the marker {spec.treatment_marker!r}: the treatment did not reach the model")
        if c is None:
            reasons.append(f"seed {t.seed}: no control run to compare against")
            continue
        if c_hits:
            reasons.append(f"seed {t.seed}: {c_hits} control requests carry the treatment marker: the control "
                           "arm was contaminated")
        if t.trajectory_sha256() == c.trajectory_sha256():
            reasons.append(f"seed {t.seed}: the two arms' trajectories are byte-identical (same model responses "
                           "and candidates): one is a replay of the other")
    return DeliveryCheck(delivered=not reasons, void_reasons=reasons, evidence=evidence)


# ---------------------------------------------------------------------- decision
SeedCall = Literal["treatment", "control", "neither", "excluded", "uninformative"]


class SeedResult(_Frozen):
    seed: int
    control_run: str | None
    treatment_run: str | None
    call: SeedCall
    detail: str
    comparison: ComparisonResult | None = None


class ABOutcome(_Frozen):
    registration_id: str
    spec_sha256: str
    status: Literal["treatment_wins", "control_wins", "inconclusive", "uninformative", "void", "incomplete"]
    explanation: str
    delivery: DeliveryCheck
    seeds: list[SeedResult]
    protocol_draft: bool = False          # decided under a draft (unreleased) protocol (issue 27)


def _seed_call(spec: ABSpec, c: ComparisonResult) -> tuple[SeedCall, str]:
    """``c`` compares control (a) against treatment (b)."""
    bars = spec.usability
    if c.verdict == "uninformative_saturated":
        return "uninformative", c.explanation
    low = [arm for arm, r in (("control", c.a), ("treatment", c.b)) if r.usable_iterations < bars.min_usable_iterations]
    if spec.primary_metric == "usable_iterations":
        diff = c.b.usable_iterations - c.a.usable_iterations
        need = spec.decision_rule.min_usable_difference
        text = f"usable iterations control {c.a.usable_iterations} vs treatment {c.b.usable_iterations} of {c.budget}"
        if diff >= need:
            return "treatment", text
        if -diff >= need:
            return "control", text
        return "neither", text
    if low:
        return ("neither" if len(low) == 2 else ("control" if low == ["treatment"] else "treatment"),
                f"{' and '.join(low)} below the registered {bars.min_usable_iterations} usable iterations; {c.explanation}")
    if c.verdict == "b_better":
        return "treatment", c.explanation
    if c.verdict == "a_better":
        return "control", c.explanation
    return "neither", c.explanation


def decide(store: ResultStore, reg: Registration, protocol: Protocol, delivery: DeliveryCheck, *,
           allow_draft: bool = False) -> ABOutcome:
    """Apply the registered decision rule to the claimed runs (one control and one treatment per seed).

    Raises:
        DraftProtocolRefused: a draft protocol without ``allow_draft``.
    """
    require_released(protocol, f"decide A/B {reg.id}", allow_draft=allow_draft)
    spec = reg.spec
    runs = claimed_runs(store, reg)
    seeds: list[SeedResult] = []
    for seed in spec.seeds:
        pick = {arm: [r for r in runs if r.arm == arm and r.seed == seed] for arm in (spec.control.name, spec.treatment.name)}
        ctrl, treat = pick[spec.control.name], pick[spec.treatment.name]
        if len(ctrl) != 1 or len(treat) != 1 or get_outcome(store, ctrl[0].id) is None \
                or get_outcome(store, treat[0].id) is None:
            seeds.append(SeedResult(seed=seed, control_run=ctrl[0].id if ctrl else None,
                                    treatment_run=treat[0].id if treat else None, call="excluded",
                                    detail=f"needs one finished run per arm (control {len(ctrl)}, treatment {len(treat)})"))
            continue
        try:
            comp = compare_runs(store, ctrl[0].id, treat[0].id, protocol, allow_draft=True)  # checked above
        except IncomparableError as exc:
            seeds.append(SeedResult(seed=seed, control_run=ctrl[0].id, treatment_run=treat[0].id, call="excluded",
                                    detail=str(exc)))
            continue
        call, text = _seed_call(spec, comp)
        seeds.append(SeedResult(seed=seed, control_run=ctrl[0].id, treatment_run=treat[0].id, call=call,
                                detail=text, comparison=comp))
    calls = [s.call for s in seeds]
    rule = spec.decision_rule
    status: Literal["treatment_wins", "control_wins", "inconclusive", "uninformative", "void", "incomplete"]
    if not delivery.delivered:
        status, why = "void", "treatment delivery failed: " + " | ".join(delivery.void_reasons)
    elif "excluded" in calls and calls.count("excluded") > len(calls) - rule.min_seed_wins:
        status, why = "incomplete", f"{calls.count('excluded')} of {len(calls)} seeds excluded; too few left to decide"
    elif calls.count("uninformative") > len(calls) - rule.min_seed_wins:
        status, why = "uninformative", "the task saturated on too many seeds to decide: not a null result"
    elif calls.count("treatment") >= rule.min_seed_wins and calls.count("control") == 0:
        status, why = "treatment_wins", f"treatment better on {calls.count('treatment')} of {len(calls)} seeds"
    elif calls.count("control") >= rule.min_seed_wins and calls.count("treatment") == 0:
        status, why = "control_wins", f"control better on {calls.count('control')} of {len(calls)} seeds"
    else:
        status, why = "inconclusive", (f"seeds: {calls.count('treatment')} treatment, {calls.count('control')} control, "
                                       f"{calls.count('neither')} neither; the rule needs {rule.min_seed_wins} one-sided")
    return ABOutcome(registration_id=reg.id, spec_sha256=reg.spec_sha256, status=status, explanation=why,
                     delivery=delivery, seeds=seeds, protocol_draft=protocol.draft)


def record_outcome(store: ResultStore, outcome: ABOutcome, protocol: Protocol) -> str:
    """Store the A/B outcome as a report of kind 'ab_outcome' about the registration."""
    return store.add_report("ab_outcome", outcome.registration_id, outcome.model_dump(mode="json"), protocol.ref())


def recording_from_store(store: ResultStore, campaign: CampaignRow, requests: list[bytes],
                         responses: list[bytes]) -> ArmRecording:
    """An arm's recording: request/response bytes from its transcript, candidates from the store."""
    cands = summarize(store, campaign.id).candidate_sequence
    return ArmRecording(campaign_id=campaign.id, seed=campaign.seed, requests=requests, responses=responses,
                        candidates=cands)
