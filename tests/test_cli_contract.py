"""The `atb` command line is a contract: names, flags, --json output and exit codes stay stable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
