"""The command loop every measuring child runs: one JSON command a line on stdin, one reply each.

Shared by the torch child (``harness.measure.runner._child``) and the MLX child
(``harness.measure.backends.mlx_runner``) so both speak exactly one protocol: ``exit`` ends the loop, an
unknown command, or one that is not valid for its model (:mod:`harness.measure.runner._messages`), is a
``protocol`` failure, and a handler that raises becomes a :class:`~harness.measure.runner._messages.Failed`
reply with a ``failure_kind`` the parent maps to a rejection, never a crash of the loop. A handler receives
its command's model and returns its reply model (``reply_model`` of the command); ``serve`` sets ``op``
(and ``handler_s``) and writes it.
"""

from __future__ import annotations

import faulthandler
import json
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.measure.runner._messages import ChildReply, CommandSet

Handler = Callable[[Any], "ChildReply"]


def _arm_stack_dump(after_s: float) -> None:
    """Write every thread's stack to stderr after ``after_s`` unless :func:`_disarm_stack_dump` runs first.

    Why a timer signal, not ``faulthandler.dump_traceback_later``: that starts a watchdog thread for each
    request, and a measuring child's thread count is evidence (the escape gate counts threads before and
    after the candidate's calls). The watchdog of one request could still be exiting when the next one
    counted: a red-team test read 3 threads against 2 and rejected for "work left running". A real-time
    timer's SIGALRM runs faulthandler's C-level handler, which dumps even while the main thread is stuck
    in C code (a CUDA synchronisation), and starts no thread.
    """
    faulthandler.register(signal.SIGALRM, file=sys.stderr, all_threads=True, chain=False)
    signal.setitimer(signal.ITIMER_REAL, after_s)


def _disarm_stack_dump() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)
    faulthandler.unregister(signal.SIGALRM)


def serve(handlers: dict[str, Handler], reply: Callable[[dict[str, Any]], None],
          describe: Callable[[BaseException], tuple[str, str]], *, commands: CommandSet,
          time_handlers: bool = False) -> None:
    """Answer commands until ``exit`` or end of input.

    ``commands`` validates each line into its model before the handler sees it. ``describe(exc)`` gives
    (error text, failure kind) for a handler's exception; MemoryError is always kind ``memory``. With
    ``time_handlers`` each reply carries ``handler_s``, the handler's wall time.
    """
    from pydantic import ValidationError

    from harness.measure.runner._messages import Exited, Failed

    def send(result: ChildReply) -> None:
        reply(result.model_dump())

    for line in sys.stdin:
        if not line.strip():
            continue
        raw = json.loads(line)
        op = raw.get("op") if isinstance(raw, dict) else None
        if op == "exit":
            send(Exited(op="exit"))
            return
        handler = handlers.get(str(op))
        if handler is None or op not in commands.ops:
            send(Failed(op=str(op), error=f"unknown command {op!r}", failure_kind="protocol"))
            continue
        try:
            cmd = commands.parse(raw)
        except ValidationError as exc:
            errors = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or op}: {e['msg']}" for e in exc.errors())
            send(Failed(op=str(op), error=f"malformed command {op!r}: {errors}", failure_kind="protocol"))
            continue
        t0 = time.monotonic()
        dump_after = cmd.stack_dump_after_s
        if isinstance(dump_after, (int, float)) and dump_after > 0:
            # the parent kills a child that misses its deadline; the stacks written here just before
            # are how the failure says where the child hung (a CUDA sync, a lock, the candidate's loop)
            _arm_stack_dump(float(dump_after))
        result: ChildReply
        try:
            result = handler(cmd)
        except MemoryError as exc:
            result = Failed(error=f"MemoryError: {exc}", failure_kind="memory")
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
            text, kind = describe(exc)
            result = Failed(error=text, failure_kind=kind)
        finally:
            if isinstance(dump_after, (int, float)) and dump_after > 0:
                _disarm_stack_dump()
        update: dict[str, Any] = {"op": str(op)}
        if time_handlers:
            update["handler_s"] = time.monotonic() - t0
        send(result.model_copy(update=update))
