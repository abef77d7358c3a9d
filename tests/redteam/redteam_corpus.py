"""Shared pieces of the red-team tests: the corpus files, their declared targets, one CPU session.

Every corpus file carries a ``REDTEAM = {...}`` JSON line in its docstring: the task it attacks (a
native task name, or a path under tests/redteam/) and the gate meant to catch it (``null`` for an
honest candidate).
The honest corpus (``honest/corpus/``) adds ``class`` (the technique, e.g. ``algebraic``, ``triton``) and
``backends`` (where the candidate runs: ``cpu``, ``cuda``); entries without them keep the defaults.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

HERE = Path(__file__).resolve().parent
_META = re.compile(r"REDTEAM = (\{.*\})")


class CorpusEntry(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    path: Path
    task: str
    gate: str | None
    exclusive: bool = False
    # the honest corpus's technique class (JSON key "class") and the backends the candidate runs on
    technique: str | None = Field(default=None, alias="class")
    backends: list[str] = Field(default_factory=lambda: ["cpu"])

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @property
    def task_ref(self) -> str:
        return str(HERE / self.task) if self.task.endswith(".py") else self.task


def entry(path: Path) -> CorpusEntry:
    m = _META.search(path.read_text(encoding="utf-8"))
    if m is None:
        raise ValueError(f"{path} has no REDTEAM = {{...}} line")
    return CorpusEntry(path=path, **json.loads(m.group(1)))


def corpus(folder: str) -> list[CorpusEntry]:
    return [entry(p) for p in sorted((HERE / folder).glob("*.py"))]


HONEST_CORPUS = "honest/corpus"


def honest_corpus(backend: str | None = None) -> list[CorpusEntry]:
    """The honest corpus (``honest/corpus/``): every entry, or those that run on ``backend``.

    Kept apart from ``honest/`` itself, which ``test_redteam_corpus.py`` runs whole on the CPU: most of
    these entries are CUDA-only, and all of them together take minutes (``benchmarks/honest_corpus.py``).
    """
    entries = corpus(HONEST_CORPUS)
    return [e for e in entries if backend is None or backend in e.backends]
