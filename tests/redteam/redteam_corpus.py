"""Shared pieces of the red-team tests: the corpus files, their declared targets, one CPU session.

Every corpus file carries a ``REDTEAM = {...}`` JSON line in its docstring: the task it attacks (a
native task name, or a path under tests/redteam/) and the gate meant to catch it (``null`` for an
honest candidate).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel

HERE = Path(__file__).resolve().parent
_META = re.compile(r"REDTEAM = (\{.*\})")


class CorpusEntry(BaseModel):
    path: Path
    task: str
    gate: str | None
    exclusive: bool = False

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
