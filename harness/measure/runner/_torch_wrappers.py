"""Torch's own wrappers of functions the measuring child watches, told apart from a candidate's patch.

Why (issue 25): ``import torch._dynamo`` (what every ``torch.compile`` does) sets
``torch.manual_seed = torch._disable_dynamo(torch.manual_seed)``. The child compares each watched
function with the one it bound before the candidate was imported; without this module a compiled
candidate read as tampering ("torch.manual_seed no longer matched"). :class:`OwnWrappers` accepts
exactly torch's wrapper of the bound original, and nothing a candidate can build from its own code.

Imports nothing but the standard library (the child imports it before it is ready); ``torch`` is
passed in.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_MISSING = object()


def closure_value(fn: Any, name: str) -> Any:
    """The value of closure variable ``name`` of function ``fn`` (a sentinel when there is none)."""
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None) or ()
    if code is None or name not in code.co_freevars:
        return _MISSING
    try:
        return cells[code.co_freevars.index(name)].cell_contents
    except (IndexError, ValueError):
        return _MISSING


class OwnWrappers:
    """What torch's dynamo-disable wrapper looks like in this process; build it before any candidate
    code is imported (the code object it keeps is the yardstick a candidate cannot change later).

    Making the yardstick calls ``torch._disable_dynamo`` on a throwaway function: it only builds the
    wrapper and imports nothing (dynamo is imported when a wrapper is first called)."""

    def __init__(self, torch: Any) -> None:
        make = getattr(torch, "_disable_dynamo", None)
        self.wrapper_code: Any = getattr(make(lambda: None), "__code__", None) if callable(make) else None
        self.eval_frame_path = os.path.join(os.path.dirname(torch.__file__), "_dynamo", "eval_frame.py")

    def is_own_wrapper(self, now: Any, original: Any) -> bool:
        """Whether ``now`` is torch's own dynamo-disable wrapper of ``original``, and nothing more.

        Accepted only when the wrapper runs the code of torch's wrapper (the code object taken at
        start-up), wraps exactly the original function, and the dynamo-disabled version it caches on
        the original (``__dynamo_disable``), if any, is made by dynamo's ``DisableContext`` (its code is
        a constant of ``DisableContext.__call__`` from torch's ``eval_frame.py``) from the original
        too. A candidate's replacement, or torch's wrapper around a candidate's function, or a forged
        cache entry, fails."""
        if original is None or self.wrapper_code is None or getattr(now, "__code__", None) is not self.wrapper_code:
            return False
        if closure_value(now, "fn") is not original:
            return False
        cached = getattr(original, "__dict__", {}).get("__dynamo_disable")
        if cached is None:
            return True
        eval_frame = sys.modules.get("torch._dynamo.eval_frame")
        call = getattr(getattr(eval_frame, "DisableContext", None), "__call__", None)
        consts = getattr(getattr(call, "__code__", None), "co_consts", ())
        code = getattr(cached, "__code__", None)
        return (code is not None and any(c is code for c in consts) and code.co_filename == self.eval_frame_path
                and getattr(cached, "_torchdynamo_orig_callable", None) is original
                and closure_value(cached, "fn") is original)

    def intact(self, now: Any, original: Any) -> bool:
        """A watched function is intact when it is the one bound at start-up or torch's own wrapper of it."""
        return now is original or self.is_own_wrapper(now, original)
