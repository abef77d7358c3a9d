"""Campaigns as processes of this machine: ``atb sweep --local``, for a GPU host without Ray.

Why: the GPU hosts this project is lent have no Ray and no network to install it (Ray's wheel alone is
larger than what one device call carries), yet the paper's table is a sweep. The unit of work is the
same as under Ray: one process runs one campaign attempt (:func:`atb_agent.sweep._worker.run_attempt`),
spawns that campaign's measuring children, and holds one device slot for its whole life, so a ratio
never spans devices. What Ray gave, this gives too, in the small:

* placement: on CUDA one campaign per visible GPU, each with ``CUDA_VISIBLE_DEVICES`` set to its own;
  on CPU ``cpu_count / cpus_per_campaign`` at once (``devices.max_concurrent`` caps both);
* retries: an attempt whose process died without a result (killed, out of memory) is started again,
  up to ``max_retries`` times, and resumes from the store; an attempt that raised is a result, not
  retried (as under Ray: ``retry_exceptions=False``);
* stopping: a cancelled attempt's process group is killed; its measuring children die with it
  (``PR_SET_PDEATHSIG``), and the driver removes its sandboxes from the attempt rows, as after Ray.

Each attempt process dies with the driver (``PR_SET_PDEATHSIG``), so a killed driver leaves none behind.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atb_agent.sweep._errors import CampaignFailed
from atb_agent.sweep._executor import AttemptArgs
from atb_agent.sweep._spec import CampaignKey, DevicesSpec, ResolvedSweep

#: what ``atb sweep --json`` reports as ``ray_address`` for a local sweep
LOCAL_ADDRESS = "local processes (no Ray)"
_POLL_S = 0.1
_PR_SET_PDEATHSIG = 1


def device_slots(devices: DevicesSpec, *, cpu_count: int | None = None, gpus: list[str] | None = None) -> list[str | None]:
    """The slots campaigns may hold at once: a GPU id each on CUDA (``CUDA_VISIBLE_DEVICES`` for that
    campaign), ``None`` each on CPU. ``gpus`` defaults to :func:`visible_gpus`."""
    if devices.backend == "cuda":
        ids: list[str | None] = list(gpus if gpus is not None else visible_gpus()) or ["0"]
    else:
        n = int((cpu_count if cpu_count is not None else os.cpu_count() or 1) // devices.cpus_per_campaign)
        ids = [None] * max(1, n)
    return ids[:devices.max_concurrent] if devices.max_concurrent else ids


def visible_gpus() -> list[str]:
    """The GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` where it is set, else the indices
    ``nvidia-smi -L`` lists (none where it is missing)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(x for x in out.splitlines() if x.startswith("GPU "))]


@dataclass(eq=False)   # a handle: hashed and compared by identity
class _Attempt:
    key: CampaignKey
    slot: str | None
    proc: subprocess.Popen[bytes]
    result_path: Path
    log_path: Path
    runs: int = 1


class LocalExecutor:
    """Runs each campaign attempt as ``python -m atb_agent.sweep._local JOB.json`` on this machine."""

    address = LOCAL_ADDRESS
    version = ""

    def __init__(self, sweep: ResolvedSweep, args: AttemptArgs, *, slots: list[str | None] | None = None) -> None:
        self._args = args
        self._slots = slots if slots is not None else device_slots(sweep.spec.devices)
        self._free = list(self._slots)
        self._max_runs = 1 + sweep.spec.max_retries
        self._dir = Path(tempfile.mkdtemp(prefix="atb-sweep-local-"))
        self._live: list[_Attempt] = []
        self.capacity: int | None = len(self._slots)

    def submit(self, key: CampaignKey) -> _Attempt:
        if not self._free:
            raise RuntimeError("the sweep driver submitted more campaigns than there are device slots")
        slot = self._free.pop(0)
        n = len(list(self._dir.iterdir()))
        job = self._dir / f"{n:05d}-{key.campaign_id[:40]}"
        job.mkdir()
        att = _Attempt(key=key, slot=slot, proc=self._spawn(key, slot, job), result_path=job / "result.json",
                       log_path=job / "log.txt")
        self._live.append(att)
        return att

    def _spawn(self, key: CampaignKey, slot: str | None, job: Path) -> subprocess.Popen[bytes]:
        (job / "job.json").write_text(json.dumps({"key": key.model_dump(mode="json"), "args": self._args.model_dump(mode="json"),
                                                  "result": str(job / "result.json")}), encoding="utf-8")
        env = dict(os.environ)
        if slot is not None:
            env["CUDA_VISIBLE_DEVICES"] = slot
        parent = os.getpid()
        with open(job / "log.txt", "ab") as log:
            return subprocess.Popen([sys.executable, "-m", "atb_agent.sweep._local", str(job / "job.json")],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True, preexec_fn=lambda: _die_with(parent))  # noqa: PLW1509

    def wait(self, handles: list[Any], timeout_s: float) -> list[Any]:
        end = time.monotonic() + timeout_s
        while True:
            ended = [h for h in handles if self._ended(h)]
            if ended or time.monotonic() >= end:
                return ended
            time.sleep(_POLL_S)

    def _ended(self, att: _Attempt) -> bool:
        """Whether the attempt has ended; one that died without a result is started again while
        retries are left (the re-run resumes the campaign from the store)."""
        if att.proc.poll() is None:
            return False
        if att.result_path.exists() or att.runs >= self._max_runs:
            return True
        att.runs += 1
        att.proc = self._spawn(att.key, att.slot, att.result_path.parent)
        return False

    def result(self, handle: Any) -> dict[str, Any]:
        att: _Attempt = handle
        self._release(att)
        if not att.result_path.exists():
            tail = _tail(att.log_path)
            raise CampaignFailed(f"the campaign's process ended without a result (exit {att.proc.returncode}, "
                                 f"{att.runs} run(s)){': ' + tail if tail else ''}")
        body = json.loads(att.result_path.read_text(encoding="utf-8"))
        if "error" in body:
            raise CampaignFailed(str(body["error"]))
        return dict(body["result"])

    def cancel(self, handle: Any) -> None:
        att: _Attempt = handle
        _kill_group(att.proc)
        try:
            att.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        self._release(att)

    def _release(self, att: _Attempt) -> None:
        if att in self._live:
            self._live.remove(att)
            self._free.append(att.slot)

    def shutdown(self) -> None:
        for att in list(self._live):
            self.cancel(att)
        shutil.rmtree(self._dir, ignore_errors=True)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def _die_with(parent: int) -> None:
    """In the attempt process before exec: die when the driver dies, even by SIGKILL."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:        # the driver died before the prctl took effect
        os._exit(1)


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return " ".join(" ".join(text.strip().splitlines()[-lines:]).split())[:600]


def _main(argv: list[str]) -> int:
    """One campaign attempt: run it and write its outcome (or its error) to the job's result file."""
    from atb_agent.sweep._worker import run_attempt

    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    try:
        body: dict[str, Any] = {"result": run_attempt(job["key"], **job["args"])}
    except CampaignFailed as exc:
        body = {"error": str(exc)}
    tmp = Path(job["result"] + ".tmp")
    tmp.write_text(json.dumps(body), encoding="utf-8")
    tmp.replace(job["result"])          # whole or absent: a killed attempt never leaves half a result
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


__all__ = ["LOCAL_ADDRESS", "LocalExecutor", "device_slots", "visible_gpus"]
