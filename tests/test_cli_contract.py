"""The `atb` command line is a contract: names, flags, --json output and exit codes stay stable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def atb(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "atb_agent.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def one_json_object(stdout: str) -> dict:
    """--json prints exactly one JSON object on stdout and nothing else there."""
    text = stdout.strip()
    obj = json.loads(text)  # raises if anything else was printed
    assert isinstance(obj, dict)
    assert text.count("\n") == 0, "the JSON object must be the only line on stdout"
    return obj


def test_every_contract_command_exists() -> None:
    out = atb("--help")
    assert out.returncode == 0
    for name in ("tasks", "eval", "run", "compare", "replay", "report", "protocol"):
        assert name in out.stdout, f"`atb {name}` is part of the contract"


def test_protocol_verify_json() -> None:
    out = atb("protocol", "verify", "--json")
    assert out.returncode == 0, out.stderr
    obj = one_json_object(out.stdout)
    assert obj["ok"] is True and len(obj["protocol_sha256"]) == 64


def test_tasks_json_lists_the_native_suite() -> None:
    out = atb("tasks", "--json")
    assert out.returncode == 0, out.stderr
    obj = one_json_object(out.stdout)
    names = {t["id"] for t in obj["tasks"]}
    assert len(names) >= 12 and {"relu", "gelu", "softmax", "layernorm", "matmul"} <= names


@pytest.mark.parametrize("argv", [
    ["eval", "no_such_task", "also_missing.py", "--json"],
    ["compare", "run-nope-a", "run-nope-b", "--json"],
    ["replay", "/nonexistent/transcript.jsonl", "--json"],
    ["run", "relu", "--tuner", "nonsense-tuner", "--budget", "1", "--seed", "1", "--json"],
    ["eval", "relu", "x.py", "--device", "tpu", "--json"],
])
def test_bad_input_exits_2_with_one_json_error(argv: list[str], tmp_path: Path) -> None:
    out = atb(*argv, "--db", str(tmp_path / "x.sqlite")) if argv[0] in {"eval", "run"} else atb(*argv)
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    obj = one_json_object(out.stdout)
    assert obj["ok"] is False and obj["exit_code"] == 2 and obj["error"]


def test_bad_input_without_json_is_one_line_on_stderr() -> None:
    out = atb("compare", "run-nope-a", "run-nope-b")
    assert out.returncode == 2
    assert out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith("atb: error:")


def test_unknown_command_exits_2() -> None:
    out = atb("frobnicate")
    assert out.returncode == 2 and "frobnicate" in out.stderr


# ---------------------------------------------------------------------- every number on the command line
# Issue 14: `--budget 10^21`, `--seed 2^70` and `replay:/nonexistent` exited 1 ("internal error") after a
# store and a measurement session had been opened. Every numeric flag now has a validated type from
# atb_agent/cli/_args.py, checked by argparse before any command runs: exit 2, one line naming the flag.

ABSURD_NUMBERS = [str(10**21), str(2**70), str(-(2**70)), "-1", "0", "nan", "inf", "-inf", "1e400", "abc", "", "1.5",
                  "0x10"]


def _subcommands(parser: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    import argparse

    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append(((*prefix, name), sub))
                found.extend(_subcommands(sub, (*prefix, name)))
    return found


def _numeric_flags() -> list[tuple[tuple[str, ...], str, Any]]:
    """(command path, flag, type) for every option of every command whose value is a number."""
    import argparse

    from atb_agent.cli import _args, build_parser

    validated = {getattr(_args, n) for n in _args.__all__ if callable(getattr(_args, n))}
    out = []
    for path, sub in _subcommands(build_parser()):
        for action in sub._actions:
            if not action.option_strings or isinstance(action, argparse._SubParsersAction):
                continue
            if action.type in (int, float) or action.type in validated and action.type is not _args.tuner_spec:
                out.append((path, action.option_strings[-1], action.type))
    return out


def _argv_for(path: tuple[str, ...], flag: str, value: str) -> list[str]:
    """The command with every required argument filled plausibly and ``flag`` set to ``value``."""
    from atb_agent.cli import build_parser

    sub = dict(_subcommands(build_parser()))[path]
    argv = [*path]
    for action in sub._actions:
        if action.option_strings or action.dest in ("help", "command"):
            continue
        if action.nargs == 0:
            continue
        argv.append(str(action.choices[0]) if action.choices else "x")
    for action in sub._actions:
        if action.option_strings and action.required and action.option_strings[-1] != flag:
            argv += [action.option_strings[-1], "random" if action.dest == "tuner" else "1"]
    return [*argv, f"{flag}={value}", "--json"]


def test_every_numeric_flag_has_a_validated_type() -> None:
    """A bare int/float type lets 10^21 or nan through to SQLite or torch (an internal error, exit 1)."""
    flags = _numeric_flags()
    assert {("run", "--budget"), ("run", "--seed")} <= {(p[0], f) for p, f, _ in flags}
    raw = [(" ".join(p), f) for p, f, t in flags if t in (int, float)]
    assert not raw, f"numeric flags without a validated type from atb_agent/cli/_args.py: {raw}"


@pytest.mark.parametrize("value", ABSURD_NUMBERS)
def test_absurd_numbers_on_every_numeric_flag_exit_2_naming_the_flag(value: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from atb_agent.cli import main

    flags = _numeric_flags()
    assert flags
    for path, flag, typ in flags:
        try:
            typ("1")
            typ("16")
        except Exception:  # noqa: BLE001 - only a value the type refuses is asked of the CLI
            pass
        try:
            typ(value)
            continue                       # a legal value for this flag (e.g. 0 for a seed)
        except Exception:  # noqa: BLE001
            pass
        capsys.readouterr()
        argv = _argv_for(path, flag, value)
        code = main(argv)
        out = capsys.readouterr()
        assert code == 2, (argv, code, out.out, out.err)
        obj = one_json_object(out.out)
        assert obj["exit_code"] == 2 and f"argument {flag}" in obj["error"], (argv, obj)
        assert "internal error" not in obj["error"]


@pytest.mark.parametrize("argv, names", [
    (["run", "relu", "--tuner", "random", "--budget", str(10**21), "--seed", "1"], "--budget"),
    (["run", "relu", "--tuner", "random", "--budget", "3", "--seed", str(2**70)], "--seed"),
    (["run", "relu", "--tuner", "replay:/nonexistent", "--budget", "3", "--seed", "1"], "replay:/nonexistent"),
    (["run", "relu", "--tuner", "nosuchprovider:model", "--budget", "3", "--seed", "1"], "nosuchprovider"),
    (["run", "relu", "--tuner", "openai:", "--budget", "3", "--seed", "1"], "openai:MODEL"),
])
def test_issue14_bad_numbers_and_tuner_specs_exit_2_and_open_nothing(argv: list[str], names: str,
                                                                       tmp_path: Path) -> None:
    """The issue's three cases, through the real entry point: exit 2, one line, and no store written."""
    db = tmp_path / "x.sqlite"
    out = atb(*argv, "--db", str(db))
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert out.stdout == "" and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert names in out.stderr and "internal error" not in out.stderr
    assert not db.exists(), "bad input must be refused before the store (or a session) is opened"


def test_a_replay_spec_of_a_file_that_is_no_transcript_exits_2(tmp_path: Path) -> None:
    bogus = tmp_path / "not-a-transcript.jsonl"
    bogus.write_text("hello\n")
    out = atb("run", "relu", "--tuner", f"replay:{bogus}", "--budget", "1", "--seed", "1", "--db",
              str(tmp_path / "x.sqlite"), "--json")
    assert out.returncode == 2
    assert "not a readable transcript" in one_json_object(out.stdout)["error"]


# ---------------------------------------------------------------------- user-fixable errors (issue 18)
# A class (or a base) with ``user_fixable = True`` is printed in one line with exit 2 and no traceback.
# The marked bases: HarnessError, SandboxError, TranscriptError, BadInput; ProtocolError and AgentError
# are still listed in ``_common`` until their packages carry the marker.

ERROR_MODULES = ["harness/errors.py", "atb_agent/errors.py", *sorted(
    str(p.relative_to(ROOT)) for pkg in ("atb_agent", "tools", "sandbox", "harness", "protocol", "transcripts")
    for p in (ROOT / pkg).rglob("_errors.py"))]


def _error_classes(relpath: str) -> list[type[BaseException]]:
    import importlib
    import inspect

    module = importlib.import_module(relpath[:-3].replace("/", "."))
    return [c for _, c in inspect.getmembers(module, inspect.isclass)
            if issubclass(c, BaseException) and c.__module__ == module.__name__]


def _bare(cls: type[BaseException]) -> BaseException:
    """An instance without running ``__init__`` (constructors differ); classify only reads the type and str."""
    exc = cls.__new__(cls)
    exc.args = (f"{cls.__name__} happened: do this instead",)
    return exc


@pytest.mark.parametrize("relpath", ERROR_MODULES)
def test_every_error_class_of_an_errors_module_is_user_fixable(relpath: str) -> None:
    from atb_agent.cli._common import EXIT_BAD_INPUT, classify

    classes = _error_classes(relpath)
    assert classes, f"{relpath} defines no error class"
    for cls in classes:
        code, message = classify(_bare(cls))
        assert code == EXIT_BAD_INPUT, f"{cls.__module__}.{cls.__qualname__} is not user-fixable: {message}"
        assert message == f"{cls.__name__}: {cls.__name__} happened: do this instead"


def test_sandbox_and_transcript_errors_are_marked_not_listed() -> None:
    """The marker lives on the error classes, so a new subclass needs nothing in the CLI."""
    from atb_agent.cli._common import is_user_fixable
    from harness.errors import HarnessError
    from sandbox import SandboxError
    from transcripts import TranscriptError

    for base in (HarnessError, SandboxError, TranscriptError):
        assert base.user_fixable is True

        class Fresh(base):  # type: ignore[valid-type,misc]
            pass

        assert is_user_fixable(Fresh("x"))


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyError("k"), ValueError("v"), AssertionError()])
def test_other_errors_stay_internal(exc: BaseException) -> None:
    from atb_agent.cli._common import EXIT_INTERNAL, classify

    code, message = classify(exc)
    assert code == EXIT_INTERNAL and message.startswith("internal error (")


def _raiser(exc: BaseException) -> Any:
    def run(args: Any) -> int:
        raise exc
    return run


@pytest.mark.parametrize("make", [
    lambda: __import__("sandbox").SandboxUnavailableError("no Docker daemon answers:\n start it, or use --backend bwrap"),
    lambda: __import__("sandbox").PathOutsideWorkspaceError("../etc/passwd climbs out of the workspace"),
    lambda: __import__("transcripts").TranscriptTampered("run.jsonl", 7, "hash mismatch"),
    lambda: __import__("transcripts").TranscriptFormatError("run.jsonl: line 1 is not JSON"),
    lambda: __import__("harness.errors").errors.TaskError("no task 'relu2': see `atb tasks`"),
], ids=["sandbox-unavailable", "sandbox-path", "transcript-tampered", "transcript-format", "harness-task"])
def test_user_fixable_error_through_the_entry_point_is_one_line_exit_2(
        make: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from atb_agent.cli import _protocol, main

    exc = make()
    monkeypatch.setattr(_protocol, "run", _raiser(exc))
    assert main(["protocol", "verify"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"atb: error: {type(exc).__name__}: "), out.err
    assert "Traceback" not in out.err

    assert main(["protocol", "verify", "--json"]) == 2
    obj = one_json_object(capsys.readouterr().out)
    assert obj["exit_code"] == 2 and obj["error"].startswith(type(exc).__name__)


def test_an_internal_error_through_the_entry_point_exits_1_with_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from atb_agent.cli import _protocol, main

    monkeypatch.setattr(_protocol, "run", _raiser(RuntimeError("a bug")))
    assert main(["protocol", "verify"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("atb: error: internal error (RuntimeError): a bug") and "Traceback" in err


# ---------------------------------------------------------------------- command modules are never skipped

def test_every_command_module_is_registered() -> None:
    """Each ``atb_agent/cli/_*.py`` with a ``register`` function is one of the command groups."""
    from atb_agent.cli import command_groups

    defined = {f"atb_agent.cli.{p.stem}" for p in (ROOT / "atb_agent" / "cli").glob("_*.py")
               if "\ndef register(" in p.read_text()}
    registered = [m.__name__ for m in command_groups()]
    assert len(registered) == len(set(registered))
    assert set(registered) == defined


def test_a_missing_command_module_is_an_internal_error_not_a_silent_gap() -> None:
    """Before issue 18 a group whose module was missing was skipped, and its commands just vanished."""
    code = ("import sys; sys.modules['atb_agent.cli._sweep'] = None\n"   # import of it now fails as if absent
            "from atb_agent.cli import main\n"
            "sys.exit(main(['protocol', 'verify']))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    assert "internal error (ModuleNotFoundError)" in out.stderr and "atb_agent.cli._sweep" in out.stderr
