"""The ``atb`` command line: a stable contract that scripts outside the project call.

Each command group lives in its own module with a ``register(subparsers)`` function; this module
only dispatches and enforces the shared contract:

* ``--json`` prints exactly one JSON object on stdout and nothing else there;
* exit status 0 when the command did its job (a rejected candidate is a result, not an error),
  2 for bad input with a one-line message naming what is wrong, 1 for an internal failure;
* progress goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from atb_agent.cli._common import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, BadInput, emit_error

# Command-group modules, in the order their commands appear in --help.
_GROUPS = (
    "atb_agent.cli._protocol",
    "atb_agent.cli._eval",
    "atb_agent.cli._run",
    "atb_agent.cli._replay",
    "atb_agent.cli._sandbox",
    "atb_agent.cli._engine",
    "atb_agent.cli._anchor",
    "atb_agent.cli._store",
    "atb_agent.cli._mcp",
    "atb_agent.cli._sweep",
    "atb_agent.cli._model",
)


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (not a usage dump) on bad arguments."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInput(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = _Parser(prog="atb", description="AutoTuneBench: the agent proposes, the harness measures.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in _GROUPS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # the group is not built yet: its commands are simply absent
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    want_json = "--json" in args_list
    try:
        parser = build_parser()
        args = parser.parse_args(args_list)
        handler: Callable[[argparse.Namespace], int] = args.handler
        return int(handler(args))
    except BadInput as exc:
        emit_error(str(exc), want_json, EXIT_BAD_INPUT)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        emit_error("interrupted", want_json, EXIT_INTERNAL)
        return EXIT_INTERNAL
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except Exception as exc:  # noqa: BLE001 - the contract: internal failures exit 1 with a message
        from atb_agent.cli._common import classify

        code, message = classify(exc)
        emit_error(message, want_json, code)
        if code == EXIT_INTERNAL and not want_json:
            import traceback

            traceback.print_exc(file=sys.stderr)
        return code


__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERNAL", "EXIT_OK", "build_parser", "main"]
