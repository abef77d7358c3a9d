"""The sweep spec: which (task, tuner, seed) campaigns to run, with what budget, on which devices.

Why pydantic at this boundary: a spec is typed by hand and a typo must fail before any Ray worker
starts, naming the field. The spec's content (with its tasks resolved to files and digests) also gives
the sweep its identity, so running the same spec again resumes the same sweep.

Example::

    id: relu-vs-softmax          # optional; default: derived from the spec's content
    tasks: [relu, softmax, "kb/level1/*.py"]   # native names, or KernelBench files by glob
    tuners: [random, "replay:transcripts/{task}.jsonl", "openai:gpt-4o"]
    seeds: [1, 2, 3]
    budget: 20
    devices: {backend: cuda}     # cuda: one GPU per campaign; cpu: cpus_per_campaign CPUs
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from atb_agent.sweep._errors import SweepSpecError
from harness.records import canonical_json, sha256_text

if TYPE_CHECKING:
    from harness.tuning.subjects import Subject

_GLOB_CHARS = set("*?[")
MAX_CAMPAIGNS = 100_000


class DevicesSpec(BaseModel):
    """Where campaigns measure. A campaign holds its device for its whole life: every verdict's arms
    are timed on that one device, in that one node."""

    model_config = ConfigDict(extra="forbid")
    backend: Literal["cpu", "cuda"] = "cpu"
    cpus_per_campaign: float = Field(default=1.0, gt=0, le=1024)
    max_concurrent: int | None = Field(default=None, gt=0,
                                       description="cap on campaigns running at once (default: what Ray can place)")


class SweepSpec(BaseModel):
    """A sweep as the user wrote it (tasks not yet resolved)."""

    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    tasks: list[str] = Field(min_length=1)
    tuners: list[str] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    budget: int = Field(gt=0, le=10_000)
    devices: DevicesSpec = Field(default_factory=DevicesSpec)
    base_url: str | None = None
    max_retries: int = Field(default=3, ge=0, le=100,
                             description="Ray retries of a campaign whose worker died (each retry resumes it)")

    @field_validator("seeds")
    @classmethod
    def _seeds_in_range(cls, v: list[int]) -> list[int]:
        bad = [s for s in v if not 0 <= s < 2**63]
        if bad:
            raise ValueError(f"seeds must be integers in [0, 2**63): {bad}")
        if len(set(v)) != len(v):
            raise ValueError("seeds repeat; each (task, tuner, seed) is one campaign")
        return v

    @field_validator("tasks", "tuners")
    @classmethod
    def _no_repeats(cls, v: list[str]) -> list[str]:
        v = [x.strip() for x in v]
        if any(not x for x in v):
            raise ValueError("an entry is empty")
        if len(set(v)) != len(v):
            raise ValueError(f"entries repeat: {v}")
        return v


REPLAY_TASK_FIELD = "{task}"
"""In a ``replay:PATH`` tuner, stands for each task's id: a recording replays only on its own task (and
budget), so a sweep over several tasks names one transcript per task (``replay:runs/{task}.jsonl``)."""


class CampaignKey(BaseModel):
    """One campaign of a sweep. Its identity is (sweep id, task, tuner, seed), the tuner as the spec
    writes it; ``runs_as`` is the tuner spec the campaign runs with (a ``replay:`` path made absolute,
    workers do not share the driver's working folder, with ``{task}`` filled in)."""

    model_config = ConfigDict(frozen=True)
    sweep_id: str
    task: str            # a native name, or an absolute path to a task file
    task_id: str         # what the store calls the task
    tuner: str
    seed: int
    runs_as: str = ""

    @property
    def run_tuner(self) -> str:
        return self.runs_as or self.tuner

    @property
    def key(self) -> str:
        return f"{self.sweep_id}|{self.task_id}|{self.tuner}|{self.seed}"

    @property
    def campaign_id(self) -> str:
        """The campaign id the sweep gives this key when the tuner accepts one (random search)."""
        return "run-sw-" + sha256_text(self.key)[:16]


class ResolvedSweep(BaseModel):
    """A spec with its tasks resolved and its campaigns listed, in a stable order."""

    model_config = ConfigDict(frozen=True)
    sweep_id: str
    spec: SweepSpec
    spec_sha256: str
    campaigns: list[CampaignKey]


def _is_glob(entry: str) -> bool:
    return bool(_GLOB_CHARS & set(entry)) or entry.endswith(".py") or "/" in entry


def _resolve_tasks(entries: list[str], base: Path) -> list[tuple[str, Subject]]:
    """(what to pass to the tuner, the loaded subject) for every task entry."""
    from harness.errors import HarnessError
    from harness.tuning.subjects import load_subject

    out: list[tuple[str, Subject]] = []
    for entry in entries:
        if _is_glob(entry):
            pattern = entry if Path(entry).is_absolute() else str(base / entry)
            files = sorted(Path(p).resolve() for p in glob.glob(pattern, recursive=True))
            files = [f for f in files if f.is_file()]
            if not files:
                raise SweepSpecError(f"tasks: {entry!r} matches no file (looked for {pattern})")
            names = [str(f) for f in files]
        else:
            names = [entry]
        for name in names:
            try:
                out.append((name, load_subject(name)))
            except (HarnessError, OSError) as exc:
                raise SweepSpecError(f"tasks: {name!r} does not load: {exc}") from exc
    ids = [s.id for _, s in out]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise SweepSpecError(f"tasks: the same task is listed twice ({', '.join(dupes)})")
    return out


def replay_path(arg: str, task_id: str) -> Path:
    """The transcript a ``replay:ARG`` tuner replays on task ``task_id``, as an absolute path."""
    return Path(arg.replace(REPLAY_TASK_FIELD, task_id)).resolve()


def runs_as(tuner: str, task_id: str) -> str:
    """The tuner spec a campaign of ``tuner`` on ``task_id`` runs with (see :attr:`CampaignKey.runs_as`)."""
    from atb_agent.tuners import parse_spec

    parsed = parse_spec(tuner)
    return f"replay:{replay_path(parsed.arg, task_id)}" if parsed.kind == "replay" else tuner


def _check_replay(spec: str, path: Path, task_id: str, budget: int) -> None:
    """A recording replays only where its requests can be met byte for byte: on its own task and budget
    (both are in the model's first message). Checked here, before Ray starts, not by a failed campaign."""
    from transcripts import read_transcript

    if not path.is_file():
        raise SweepSpecError(f"tuners: {spec!r}: no transcript at {path} (for task {task_id})")
    try:
        header = read_transcript(path).header
    except Exception as exc:  # any unreadable transcript is bad input, named
        raise SweepSpecError(f"tuners: {spec!r}: {path} is not a readable transcript: {exc}") from exc
    if header.task != task_id:
        raise SweepSpecError(f"tuners: {spec!r}: {path} records task {header.task!r}, and a recording replays only on "
                             f"its own task, not {task_id!r}; give one transcript per task, naming it with "
                             f"{REPLAY_TASK_FIELD} (replay:runs/{REPLAY_TASK_FIELD}.jsonl)")
    if header.budget != budget:
        raise SweepSpecError(f"tuners: {spec!r}: {path} records a budget of {header.budget}, the sweep's is {budget}; "
                             "a recording replays only with its own budget")


def _check_tuners(tuners: list[str], tasks: list[tuple[str, Subject]], budget: int) -> None:
    from atb_agent.errors import TunerSpecError
    from atb_agent.tuners import parse_spec
    from harness.tuning.search import KnobSpaceError

    for spec in tuners:
        try:
            parsed = parse_spec(spec)
        except TunerSpecError as exc:
            raise SweepSpecError(f"tuners: {exc}") from exc
        if parsed.kind == "replay":
            for _, subject in tasks:
                _check_replay(spec, replay_path(parsed.arg, subject.id), subject.id, budget)
        if parsed.kind == "entry_point":
            # an unknown name is bad input before Ray starts (issue 27: it used to start Ray and exit 1
            # after 14 s); installed entry points are listed here, not loaded, as `atb run --tuner` does
            from atb_agent.tuners import TUNERS

            try:
                TUNERS.require(parsed.name)
            except TunerSpecError as exc:
                raise SweepSpecError(f"tuners: {spec!r}: {' '.join(str(exc).split())}") from exc
        if parsed.kind == "random":
            for _, subject in tasks:
                try:
                    subject.search_space()
                except KnobSpaceError as exc:
                    raise SweepSpecError(f"tuners: random search needs a knob space and task {subject.id} has "
                                         f"none ({' '.join(str(exc).split())[:200]}): drop 'random' or that task") from exc


def load_spec(path: str | Path) -> ResolvedSweep:
    """Read, validate and resolve a sweep spec file.

    Raises:
        SweepSpecError: the file is missing or not YAML, a field is wrong, a task does not load, a
            glob matches nothing, a tuner spec is malformed, or the grid is empty or too large.
    """
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SweepSpecError(f"cannot read the sweep spec {p}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise SweepSpecError(f"the sweep spec {p} is not YAML: {' '.join(str(exc).split())}") from exc
    if not isinstance(raw, dict):
        raise SweepSpecError(f"the sweep spec {p} must be a YAML mapping with tasks, tuners, seeds, budget")
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "spec"
        raise SweepSpecError(f"{p}: {where}: {first['msg']}") from exc
    return resolve(spec, p.resolve().parent)


def resolve(spec: SweepSpec, base: Path) -> ResolvedSweep:
    """Resolve tasks (globs relative to ``base``), check tuners, list the campaigns."""
    tasks = _resolve_tasks(spec.tasks, base)
    _check_tuners(spec.tuners, tasks, spec.budget)
    n = len(tasks) * len(spec.tuners) * len(spec.seeds)
    if n > MAX_CAMPAIGNS:
        raise SweepSpecError(f"the sweep has {n} campaigns, more than {MAX_CAMPAIGNS}; split it")
    identity = {"tasks": [[subject.id, subject.sha256] for _, subject in tasks], "tuners": spec.tuners,
                "seeds": spec.seeds, "budget": spec.budget, "backend": spec.devices.backend, "base_url": spec.base_url}
    digest = sha256_text(canonical_json(identity))
    sweep_id = spec.id or f"sweep-{digest[:12]}"
    keys = [CampaignKey(sweep_id=sweep_id, task=name, task_id=subject.id, tuner=tuner, seed=seed,
                        runs_as=runs_as(tuner, subject.id))
            for name, subject in tasks for tuner in spec.tuners for seed in spec.seeds]
    return ResolvedSweep(sweep_id=sweep_id, spec=spec, spec_sha256=digest, campaigns=keys)


__all__ = ["REPLAY_TASK_FIELD", "CampaignKey", "DevicesSpec", "ResolvedSweep", "SweepSpec", "load_spec", "replay_path",
           "resolve", "runs_as"]
