"""The one interface every serving-engine adapter implements.

An adapter knows four things about its engine and nothing about measurement: the pinned version and
flag space, how a configuration becomes a launch command, which HTTP paths say "ready", and how to
read the installed engine's ``--version`` and ``--help`` so every run records which flags existed.
Launching, waiting and stopping are :mod:`harness.measure.serving.process`'s job, the same for every engine.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harness.engines._errors import EngineNotBuilt, EngineTaskError, FlagSpaceError
from harness.engines.flags import FlagSpace, FlagValue
from harness.records import sha256_text
from harness.registry import Registry


class EngineProbe(BaseModel):
    """What the installed engine says about itself: recorded with every engine verdict."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: str
    pinned_version: str
    version_text: str
    help_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    flags_in_help: list[str]
    space_flags_missing: list[str] = Field(default_factory=list,
                                           description="flag-space options the installed --help lacks")
    binary_sha256: str = Field(default="", description="SHA-256 of the executable launched (issue 30: a CPU and "
                               "a CUDA build of one version answer --version alike)")


class LaunchSpec(BaseModel):
    """A fully built launch: argv, extra environment, and where readiness is polled."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    host: str
    port: int = Field(gt=0, lt=65536)
    ready_paths: list[str] = Field(min_length=1)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


_OPTION_RE = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def options_in_help(help_text: str) -> list[str]:
    """Every ``-x`` / ``--long-option`` token that appears in a ``--help`` text, sorted."""
    return sorted(set(_OPTION_RE.findall(help_text)))


class EngineAdapter(ABC):
    """Base class of engine adapters; a new engine is one subclass registered in :data:`ENGINES` under its
    ``name`` (``@ENGINES.register("vllm")`` above the class)."""

    name: str
    pinned_version: str
    ready_paths: tuple[str, ...]
    # Whether the engine serves llama-server's native ``/completion`` with ``n_probs``: then a candidate
    # completion that differs from the default's is checked for near ties (harness.measure.serving.outputs);
    # otherwise only exact equality counts.
    greedy_check: bool = False

    @abstractmethod
    def flag_space(self) -> FlagSpace:
        """The full flag space this adapter knows for its pinned version."""

    @abstractmethod
    def base_argv(self, model: str, host: str, port: int) -> list[str]:
        """The launch command without any tuned flag: engine, model, address."""

    def render_composites(self, config: dict[str, FlagValue]) -> list[str]:
        """Arguments for flags rendered together (``FlagSpec.composite``); none by default."""
        if any(self.flag_space().spec(n).composite for n in config):
            raise FlagSpaceError(f"{self.name} has no composite flags")
        return []

    def render_args(self, config: dict[str, FlagValue]) -> list[str]:
        """The tuned flags as CLI arguments, after validation. The empty configuration renders to [].

        Raises:
            FlagSpaceError: the configuration does not fit the flag space.
        """
        space = self.flag_space()
        cfg = space.validate_config(config)
        args: list[str] = []
        for name, value in cfg.items():
            spec = space.spec(name)
            if spec.composite:
                continue
            assert spec.cli is not None
            if spec.type == "bool":
                flag = spec.cli if value else spec.cli_false
                if flag:
                    args.append(flag)
            else:
                args += [spec.cli, str(value)]
        return args + self.render_composites(cfg)

    def launch(self, config: dict[str, FlagValue], *, model: str, host: str, port: int,
               fixed_args: Sequence[str] = (), env: dict[str, str] | None = None) -> LaunchSpec:
        """The launch of ``config``: base command, the task's fixed arguments, then the tuned flags."""
        argv = self.base_argv(model, host, port) + list(fixed_args) + self.render_args(config)
        return LaunchSpec(argv=argv, env={**self.env(), **(env or {})}, host=host, port=port,
                          ready_paths=list(self.ready_paths))

    def executable(self) -> list[str]:
        """The command prefix that runs this engine (used for --version / --help)."""
        return self.base_argv("MODEL", "127.0.0.1", 1)[:1]

    def version_argv(self) -> list[str]:
        return self.executable() + ["--version"]

    def help_argv(self) -> list[str]:
        return self.executable() + ["--help"]

    def env(self) -> dict[str, str]:
        """Extra environment for every run of this engine (library paths); none by default."""
        return {}

    def probe(self, timeout_s: float = 60.0) -> EngineProbe:
        """Run ``--version`` and ``--help`` and record which of the space's flags the engine offers.

        Raises:
            EngineNotBuilt: the engine's executable is not on this machine.
        """
        missing = self.missing_reason()
        if missing:
            raise EngineNotBuilt(f"{self.name}: {missing}; {self.install_hint()}")
        import os

        run_env = {**os.environ, **self.env()}

        def _run(argv: list[str]) -> str:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=run_env)
            return (p.stdout + p.stderr).strip()

        version_text = _run(self.version_argv())
        help_text = _run(self.help_argv())
        present = options_in_help(help_text)
        wanted = [s.cli for s in self.flag_space().flags if s.cli] + \
                 [s.cli_false for s in self.flag_space().flags if s.cli_false]
        from harness.engines.llamacpp_build import file_sha256

        resolved = shutil.which(self.executable()[0])
        return EngineProbe(engine=self.name, pinned_version=self.pinned_version,
                           binary_sha256=file_sha256(Path(resolved)) if resolved else "",
                           version_text=version_text[-2000:], help_sha256=sha256_text(help_text),
                           flags_in_help=present,
                           space_flags_missing=sorted(w for w in wanted if w and w not in present))

    def missing_reason(self) -> str | None:
        """Why the engine cannot run here (``None`` when its executable is present)."""
        exe = self.executable()[0]
        return None if shutil.which(exe) else f"'{exe}' is not installed here"

    @abstractmethod
    def install_hint(self) -> str:
        """One sentence: how to get this engine onto a machine."""


ENGINES: Registry[type[EngineAdapter]] = Registry("engine", error=EngineTaskError)
"""Engine adapters by engine name (the ``engine`` of a task file). Each adapter module registers its
class with ``@ENGINES.register(NAME)``; :func:`harness.engines.task.get_adapter` imports the built-in
modules and looks names up here. Closed to entry points: a task's ``engine`` is validated against the
``EngineName`` literal, and each engine's flag space is pinned to a version the harness was tested on."""
