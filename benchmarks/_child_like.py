"""Run a probe script the way a measuring child runs, or with parts of that taken away.

Why: the probes that ask "what about the measuring children makes this slower?"
(``probe_max_autotune_confined.py``, ``probe_child_host_speed.py``) each need the same three switches:
the children's environment (only :data:`harness.measure.runner._worker.CHILD_ENV_ALLOW`), their bwrap
confinement (:func:`harness.measure.runner._confine.plan`, the argv a child of that backend gets), and a
relaxation of it (``ATB_CONFINE_CUDA``, e.g. ``sys``). One function builds and runs that, so the probes
differ only in what they measure.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run_child_like(source: str, args: list[str], *, backend: str, child_env: bool, confined: bool,
                   relax: str = "", extra_env: dict[str, str] | None = None,
                   files: dict[str, str] | None = None, timeout_s: float = 300.0) -> dict[str, Any]:
    """Run ``source`` (a Python script) with ``args`` in a fresh interpreter and return its facts:
    the confinement descriptor, exit code (or ``"timeout"``), wall seconds, stdout and stderr, and the
    fields of the last ``JSON {...}`` line it printed.

    ``child_env``: only the names a measuring child is allowed (else this process's environment, less
    ``ATB_*``). ``confined``: inside the backend's bwrap plan, with ``relax`` as ``ATB_CONFINE_CUDA``
    while the plan is made. ``HOME`` is a fresh scratch folder; ``extra_env`` is added last. ``files`` (name -> text) are
    written beside the script, in the work folder the child can read."""
    from harness.measure.runner import _confine
    from harness.measure.runner._worker import CHILD_ENV_ALLOW

    work = Path(tempfile.mkdtemp(prefix="atb-measure-probe-"))
    scratch = Path(tempfile.mkdtemp(prefix="atb-child-probe-"))
    script = work / "probe.py"
    script.write_text(source)
    for name, text in (files or {}).items():
        (work / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATB_")}
    if child_env:
        env = {k: v for k, v in env.items() if k in CHILD_ENV_ALLOW}
    env["HOME"] = str(scratch)
    env.update({k: v.replace("{scratch}", str(scratch)) for k, v in (extra_env or {}).items()})
    prefix: list[str] = []
    fds: tuple[int, ...] = ()
    descriptor = "unconfined"
    if confined:
        saved = os.environ.get("ATB_CONFINE_CUDA")
        os.environ["ATB_CONFINE_CUDA"] = relax
        try:
            plan = _confine.plan(backend, work, scratch)
        finally:
            if saved is None:
                os.environ.pop("ATB_CONFINE_CUDA", None)
            else:
                os.environ["ATB_CONFINE_CUDA"] = saved
        prefix, fds, descriptor = plan.prefix, plan.pass_fds, plan.descriptor
    t0 = time.perf_counter()
    rc: int | str
    try:
        res = subprocess.run(prefix + [sys.executable, str(script), *args], env=env, cwd=str(scratch),
                             pass_fds=fds, capture_output=True, text=True, timeout=timeout_s)
        rc, out, err = res.returncode, res.stdout, res.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = "timeout", str(exc.stdout or ""), str(exc.stderr or "")
    finally:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
    facts: dict[str, Any] = {"descriptor": descriptor, "rc": rc, "wall_s": round(time.perf_counter() - t0, 1),
                             "stdout": out, "stderr": err}
    for line in out.splitlines():
        if line.startswith("JSON "):
            facts.update(json.loads(line[5:]))
    return facts
