"""One thing wrong with a store (:class:`StoreProblem`): shared by the chain walk (``_verify``) and the
checkpoint check (``_checkpoint``), which both report problems, so neither imports the other for it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

ProblemKind = Literal["schema_version", "schema_object", "chain", "row_hash", "rule", "released_protocol", "checkpoint"]


class StoreProblem(BaseModel):
    """One thing wrong with a store: where (table, row key, chain position) and what."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: ProblemKind
    table: str | None = None
    key: str | None = None
    chain_seq: int | None = None
    detail: str

    def line(self) -> str:
        where = self.table or "store"
        if self.key is not None:
            where += f" {self.key}"
        if self.chain_seq is not None:
            where += f" (chain_seq {self.chain_seq})"
        return f"{where}: {self.detail}"
