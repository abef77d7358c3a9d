"""The tuner's tools on a real sandbox (Docker daemon and bubblewrap): confinement through every tool,
argument errors as tool errors, submit's copy-out, set_flags' validation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.engines.flags import FlagSpace, FlagSpec
from protocol import load_protocol
from sandbox import Sandbox, SandboxLimits, SandboxUnavailableError
from tools import TaskBrief, ToolBox

REPO = Path(__file__).resolve().parents[1]
HARNESS_FILE = REPO / "harness" / "errors.py"
BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), pytest.param("bwrap", marks=pytest.mark.bwrap)]

CANDIDATE = """import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""


@pytest.fixture(scope="module", params=BACKENDS)
def box(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    limits = SandboxLimits.from_params(load_protocol().sandbox)
    try:
        if request.param == "docker":
            from sandbox._docker import DockerSandbox

            sb: Sandbox = DockerSandbox(limits)
        else:
            from sandbox._bwrap import BwrapSandbox

            sb = BwrapSandbox(limits)
    except SandboxUnavailableError as exc:
        pytest.skip(f"{request.param} backend unavailable here: {exc}")
    yield sb
    sb.close()


class Recorder:
    def __init__(self) -> None:
        self.calls: list[dict[str, bytes]] = []

    def __call__(self, files: dict[str, bytes]) -> dict[str, Any]:
        self.calls.append(files)
        return {"verdict": "rejected", "reason": "recorded by the test", "n": len(self.calls)}


@pytest.fixture()
def tb(box: Sandbox) -> ToolBox:
    box.exec("rm -rf /workspace/* /workspace/.[!.]*", timeout_s=10)
    return ToolBox(box, "Task relu: make ReLU fast.", Recorder())


ESCAPES: list[tuple[str, dict[str, Any]]] = [
    ("list_files", {"path": ".."}),
    ("list_files", {"path": "/etc"}),
    ("list_files", {"path": "escape"}),
    ("read_file", {"path": "/etc/passwd"}),
    ("read_file", {"path": "../../../../etc/passwd"}),
    ("read_file", {"path": "escape/etc/passwd"}),
    ("read_file", {"path": "harness_link.py"}),
    ("read_file", {"path": str(HARNESS_FILE)}),
    ("write_file", {"path": "/tmp/atb-escape-test", "content": "x"}),
    ("write_file", {"path": "../atb-escape-test", "content": "x"}),
    ("write_file", {"path": "escape/tmp/atb-escape-test", "content": "x"}),
    ("edit_file", {"path": "/etc/passwd", "replacements": [{"old": "root", "new": "pwned"}]}),
    ("edit_file", {"path": "escape/etc/passwd", "replacements": [{"old": "root", "new": "pwned"}]}),
    ("edit_file", {"path": "harness_link.py", "patch": "@@ -1 +1 @@\n-x\n+y\n"}),
]


@pytest.mark.parametrize("name,args", ESCAPES, ids=[f"{n}:{a['path']}" for n, a in ESCAPES])
def test_path_traversal_is_refused_through_every_tool(tb: ToolBox, name: str, args: dict[str, Any]) -> None:
    planted = tb.sandbox.exec(f"ln -sfn / /workspace/escape && ln -sf {HARNESS_FILE} /workspace/harness_link.py",
                              timeout_s=10)
    assert planted.ok, planted
    before = HARNESS_FILE.read_bytes()
    out = tb.call(name, args)
    assert out.is_error, out.content
    assert "root:x:0:0" not in out.content and "class HarnessError" not in out.content
    assert HARNESS_FILE.read_bytes() == before
    assert not Path("/tmp/atb-escape-test").exists()
    assert not (Path(tb.sandbox.info().workspace_host_path).parent / "atb-escape-test").exists()


def test_run_in_sandbox_cannot_reach_host_files(tb: ToolBox) -> None:
    out = tb.call("run_in_sandbox", {"command": f"cat {HARNESS_FILE}"})
    assert out.is_error and "No such file" in out.content


def test_bad_arguments_are_tool_errors(tb: ToolBox) -> None:
    cases: list[tuple[str, Any]] = [
        ("read_file", "{not json"),
        ("read_file", "[1, 2]"),
        ("read_file", {}),
        ("read_file", {"path": "a.py", "bogus": 1}),
        ("read_file", {"path": "a.py", "start_line": 0}),
        ("write_file", {"path": "a.py", "content": 3}),
        ("edit_file", {"path": "a.py"}),
        ("run_in_sandbox", {"command": ""}),
        ("no_such_tool", {}),
    ]
    for name, args in cases:
        out = tb.call(name, args)
        assert out.is_error, (name, args, out)
        assert out.content.startswith("error:")


def test_write_read_edit_roundtrip(tb: ToolBox) -> None:
    assert not tb.call("write_file", {"path": "pkg/candidate.py", "content": "a = 1\nb = 2\nc = 1\n"}).is_error
    listing = tb.call("list_files", {}).content
    assert "pkg/" in listing and "pkg/candidate.py (18 bytes)" in listing
    assert tb.call("read_file", {"path": "/workspace/pkg/candidate.py", "start_line": 2, "max_lines": 1}).content == "b = 2\n"
    ambiguous = tb.call("edit_file", {"path": "pkg/candidate.py", "replacements": [{"old": "= 1", "new": "= 9"}]})
    assert ambiguous.is_error and "occurs 2 times" in ambiguous.content
    ok = tb.call("edit_file", {"path": "pkg/candidate.py", "replacements": [{"old": "b = 2", "new": "b = 3"}]})
    assert not ok.is_error, ok
    patched = tb.call("edit_file", {"path": "pkg/candidate.py",
                                    "patch": "--- a\n+++ b\n@@ -2,2 +2,2 @@\n b = 3\n-c = 1\n+c = 4\n"})
    assert not patched.is_error, patched
    assert tb.sandbox.read_file("pkg/candidate.py") == b"a = 1\nb = 3\nc = 4\n"
    stale = tb.call("edit_file", {"path": "pkg/candidate.py", "patch": "@@ -1 +1 @@\n-zzz\n+y\n"})
    assert stale.is_error and "not in the file" in stale.content


def test_run_in_sandbox_smoke_tests_a_torch_candidate(tb: ToolBox) -> None:
    if not tb.sandbox.info().torch_mounted:
        pytest.skip("torch is not mounted into this sandbox")
    tb.call("write_file", {"path": "candidate.py", "content": CANDIDATE})
    out = tb.call("run_in_sandbox", {"command": "python3 -c 'import torch, candidate; "
                                                 "print(candidate.ModelNew()(torch.tensor([-1.0, 2.0])).tolist())'",
                                     "timeout_s": 60})
    assert not out.is_error, out.content
    assert "[0.0, 2.0]" in out.content and "advisory" in out.content
    failing = tb.call("run_in_sandbox", {"command": "exit 3"})
    assert failing.is_error and "exit code 3" in failing.content


def test_submit_copies_out_and_hands_files_to_the_harness(tb: ToolBox) -> None:
    recorder = tb._submit
    assert isinstance(recorder, Recorder)
    tb.call("write_file", {"path": "candidate.py", "content": CANDIDATE})
    tb.sandbox.exec(f"ln -sf {HARNESS_FILE} /workspace/reference.py", timeout_s=10)
    out = tb.call("submit", {"note": "relu"})
    assert not out.is_error, out.content
    assert out.submitted == {"verdict": "rejected", "reason": "recorded by the test", "n": 1}
    assert recorder.calls[-1] == {"candidate.py": CANDIDATE.encode()}
    body = json.loads(out.content)
    assert body["skipped"] == [{"path": "reference.py", "reason": "symlink, not a regular file"}]


def test_submit_refuses_a_linked_candidate(tb: ToolBox) -> None:
    recorder = tb._submit
    assert isinstance(recorder, Recorder)
    tb.sandbox.exec(f"ln -sf {HARNESS_FILE} /workspace/candidate.py", timeout_s=10)
    out = tb.call("submit", {})
    assert out.is_error and "no regular file 'candidate.py'" in out.content
    assert recorder.calls == [] and out.submitted is None


def test_a_failing_harness_is_a_tool_error(box: Sandbox) -> None:
    def broken(files: dict[str, bytes]) -> dict[str, Any]:
        raise RuntimeError("store is locked")

    box.write_file("candidate.py", CANDIDATE)
    out = ToolBox(box, "t", broken).call("submit", {})
    assert out.is_error and "store is locked" in out.content


def test_get_task_and_set_flags(box: Sandbox) -> None:
    space = FlagSpace(engine="llamacpp", flags=[
        FlagSpec(name="threads", type="int", cli="-t", low=1, high=8),
        FlagSpec(name="cont_batching", type="bool", cli="-cb", cli_false="-nocb"),
    ])
    brief = TaskBrief(text="Tune llama-server throughput.", task_id="engine-tiny", kind="engine",
                      candidate_file="flags.json", flag_space=space)
    tb = ToolBox(box, brief, Recorder())
    assert "set_flags" in tb.names
    assert "set_flags" not in ToolBox(box, "kernel task", Recorder()).names
    task = tb.call("get_task", {}).content
    assert "Tune llama-server throughput." in task and "threads" in task and "flags.json" in task
    ok = tb.call("set_flags", {"flags": {"threads": 4, "cont_batching": False}})
    assert not ok.is_error, ok
    assert json.loads(box.read_file("flags.json")) == {"cont_batching": False, "threads": 4}
    for bad in ({"threads": 99}, {"threads": "four"}, {"unknown_flag": 1}):
        out = tb.call("set_flags", {"flags": bad})
        assert out.is_error, bad
    assert json.loads(box.read_file("flags.json")) == {"cont_batching": False, "threads": 4}
