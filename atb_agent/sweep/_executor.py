"""Where a sweep's campaigns run: the executor protocol, and the Ray executor.

Why a protocol: the sweep's driver loop (register the sweep, submit what the store says is unfinished,
poll, tally, clean up after a stop) is the same whatever runs the campaigns; only placement differs. Ray
places campaigns on a cluster (one GPU each on CUDA). :mod:`atb_agent.sweep._local` runs them as local
processes, for a GPU host without Ray. One loop, two executors: a campaign is the same unit of work,
run by the same :func:`atb_agent.sweep._worker.run_attempt`, in either.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from atb_agent.sweep._errors import SweepError
from atb_agent.sweep._spec import CampaignKey, ResolvedSweep


class AttemptArgs(BaseModel):
    """The arguments of :func:`~atb_agent.sweep._worker.run_attempt` besides the campaign's key: the
    same for every campaign of one sweep, and what crosses to the process that runs an attempt."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    budget: int
    backend: str
    base_url: str | None
    db: str
    transcripts_dir: str | None


class Executor(Protocol):
    """Runs campaign attempts somewhere and says when each has ended."""

    #: what the sweep's result reports as ``ray_address`` (where the campaigns ran)
    address: str
    #: Ray's version, or "" when Ray did not run them
    version: str
    #: how many campaigns may run at once here (None: as many as the executor can place)
    capacity: int | None

    def submit(self, key: CampaignKey) -> Any:
        """Start (or queue) one campaign's attempt; returns a handle."""

    def wait(self, handles: list[Any], timeout_s: float) -> list[Any]:
        """The handles among ``handles`` whose attempt has ended, waiting up to ``timeout_s`` for one."""

    def result(self, handle: Any) -> dict[str, Any]:
        """An ended attempt's outcome (what ``run_attempt`` returned).

        Raises:
            Exception: the attempt failed (its message is reported for that campaign; the sweep goes on).
        """

    def cancel(self, handle: Any) -> None:
        """Stop an attempt that has not ended (a stopped sweep); the campaign stays resumable."""

    def shutdown(self) -> None:
        """Release what the executor holds (a local Ray instance, scratch files)."""


class RayExecutor:
    """Campaigns as Ray tasks: one GPU each on CUDA, ``cpus_per_campaign`` CPUs on CPU; Ray re-runs an
    attempt whose worker process died (``max_retries``), and the re-run resumes."""

    capacity: int | None = None

    def __init__(self, sweep: ResolvedSweep, args: AttemptArgs, address: str | None) -> None:
        self.address = init_ray(address)   # first: Ray reads its auth mode when it is imported
        import ray

        from atb_agent.sweep._worker import run_attempt
        from harness.measure.backends import backend_named

        self._ray = ray
        self.version = str(ray.__version__)
        # ray types a function with keyword-only parameters as one taking no arguments.
        self._remote: Any = ray.remote(run_attempt)  # type: ignore[arg-type]
        dev = sweep.spec.devices
        self._options: dict[str, Any] = {"num_gpus": backend_named(dev.backend).gpus, "num_cpus": dev.cpus_per_campaign,
                                         "max_retries": sweep.spec.max_retries, "retry_exceptions": False}
        self._args = args

    def submit(self, key: CampaignKey) -> Any:
        return self._remote.options(name=f"atb-campaign {key.task_id} {key.tuner} seed {key.seed}",
                                    **self._options).remote(key.model_dump(), **self._args.model_dump())

    def wait(self, handles: list[Any], timeout_s: float) -> list[Any]:
        ready, _ = self._ray.wait(handles, num_returns=1, timeout=timeout_s)
        return list(ready)

    def result(self, handle: Any) -> dict[str, Any]:
        return dict(self._ray.get(handle))

    def cancel(self, handle: Any) -> None:
        self._ray.cancel(handle, force=True)

    def shutdown(self) -> None:
        self._ray.shutdown()


def init_ray(address: str | None) -> str:
    """Connect to ``address``, or start a local Ray instance sized to this machine.

    Raises:
        SweepError: Ray is not installed or the cluster cannot be reached.
    """
    if address:
        token_auth_if_available()
    try:
        import ray
    except ImportError as exc:
        raise SweepError("atb sweep needs Ray (pip install 'ray==2.*'), or --local to run the campaigns as "
                         "processes of this machine") from exc
    common: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR"}
    try:
        if address:
            ctx = ray.init(address=address, **common)
        else:
            ctx = ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False,
                           object_store_memory=128 << 20, **common)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise SweepError(f"cannot reach the Ray cluster {address or '(local)'}: {' '.join(str(exc).split())}") from exc
    return str(getattr(ctx, "address_info", {}).get("gcs_address") or address or "local")


def token_auth_if_available() -> None:
    """Ray 2.5x+ clusters started by ``ray.init``/``ray start`` require a token by default, kept in
    ``~/.ray/auth_token``; a driver connecting to one sends it only in token mode. Turn token mode on
    when a token is at hand and the user has not chosen a mode (``RAY_AUTH_MODE``)."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or path.is_file():
        os.environ["RAY_AUTH_MODE"] = "token"
        if "ray" in sys.modules:      # Ray read its config at import: make it read the mode again
            try:
                from ray._raylet import Config  # type: ignore[attr-defined]

                Config.initialize("")
            except (ImportError, AttributeError):
                pass


def installed_ray_version() -> str:
    """Ray's version where it is installed, else "" (a sweep with nothing left to run starts no executor)."""
    try:
        import ray
    except ImportError:
        return ""
    return str(ray.__version__)


__all__ = ["AttemptArgs", "Executor", "RayExecutor", "init_ray", "installed_ray_version", "token_auth_if_available"]
