"""Names the agent side's older callers import (``atb replay``, the MCP campaign): what a campaign tunes
is a :class:`harness.subjects.Subject` now, and everything that differed between a kernel task and an
engine task lives in its two implementations. New code uses :func:`harness.subjects.load_subject` and
``subject.kind`` directly.
"""

from __future__ import annotations

from pathlib import Path

from harness.records import SubjectKind
from harness.subjects import Subject, load_subject


def load_campaign_task(task: str | Path) -> Subject:
    """The subject a campaign tunes (:func:`harness.subjects.load_subject`).

    Raises:
        EngineTaskError: an engine task file is malformed. TaskError: no kernel task of that name.
    """
    return load_subject(task)


def subject_kind(task: Subject) -> SubjectKind:
    """The store's subject kind of a subject's candidates."""
    return task.kind


__all__ = ["SubjectKind", "load_campaign_task", "subject_kind"]
