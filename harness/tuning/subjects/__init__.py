"""Subjects: the things a campaign tunes, behind one protocol.

A kernel task and a serving-engine task are both a :class:`Subject`: the brief the tuner reads, the
search space and how a point of it renders into a candidate, the measurement session and how a
candidate is evaluated in it, the stored subject kind, and what a campaign stores about it.
:func:`load_subject` is the one place that decides which kind a name or file is; the campaign, its
services, the sweep spec and the random-search baseline only ever see the protocol.
"""

from __future__ import annotations

from pathlib import Path

from harness.tuning.subjects._engine import EngineSubject, EngineSubjectSession
from harness.tuning.subjects._kernel import KERNEL_CANDIDATE_FILE, KernelSubject
from harness.tuning.subjects._protocol import NoCandidate, SessionPurpose, Subject, SubjectSession, ToolBrief


SUBJECT_KINDS: dict[str, type[KernelSubject] | type[EngineSubject]] = {KernelSubject.kind: KernelSubject,
                                                                       EngineSubject.kind: EngineSubject}


def ratio_label(kind: str) -> str:
    """What a verdict's ratio is for subjects of ``kind`` (a stored campaign kind), in words."""
    return SUBJECT_KINDS[kind].ratio_label


def load_subject(name_or_path: str | Path) -> Subject:
    """The subject a name or file describes: an engine task (a shipped engine task's name, or a YAML
    file with an ``engine:`` key), else a kernel task (a native task's name, or a KernelBench-format file).

    Raises:
        EngineTaskError: an engine task file is malformed. TaskError: no kernel task of that name or file.
    """
    from harness.engines.task import is_engine_task

    if is_engine_task(name_or_path):
        return EngineSubject.load(name_or_path)
    return KernelSubject.load(name_or_path)


__all__ = ["KERNEL_CANDIDATE_FILE", "EngineSubject", "EngineSubjectSession", "KernelSubject", "NoCandidate",
           "SUBJECT_KINDS", "SessionPurpose", "Subject", "SubjectSession", "ToolBrief", "load_subject",
           "ratio_label"]
