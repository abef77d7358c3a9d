"""Engine tasks: which engine, which model, which fixed arguments, which flags a tuner may set, and the
workload's shape. One YAML file per task under ``harness/engines/tasks/`` (or any path).

The task fixes everything both arms share (model, context size, fixed arguments, workload); the tuner
only chooses values for ``tunable`` flags, within ``bounds`` where the task narrows a flag's range
(for example ``threads`` to this machine's cores).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.engines._errors import EngineTaskError
from harness.engines.adapters.base import ENGINES, EngineAdapter
from harness.engines.flags import FlagSpace
from harness.engines.tiny_model import TinyModelSpec
from harness.engines.workload import WorkloadSpec
from harness.records import canonical_json, sha256_text
from harness.registry import Registry

TASKS_DIR = Path(__file__).parent / "tasks"

EngineName = Literal["llama-server", "llama-server-cuda", "vllm", "sglang"]


class ModelRef(BaseModel):
    """The model both arms serve: the seeded tiny GGUF written here, a local path, or a hub name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["tiny-gguf", "path", "hub"]
    tiny: TinyModelSpec | None = None
    path: str | None = None
    name: str | None = None


class EngineTask(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    engine: EngineName
    description: str = ""
    model: ModelRef
    served_model_name: str = Field(min_length=1, description="the `model` field sent with every request")
    fixed_args: list[str] = Field(default_factory=list)
    tunable: list[str] = Field(min_length=1)
    bounds: dict[str, tuple[float, float]] = Field(default_factory=dict)
    workload: WorkloadSpec
    requires_gpu: bool = False

    @property
    def sha256(self) -> str:
        return sha256_text(canonical_json(self.model_dump(mode="json")))

    def adapter(self) -> EngineAdapter:
        return get_adapter(self.engine)

    def flag_space(self) -> FlagSpace:
        """The tunable sub-space with the task's bounds applied.

        Raises:
            EngineTaskError: a tunable or bounded flag is unknown to the engine, or a bound lies
                outside the engine's own range.
        """
        from harness.engines._errors import FlagSpaceError

        try:
            space = self.adapter().flag_space().restrict(self.tunable)
        except FlagSpaceError as exc:
            raise EngineTaskError(f"engine task {self.id}: {exc}") from exc
        flags = []
        for spec in space.flags:
            if spec.name in self.bounds:
                lo, hi = self.bounds[spec.name]
                if spec.low is None or spec.high is None or lo < spec.low or hi > spec.high or lo > hi:
                    raise EngineTaskError(f"engine task {self.id}: bounds {lo:g}..{hi:g} of '{spec.name}' must "
                                          f"lie within {spec.low}..{spec.high}")
                spec = spec.model_copy(update={"low": lo, "high": hi})
            flags.append(spec)
        unknown = set(self.bounds) - {f.name for f in flags}
        if unknown:
            raise EngineTaskError(f"engine task {self.id}: bounds for flags that are not tunable: {sorted(unknown)}")
        return FlagSpace(engine=space.engine, flags=flags, constraints=space.constraints)


def get_adapter(name: str) -> EngineAdapter:
    """The adapter for an engine name (looked up in :data:`harness.engines.adapters.base.ENGINES`).

    Raises:
        EngineTaskError: no adapter has that name (the message lists the known engines).
    """
    return engine_registry().get(name)()


def engine_names() -> list[str]:
    """Names of the engines with an adapter, sorted."""
    return sorted(engine_registry().names())


def engine_registry() -> Registry[type[EngineAdapter]]:
    """The engine adapter registry, with the built-in adapters' modules imported (each registers its
    class when imported)."""
    import harness.engines.adapters.llamacpp  # noqa: F401 - imported for its @ENGINES.register
    import harness.engines.adapters.sglang  # noqa: F401
    import harness.engines.adapters.vllm  # noqa: F401

    return ENGINES


def engine_task_names() -> list[str]:
    """Names of the engine tasks shipped with the harness (file stems, with '-' for '_')."""
    return sorted(p.stem.replace("_", "-") for p in TASKS_DIR.glob("*.yaml"))


def is_engine_task(name_or_path: str | Path) -> bool:
    """Whether ``name_or_path`` names a shipped engine task or an engine task file (``engine:`` key)."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        try:
            data = yaml.safe_load(p.read_text())
        except (OSError, yaml.YAMLError):
            return False
        return isinstance(data, dict) and "engine" in data
    return str(name_or_path).removeprefix("engine/") in engine_task_names()


def load_engine_task(name_or_path: str | Path) -> EngineTask:
    """Load a shipped engine task by name (``llamacpp-tiny`` or ``engine/llamacpp-tiny``) or a YAML file.

    Raises:
        EngineTaskError: no such task or file, or the file does not describe a valid engine task.
    """
    p = Path(name_or_path)
    if not (p.suffix in (".yaml", ".yml") and p.is_file()):
        name = str(name_or_path).removeprefix("engine/")
        p = TASKS_DIR / f"{name.replace('-', '_')}.yaml"
        if not p.is_file():
            raise EngineTaskError(f"no engine task '{name_or_path}'; shipped engine tasks: "
                                  f"{', '.join(engine_task_names())}, or pass a path to a task YAML file")
    try:
        data = yaml.safe_load(p.read_text())
        task = EngineTask.model_validate(data)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise EngineTaskError(f"engine task file {p} is not valid: {' '.join(str(exc).split())[:600]}") from exc
    task.flag_space()  # an inconsistent tunable list or bound is an error at load time
    return task
