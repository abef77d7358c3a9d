"""Measurement sessions for engine trials: a device fingerprint and a session row in the store.

Engine ratios, like kernel ratios, are only taken within one session on one fingerprinted device. A
campaign opens one session and measures every iteration in it. Any object with a ``session_id``
attribute (such as the kernel side's ``MeasurementContext``) or a plain session id string can be passed
where a session is expected (:func:`session_id_of`): the device is read back from the store's session row.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata
from typing import Protocol as TypingProtocol

from harness.measure.backends import backend_named
from harness.records import Backend, DeviceFingerprint
from harness.store import ResultStore
from protocol import Protocol


class HasSessionId(TypingProtocol):
    @property
    def session_id(self) -> str: ...


@dataclass(frozen=True)
class EngineSession:
    session_id: str
    fingerprint: DeviceFingerprint


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu() -> tuple[str | None, str | None]:
    if shutil.which("nvidia-smi") is None:
        return None, None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    if not out:
        return None, None
    name, _, driver = out[0].partition(",")
    return name.strip(), driver.strip() or None


def engine_fingerprint(backend: Backend = "cpu") -> DeviceFingerprint:
    """The fingerprint of this machine for engine trials (CPU model and count; the GPU on ``cuda``)."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "not-installed"
    spec = backend_named(backend)
    gpu_name, driver = _gpu() if spec.gpus else (None, None)
    return DeviceFingerprint(backend=spec.stored_as, cpu_model=_cpu_model(), cpu_count=os.cpu_count() or 1,
                             gpu_name=gpu_name, gpu_driver=driver, torch_version=torch_version)


def open_engine_session(store: ResultStore, protocol: Protocol, backend: Backend = "cpu",
                        note: str = "engine") -> EngineSession:
    """Open a measurement session for engine trials on this machine."""
    fp = engine_fingerprint(backend)
    return EngineSession(session_id=store.open_session(fp, protocol.ref(), note=note), fingerprint=fp)


def session_id_of(session: HasSessionId | str) -> str:
    """The store's session id of a session object or of a plain id."""
    return session if isinstance(session, str) else session.session_id
