"""The task record: a KernelBench-format problem file plus optional AutoTuneBench metadata.

A task file defines ``class Model(nn.Module)``, ``get_inputs()`` and ``get_init_inputs()`` exactly
as KernelBench's problem files do. A native task may also define a literal dict ``ATB_META`` (read
with ``ast.literal_eval``, never executed in the harness's own process) with the fields of
:class:`TaskMeta`. KernelBench files simply lack it and get the defaults.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import TaskError


class ToleranceOverride(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)
    rel_l2: float = Field(ge=0)


#: the start label of a task whose search starts from its own eager reference (a KernelBench file)
EAGER_START_LABEL = "start:eager-reference"


class TaskMeta(BaseModel):
    """What a native task declares beyond the KernelBench format.

    ``bytes`` is the minimum traffic for the roofline: a number, or ``"io"`` for "every input read
    once and every output written once", which the reference process measures. ``knobs`` maps each
    knob to its choices (choice name -> code snippet substituted into ``template`` at ``${knob}``);
    ``start`` names the choices that make the honest starting candidate.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    description: str = ""
    bytes: float | Literal["io"] | None = "io"
    flops: float | None = None
    distributions: list[str] | None = None
    tolerance: dict[str, ToleranceOverride] = Field(default_factory=dict)
    forbidden_ops: list[str] = Field(default_factory=list)
    knobs: dict[str, dict[str, str]] = Field(default_factory=dict)
    start: dict[str, str] = Field(default_factory=dict)
    template: str | None = None
    # every timed call gets inputs of their own storage (no window of a shared pool): slower on CPU, and what
    # the quarantine's extended pass asks for, so a speedup that came from reading the pool cannot survive it
    private_timed_inputs: bool = False


class Task(BaseModel):
    """A loaded task. ``source`` is the file's text; ``id`` names it in the store."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    kind: Literal["native", "kernelbench"]
    path: Path
    source: str
    source_sha256: str
    meta: TaskMeta

    @property
    def knob_space(self) -> dict[str, list[str]]:
        """Each knob's choice names, in declaration order (empty for a task without knobs)."""
        return {k: list(v) for k, v in self.meta.knobs.items()}

    def render_candidate(self, knobs: dict[str, str]) -> str:
        """The candidate source for one point of the knob space.

        Raises:
            TaskError: the task has no template, or ``knobs`` names an unknown knob or choice or
                leaves one out.
        """
        if self.meta.template is None or not self.meta.knobs:
            raise TaskError(f"task {self.id} declares no knob space; it cannot render candidates")
        unknown = sorted(set(knobs) - set(self.meta.knobs))
        missing = sorted(set(self.meta.knobs) - set(knobs))
        if unknown or missing:
            raise TaskError(f"task {self.id}: knobs must be exactly {sorted(self.meta.knobs)}; "
                            f"unknown {unknown}, missing {missing}")
        values: dict[str, str] = {}
        for name, choice in knobs.items():
            choices = self.meta.knobs[name]
            if choice not in choices:
                raise TaskError(f"task {self.id}: knob {name!r} has no choice {choice!r}; choose from {sorted(choices)}")
            values[name] = choices[choice]
        return string.Template(self.meta.template).substitute(values)

    @property
    def start_knobs(self) -> dict[str, str]:
        return dict(self.meta.start)

    def start_source(self) -> str:
        """The honest starting candidate: the template at ``start`` for a native task, else the
        reference itself as ``ModelNew`` (a KernelBench file's search starts from eager)."""
        if self.meta.template is not None and self.meta.knobs:
            return self.render_candidate(self.start_knobs)
        return self.source.rstrip() + "\n\n\nModelNew = Model\n"

    @property
    def start_label(self) -> str:
        if self.meta.template is not None and self.meta.knobs:
            return "start:" + ",".join(f"{k}={v}" for k, v in sorted(self.start_knobs.items()))
        return EAGER_START_LABEL
