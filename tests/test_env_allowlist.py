"""Issue 27, item 5: credentials inside URLs never reach candidate code, the store, or the model.

The environment filter worked on names, so ``DATABASE_URL`` and ``OPENAI_BASE_URL`` with passwords in
their user-info passed into measuring children; a failing candidate printed them and both appeared in a
stored verdict's reason. Now children get an allow-list environment, and one redaction function
(``harness.redact``) cleans what is stored and what goes to the model.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.measure.runner import Worker
from harness.measure.runner._worker import CHILD_ENV_ALLOW, child_environment
from harness.measure.session import open_measurement_session, worker_config
from harness.redact import redact, redact_obj
from harness.store import ResultStore, open_store
from harness.tasks import load_task
from harness.verdict.evaluate import evaluate_candidate
from protocol import load_protocol
from sandbox._docker import exec_environment

P = load_protocol()
RELU = load_task("relu")
DB_URL = "postgresql://admin:hunter2-db@db.internal:5432/prod"
BASE_URL = "https://team:sk-proj-Zx81TopSecretValue@llm.example/v1"
SECRETS = ("hunter2-db", "sk-proj-Zx81TopSecretValue", "TopSecretValue")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("ATB_BWRAP"),
                                 reason="bubblewrap is not installed (scripts/setup.sh installs it)")


@pytest.fixture
def hostile_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", DB_URL)
    monkeypatch.setenv("OPENAI_BASE_URL", BASE_URL)
    monkeypatch.setenv("SOME_UNKNOWN_SETTING", "x")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")


def _no_secret(text: str) -> None:
    for s in SECRETS:
        assert s not in text, f"{s!r} leaked into: {text[:500]}"


# ------------------------------------------------------------------------------------ environment
def test_child_environment_is_an_allow_list(hostile_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/opt/x")
    env = child_environment(3)
    assert "DATABASE_URL" not in env and "OPENAI_BASE_URL" not in env and "SOME_UNKNOWN_SETTING" not in env
    assert set(env) <= CHILD_ENV_ALLOW | {"PYTHONUNBUFFERED"}
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["PYTHONPATH"] == "/opt/x" and env["OMP_NUM_THREADS"] == "3"
    assert env.get("PATH") == os.environ.get("PATH")
    # an allowed name carrying URL user-info is still left out
    monkeypatch.setenv("PYTHONPATH", "https://u:pw@evil/x")
    assert "PYTHONPATH" not in child_environment(3)


def test_sandbox_commands_get_no_host_variable(hostile_env: None) -> None:
    env = exec_environment(torch_mounted=True, cpus=2.0)
    assert set(env) == {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED",
                        "OMP_NUM_THREADS", "PYTHONPATH"}
    _no_secret(json.dumps(env))


PRINT_ENV = """
import os, json, torch, torch.nn as nn
print("ATB-ENV " + json.dumps(sorted(os.environ)), flush=True)
print("ATB-VALUES " + json.dumps(dict(os.environ)), flush=True)
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""


@needs_bwrap
def test_a_measuring_child_sees_no_url_credentials(hostile_env: None, tmp_path: Path) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="atb-measure-"))
    src = tmp_path / "atb_candidate_env.py"
    src.write_text(PRINT_ENV)
    w = Worker("candidate", worker_config("cpu", P), workdir, 120.0).start()
    try:
        reply = w.request({"op": "load", "task_path": str(RELU.path), "task_module": "atb_task_relu",
                           "init_seed": 3, "candidate_path": str(src), "candidate_module": "atb_candidate_env"})
        assert reply.ok, reply
        log = w.log_tail(60000)
    finally:
        w.close()
        shutil.rmtree(workdir, ignore_errors=True)
    names = json.loads([ln for ln in log.splitlines() if ln.startswith("ATB-ENV ")][-1].split(" ", 1)[1])
    assert "DATABASE_URL" not in names and "OPENAI_BASE_URL" not in names and "SOME_UNKNOWN_SETTING" not in names
    _no_secret(log)


# ------------------------------------------------------------------------------------ redaction
def test_redact_removes_url_userinfo_tokens_and_passwords() -> None:
    text = (f"DATABASE_URL={DB_URL} OPENAI_BASE_URL={BASE_URL} key sk-ant-api03-abcdefghijkl "
            "Authorization: Bearer eyJhbGciOi.payload.sig password=swordfish api_key: 'abcd1234' "
            "ghp_0123456789abcdefABCDEF and https://example.com/plain stays")
    out = redact(text)
    _no_secret(out)
    for s in ("sk-ant-api03-abcdefghijkl", "eyJhbGciOi", "swordfish", "abcd1234", "ghp_0123456789abcdefABCDEF"):
        assert s not in out
    assert "postgresql://<redacted>@db.internal:5432/prod" in out and "https://example.com/plain stays" in out
    assert redact_obj({"a": [DB_URL, 3], "b": (BASE_URL,)}) == {
        "a": ["postgresql://<redacted>@db.internal:5432/prod", 3], "b": ("https://<redacted>@llm.example/v1",)}
    assert redact("OPENAI_API_KEY=abc123xyz DB_PASSWORD=hunter22") == "OPENAI_API_KEY=<redacted> DB_PASSWORD=<redacted>"
    # ordinary measurement text is left alone
    plain = "speedup 1.02x [0.99, 1.05]; tokens_in 120; max_tokens=4096; token count 3; timing_method events"
    assert redact(plain) == plain


LEAK = f"""
import torch, torch.nn as nn
raise RuntimeError("could not reach {DB_URL} nor {BASE_URL}")
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ResultStore]:
    s = open_store(tmp_path_factory.mktemp("env") / "atb.sqlite")
    yield s
    s.close()


def test_a_stored_verdict_reason_is_redacted(store: ResultStore) -> None:
    """A candidate that puts credentials into its error: the rejection is stored without them."""
    with open_measurement_session(store, "cpu", P, note="tests") as ctx:
        res = evaluate_candidate("relu", LEAK, store=store, session=ctx, protocol=P, prespawn_next=False)
    assert res.verdict == "rejected"
    stored = store.verdict(res.verdict_id)
    assert "<redacted>" in stored.reason, stored.reason
    _no_secret(stored.reason)
    _no_secret(json.dumps(stored.detail, default=str))
    _no_secret(json.dumps([g.model_dump() for g in stored.gates]))
    _no_secret(res.reason)


# ------------------------------------------------------------------------------------ the model's side
@needs_bwrap
def test_tool_output_to_the_model_is_redacted(tmp_path: Path) -> None:
    from sandbox import SandboxLimits
    from sandbox._bwrap import BwrapSandbox
    from tools import ToolBox

    def submit(files: dict[str, bytes]) -> dict[str, Any]:
        return {"verdict": "rejected", "reason": f"import failed: {DB_URL}"}

    sb = BwrapSandbox(SandboxLimits.from_params(P.sandbox))
    try:
        tb = ToolBox(sb, "relu", submit)
        ran = tb.call("run_in_sandbox", {"command": f"echo {BASE_URL}"})
        assert "<redacted>" in ran.content
        _no_secret(ran.content)
        tb.call("write_file", {"path": "candidate.py", "content": "x = 1\n"})
        sub = tb.call("submit", {})
        assert sub.submitted is not None and "<redacted>" in sub.submitted["reason"]
        _no_secret(sub.content)
        _no_secret(json.dumps(sub.submitted))
    finally:
        sb.close()
