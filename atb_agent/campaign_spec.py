"""What one tuning campaign is, as one typed value: the task, the tuner, its budget and seed, the store it is
recorded in, and the A/B arm or sweep it belongs to.

Why an object: ``atb run``, ``atb ab`` arms, ``atb sweep`` workers, the benchmarks and the tests all start
campaigns, and with sixteen keyword arguments each caller spelled a campaign its own way. A spec is
validated once, where it is built (a non-positive budget or an empty tuner spec fails there, before any
store, session or sandbox is opened), and :func:`atb_agent.campaign.run_campaign` takes it whole. What a
campaign is *run with* (the services that open sessions and sandboxes, a progress callback) is not part of
what it *is*, and stays a keyword of ``run_campaign``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from atb_agent.errors import CampaignError


class CampaignSpec(BaseModel):
    """One campaign: ``tuner`` spends ``budget`` iterations on ``task`` from ``seed``, recorded in ``store``.

    ``task`` is a task name or file (``harness.tuning.subjects.load_subject`` decides its kind) or an
    already loaded subject. ``tuner`` is a tuner spec: ``random``, ``openai:MODEL``, ``anthropic:MODEL``,
    ``replay:TRANSCRIPT`` or an entry-point tuner's name. ``store`` is a SQLite file, ``sqlite:///PATH`` or
    a ``postgresql://`` URL. ``resume`` continues the unfinished campaign of that id (same task, tuner,
    budget and seed). ``preregistration_id``/``arm`` make the campaign an arm of a pre-registered A/B;
    ``config`` is stored with the campaign and its arm keys (``system_prompt_suffix``) reach the tuner.
    ``transcripts_dir`` is where a PostgreSQL store's transcripts go (beside the file for SQLite);
    ``transcript_path``/``checkpoint_path`` override the defaults. ``scripted`` marks model turns that
    come from a script (tests, fixtures); ``label`` names the run in its transcript header.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    task: Any
    tuner: str
    budget: int
    seed: int
    store: str | Path
    base_url: str | None = None
    resume: str | None = None
    backend: str = "cpu"
    preregistration_id: str | None = None
    arm: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    transcripts_dir: Path | None = None
    transcript_path: Path | None = None
    checkpoint_path: Path | None = None
    scripted: bool = False
    label: str = ""

    @field_validator("task")
    @classmethod
    def _task_is_named_or_loaded(cls, task: Any) -> Any:
        if isinstance(task, (str, Path)) or (hasattr(task, "id") and hasattr(task, "kind")):
            return task
        raise CampaignError(f"a campaign's task is a task name, a task file or a loaded subject, not {type(task).__name__}")

    @model_validator(mode="after")
    def _runnable(self) -> "CampaignSpec":
        if self.budget <= 0:
            raise CampaignError(f"the budget must be a positive number of iterations, not {self.budget}")
        if not self.tuner.strip():
            raise CampaignError("a campaign needs a tuner spec (random, openai:MODEL, anthropic:MODEL, replay:PATH, "
                                "or an installed tuner's name)")
        return self

    @property
    def store_target(self) -> str | Path:
        """The store as ``open_store`` and the path helpers take it (a ``Path`` stays a path)."""
        return self.store if isinstance(self.store, Path) else str(self.store)


__all__ = ["CampaignSpec"]
