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
from types import ModuleType

from atb_agent.cli._common import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, BadInput, emit_error


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (not a usage dump) on bad arguments."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInput(f"{self.prog}: {message}")


def command_groups() -> tuple[ModuleType, ...]:
    """The command-group modules, in the order their commands appear in --help.

    Plain import statements, so a reader, mypy and import-linter all see each edge; a missing module is
    an ImportError (an internal failure, exit 1), never a command that silently disappears.

    Raises:
        ImportError: a command-group module is missing or does not import (a broken install).
    """
    from atb_agent.cli import (_anchor, _engine, _eval, _mcp, _model, _protocol, _replay, _run, _sandbox, _store,
                               _sweep, _verify)
    from atb_agent.cli import _view

    return _protocol, _eval, _run, _replay, _sandbox, _engine, _anchor, _store, _verify, _mcp, _sweep, _model, _view


def groups_for(argv: Sequence[str]) -> tuple[ModuleType, ...]:
    """The command groups a command line needs: only ``atb_agent.cli._eval`` when its first word is
    ``eval`` or ``tasks``, else every group (:func:`command_groups`).

    Why: a one-shot ``atb eval`` starts its measuring children, whose ``import torch`` is the longest step
    of its start-up, only once its own modules are imported; the other groups' modules (the MCP server's
    asyncio, the campaign runner, the viewer, ...) are nothing an evaluation uses (issue 26 item 4). The
    ``eval`` parser is the same object either way, so its arguments, help and errors are unchanged.
    """
    if argv and argv[0] in ("eval", "tasks"):
        from atb_agent.cli import _eval

        return (_eval,)
    return command_groups()


def build_parser(groups: Sequence[ModuleType] | None = None) -> argparse.ArgumentParser:
    """The ``atb`` parser: each of ``groups`` (default :func:`command_groups`, the whole parser) registers
    its commands.

    Raises:
        ImportError: a command-group module is missing or does not import (a broken install).
    """
    parser = _Parser(prog="atb", description="AutoTuneBench: the agent proposes, the harness measures.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for module in command_groups() if groups is None else groups:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    want_json = "--json" in args_list
    try:
        parser = build_parser(groups_for(args_list))
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


__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERNAL", "EXIT_OK", "build_parser", "command_groups", "groups_for", "main"]
