"""A kernel task as a :class:`~harness.tuning.subjects.Subject`: a native task or a KernelBench-format file,
its candidates Python files defining ``ModelNew``, measured by :func:`harness.verdict.evaluate.evaluate_candidate`
in a kernel measurement session (reference, start and candidate workers)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from harness.measure.cost import count_task
from harness.records import Backend, SubjectKind
from harness.space import KnobSpace
from harness.tasks import Task, load_task
from harness.tasks._module_space import ModuleSpace, module_space, render_point
from harness.tuning.subjects._protocol import NoCandidate, SessionPurpose, SubjectSession, ToolBrief

if TYPE_CHECKING:
    from harness.store import ResultStore
    from harness.verdict.result import VerdictResult
    from protocol import Protocol

# The workspace file a kernel tuner writes and the harness measures (``atb_agent.evaluation.CANDIDATE_FILE``).
KERNEL_CANDIDATE_FILE = "candidate.py"


class KernelSubject:
    """A loaded kernel :class:`~harness.tasks.Task` (``.task``) as a subject."""

    kind: SubjectKind = "kernel"
    #: what a verdict's ratio is, in words (reports label their axes with it)
    ratio_label = "speedup over the honest baseline (x)"
    candidate_file = KERNEL_CANDIDATE_FILE
    sandbox_mounts_torch = True

    def __init__(self, task: Task, backend: Backend | None = None) -> None:
        self.task = task
        # what evaluate_candidate is given: the native name, or the task file's path
        self._ref = task.id if task.kind == "native" else str(task.path)
        # the backend a task without declared knobs draws its module space for (None: the CPU's)
        self.backend: Backend | None = backend
        self._module: ModuleSpace | None = None

    def on_backend(self, backend: Backend) -> KernelSubject:
        """This subject with its search space fixed to ``backend``'s: a task without declared knobs is
        searched over the module space, whose CUDA-only knobs exist only on CUDA
        (:func:`harness.tuning.search.random_search_task` binds the campaign's backend)."""
        return KernelSubject(self.task, backend)

    @classmethod
    def load(cls, name_or_path: str | Path) -> KernelSubject:
        """Raises: TaskError: no native task of that name, or the file is not a KernelBench-format task."""
        return cls(load_task(name_or_path))

    @property
    def id(self) -> str:
        return self.task.id

    @property
    def source(self) -> str:
        return self.task.source

    @property
    def sha256(self) -> str:
        return self.task.source_sha256

    def __repr__(self) -> str:
        return f"KernelSubject({self.id!r})"

    # -------------------------------------------------------------- what the tuner is told
    def model_brief(self) -> str:
        about = self.task.meta.description or f"task {self.id}"
        return (f"Task {self.id}: {about}\n\nThe reference implementation (KernelBench format) is:\n\n"
                f"```python\n{self.task.source}\n```\n\nWrite `{KERNEL_CANDIDATE_FILE}` in the workspace defining "
                "`class ModelNew` with the same constructor and forward signature as `Model`, computing the same "
                "result faster, then call `submit`.")

    def tool_brief(self, text: str) -> ToolBrief:
        return ToolBrief(text=text, task_id=self.id, kind="kernel", candidate_file=KERNEL_CANDIDATE_FILE)

    # -------------------------------------------------------------- the search problem
    def search_space(self) -> KnobSpace:
        """The task's declared knob space; for a task that declares none (a KernelBench file) the module
        space (:mod:`harness.tasks._module_space`) on this subject's backend (the CPU's when unbound).

        Raises:
            KnobSpaceError: the subject is bound to a backend with no module space (mlx).
        """
        if self.task.knob_space:
            return KnobSpace.coerce(self.task.knob_space)
        return self.module_space().space

    def module_space(self) -> ModuleSpace:
        """The module space of this task on this subject's backend, counted once per subject.

        Raises:
            KnobSpaceError: the backend is not cpu or cuda.
        """
        if self._module is None:
            self._module = module_space(self.task, self.backend or "cpu", count_task)
        return self._module

    def render(self, config: dict[str, Any]) -> str:
        if self.task.knob_space:
            return self.task.render_candidate(config)
        return render_point(self.task, config)

    def campaign_config(self) -> dict[str, Any]:
        return {}

    def search_config(self) -> dict[str, Any]:
        """The knob space searched; for a module space also its renderer, backend and the facts it was
        derived from, so a campaign's draws can be reproduced from its stored config."""
        if self.task.knob_space:
            return {"knob_space": self.search_space().model_dump(mode="json")}
        ms = self.module_space()
        return {"knob_space": ms.space.model_dump(mode="json"), "module_space": ms.record()}

    # -------------------------------------------------------------- measuring
    def check_ready(self) -> None:
        return None

    def device_sha256(self, backend: Backend, protocol: Protocol) -> str:
        from harness.measure.device import device_fingerprint

        return device_fingerprint(backend, protocol).sha256

    def open_session(self, store: ResultStore, protocol: Protocol, backend: Backend, *,
                     purpose: SessionPurpose, resume_session_id: str | None = None) -> SubjectSession:
        """Always a new session with its own workers (a resumed run's workers are gone); a tuner's
        session has no note, the random search's says so."""
        from harness.measure.session import open_measurement_session

        note = f"random search on {self.id}" if purpose == "random-search" else ""
        return open_measurement_session(store, backend, protocol, note=note)

    def candidate_from_files(self, files: Mapping[str, bytes]) -> str:
        data = files.get(KERNEL_CANDIDATE_FILE)
        if data is None:
            raise NoCandidate(f"the submitted workspace has no {KERNEL_CANDIDATE_FILE}", built=True)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise NoCandidate(f"{KERNEL_CANDIDATE_FILE} is not UTF-8 text", built=False) from None

    def evaluate(self, session: SubjectSession, candidate: str, *, store: ResultStore,
                 protocol: Protocol) -> VerdictResult:
        from harness.measure.session import MeasurementContext
        from harness.verdict.evaluate import evaluate_candidate

        return evaluate_candidate(self._ref, candidate, store=store, session=cast(MeasurementContext, session),
                                  protocol=protocol)

    def verdict_detail(self, result: VerdictResult) -> dict[str, Any]:
        return {}


__all__ = ["KERNEL_CANDIDATE_FILE", "KernelSubject"]
