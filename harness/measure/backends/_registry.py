"""The measuring-backend registry and how a measuring child finds a backend (see the package docstring)."""

from __future__ import annotations

import sys
from typing import Any

from harness.errors import DeviceUnavailableError
from harness.measure.backends._base import MeasuringBackend
from harness.registry import Registry

BACKENDS: Registry[MeasuringBackend] = Registry("backend", error=DeviceUnavailableError)
"""Measuring backends by name (``BACKENDS.add(NAME, backend)``). Closed to entry points: a backend outside
this package registers itself when its module is imported (a plug-in's package, or a test)."""


def backend_named(name: str) -> MeasuringBackend:
    """The backend registered under ``name``.

    Raises:
        DeviceUnavailableError: no backend has that name (the message lists the known ones).
    """
    return BACKENDS.get(name)


def child_locator(name: str) -> dict[str, str]:
    """Where a measuring child finds backend ``name``: its defining module and that module's file (nothing
    for a built-in, so a built-in child's configuration is what it was before backends were plug-ins)."""
    module = type(backend_named(name)).__module__
    if module.startswith("harness.measure.backends."):
        return {}   # a built-in: the child's import of this package registers it
    return {"backend_module": module, "backend_file": str(getattr(sys.modules.get(module), "__file__", "") or "")}


def load_in_child(name: str, config: dict[str, Any]) -> MeasuringBackend:
    """Inside a measuring child: the backend ``name``, importing the module the configuration names
    when it is not a built-in (a module not importable by name is loaded from its file)."""
    if BACKENDS.registered(name) is None and config.get("backend_module"):
        import importlib
        import importlib.util

        module = str(config["backend_module"])
        try:
            importlib.import_module(module)
        except ImportError:
            spec = importlib.util.spec_from_file_location(module, str(config.get("backend_file") or ""))
            if spec is None or spec.loader is None:
                raise
            mod = importlib.util.module_from_spec(spec)
            sys.modules[module] = mod
            spec.loader.exec_module(mod)
    return backend_named(name)


__all__ = ["BACKENDS", "backend_named", "child_locator", "load_in_child"]
