"""Typed commands to the measuring children: validated where the parent builds them and where the child reads
them, and every field of every command read by the child's handler for it."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import ValidationError

from harness.measure.runner import Worker
from harness.measure.runner import _messages as M
from harness.measure.session import worker_config
from protocol import load_protocol

ROOT = Path(__file__).resolve().parents[1]
TORCH_CHILD = ROOT / "harness" / "measure" / "runner" / "_child.py"
MLX_CHILD = ROOT / "harness" / "measure" / "backends" / "mlx_runner.py"
ALWAYS = {"op", "stack_dump_after_s"}   # read by serve(), not by a handler


def _members(union: Any) -> dict[str, type[M.ChildCommand]]:
    return {str(m.model_fields["op"].default): m for m in get_args(get_args(union)[0])}


def _handler_table(path: Path) -> dict[str, ast.FunctionDef]:
    """op -> handler function, read from the child's handler dict (the child module cannot be imported:
    it runs at import)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    for node in ast.walk(tree):
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Dict) and value.keys and all(isinstance(k, ast.Constant) for k in value.keys) \
                and all(isinstance(v, ast.Name) and v.id in funcs for v in value.values):
            return {str(k.value): funcs[v.id] for k, v in zip(value.keys, value.values)  # type: ignore[union-attr]
                    if isinstance(v, ast.Name)}
    raise AssertionError(f"no handler table in {path}")


def _fields_read(fn: ast.FunctionDef) -> set[str]:
    return {n.attr for n in ast.walk(fn)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "cmd"}


@pytest.mark.parametrize("child,union", [(TORCH_CHILD, M.TorchCommand), (MLX_CHILD, M.MlxCommand)],
                         ids=["torch", "mlx"])
def test_every_command_has_a_handler_and_every_field_is_read(child: Path, union: Any) -> None:
    members = _members(union)
    table = _handler_table(child)
    assert set(table) == set(members) - {"exit"}, (sorted(table), sorted(members))
    for op, fn in table.items():
        fields = set(members[op].model_fields) - ALWAYS
        assert not (fields - _fields_read(fn)), f"{op}: fields no handler reads: {sorted(fields - _fields_read(fn))}"
        assert not (_fields_read(fn) - fields), f"{op}: the handler reads fields the command lacks"
        # a handler takes its command's model, never a dict
        ann = fn.args.args[0].annotation
        assert ann is not None and "dict" not in ast.unparse(ann), f"{op}: {ast.unparse(ann) if ann else None}"


def test_the_parent_refuses_a_bad_command_before_sending_it(tmp_path: Path) -> None:
    w = Worker("reference", worker_config("cpu", load_protocol()), tmp_path, 60.0)   # never started: nothing sent
    with pytest.raises(ValidationError, match="n_buffers"):
        w.request({"op": "prepare", "seed": 5, "n_buffers": 4})
    with pytest.raises(ValidationError, match="class_inputs"):
        w.request({"op": "call", "seed": 5, "distribution": "normal"})    # the protocol's value is never assumed
    with pytest.raises(ValidationError):
        w.request({"op": "launch_rockets"})
    with pytest.raises(ValidationError, match="candidate_module"):
        M.Load(task_path="t.py", task_module="t", init_seed=1, candidate_path="c.py")
    with pytest.raises(ValidationError, match="by spec"):
        M.Check(candidate={}, seed=1, distribution="normal")
    assert w.proc is None


def _raw(w: Worker, payload: dict[str, Any]) -> dict[str, Any]:
    """Write one line to the child as it is, past the parent's validation (what a broken parent would send)."""
    w.wait_ready()
    assert w.proc is not None and w.proc.stdin is not None
    w.proc.stdin.write((json.dumps(payload) + "\n").encode())
    w.proc.stdin.flush()
    return w._read_reply(30.0, str(payload.get("op")))


def test_the_child_refuses_what_its_models_refuse_and_keeps_serving(tmp_path: Path) -> None:
    w = Worker("reference", worker_config("cpu", load_protocol()), tmp_path, 60.0).start()
    try:
        stale = _raw(w, {"op": "prepare", "seed": 5, "n_buffers": 4})
        assert stale["ok"] is False and stale["failure_kind"] == "protocol"
        assert "malformed command 'prepare'" in stale["error"] and "n_buffers" in stale["error"]
        typed = _raw(w, {"op": "block", "reps": "many", "rep_offset": 0})
        assert typed["ok"] is False and typed["failure_kind"] == "protocol" and "reps" in typed["error"]
        unknown = _raw(w, {"op": "launch_rockets"})
        assert unknown["ok"] is False and unknown["error"] == "unknown command 'launch_rockets'"
        assert w.alive()
        ok = w.request(M.Integrity())     # a valid command after the refusals is answered
        assert isinstance(ok, M.IntegrityReply) and ok.ok is True and ok.op == "integrity"
    finally:
        w.close()


@pytest.mark.parametrize("child,union", [(TORCH_CHILD, M.TorchCommand), (MLX_CHILD, M.MlxCommand)],
                         ids=["torch", "mlx"])
def test_every_handler_answers_with_its_commands_reply_model(child: Path, union: Any) -> None:
    members = _members(union)
    for op, fn in _handler_table(child).items():
        assert fn.returns is not None, op
        assert ast.unparse(fn.returns).split(".")[-1] == members[op].reply_model.__name__, (op, ast.unparse(fn.returns))


def test_a_reply_is_validated_into_its_commands_model_or_failed() -> None:
    prepare = M.Prepare(seed=1)
    failed = M.parse_reply(prepare, {"ok": False, "op": "prepare", "error": "boom", "failure_kind": "exception"})
    assert isinstance(failed, M.Failed) and failed.error == "boom"
    ok = M.parse_reply(prepare, {"ok": True, "op": "prepare", "reps": 3, "est_ns": 10.0, "method": "cpu"})
    assert isinstance(ok, M.PrepareReply) and ok.reps == 3 and ok.inner is None
    with pytest.raises(ValidationError, match="reps"):
        M.parse_reply(prepare, {"ok": True, "op": "prepare", "est_ns": 1.0, "method": "cpu"})
    with pytest.raises(ValidationError, match="n_buffers"):     # a key the model does not have
        M.parse_reply(prepare, {"ok": True, "op": "prepare", "reps": 3, "est_ns": 1.0, "method": "cpu", "n_buffers": 4})
    # a call that raised in the candidate is the call's own reply (its facts), not a failure of the loop
    raised = M.parse_reply(M.Call(seed=1, distribution="task", class_inputs="factory"),
                           {"ok": False, "op": "call", "seed": 1, "distribution": "task", "error": "x",
                            "failure_kind": "exception", "threads_before": 2})
    assert isinstance(raised, M.CallReply) and raised.ok is False and raised.threads_before == 2


def test_a_reply_that_fits_no_model_is_the_childs_protocol_failure(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.measure.runner import WorkerDied

    w = Worker("reference", worker_config("cpu", load_protocol()), tmp_path, 60.0).start()
    try:
        ready = w.wait_ready()
        assert isinstance(ready, M.Ready) and ready.pid > 0 and "to_ready" in ready.startup_s
        # the child answers integrity as always; the parent now expects another reply model, as it would
        # from a child that sent the wrong shape
        monkeypatch.setattr(M.Integrity, "reply_model", M.CeilingsReply)
        with pytest.raises(WorkerDied) as info:
            w.request(M.Integrity())
        # the child is still serving: the harness stops it, and the failure stays the protocol failure it is
        # (it used to be killed first and recorded as a crash by the harness's own SIGKILL)
        failure = info.value.failure
        assert failure.kind == "protocol" and "malformed reply to 'integrity'" in failure.detail, failure
        assert "stopped by the harness" in failure.detail and "killed by" not in failure.detail, failure
        assert not w.alive()
    finally:
        w.close()
