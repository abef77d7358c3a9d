"""The Subject protocol (issue 18): a kernel task and an engine task behind one interface.

Checked here without measuring anything: the one loader picks the kind, both implementations satisfy
the protocol and keep the values the store and the tuner saw before (subject kinds, candidate files,
briefs, campaign config, sweep digests, no-submission reasons), the agent's services drive any
subject through the protocol alone, and the modules that used to branch on the kind no longer do.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from harness.records import sha256_text
from harness.tuning.subjects import (
    KERNEL_CANDIDATE_FILE, EngineSubject, KernelSubject, NoCandidate, Subject, ToolBrief, load_subject,
)

ROOT = Path(__file__).resolve().parents[1]
ENGINE_TASK = "llamacpp-tiny-1t"
KB_FILE = ROOT / "tests" / "fixtures" / "kernelbench" / "19_ReLU.py"


# ---------------------------------------------------------------------- the loader and the two kinds

@pytest.mark.parametrize("name, cls, kind", [
    ("relu", KernelSubject, "kernel"), ("gelu", KernelSubject, "kernel"), (str(KB_FILE), KernelSubject, "kernel"),
    (ENGINE_TASK, EngineSubject, "engine"), (f"engine/{ENGINE_TASK}", EngineSubject, "engine"),
])
def test_load_subject_decides_the_kind_once(name: str, cls: type, kind: str) -> None:
    subject = load_subject(name)
    assert isinstance(subject, cls) and isinstance(subject, Subject)
    assert subject.kind == kind                       # the stored subject kind, unchanged
    assert subject.sha256 == sha256_text(subject.source)


def test_an_engine_task_file_loads_as_an_engine_subject(tmp_path: Path) -> None:
    from harness.engines.task import TASKS_DIR

    f = tmp_path / "mine.yaml"
    f.write_text((TASKS_DIR / "llamacpp_tiny_1t.yaml").read_text())
    assert load_subject(f).kind == "engine" and load_subject(str(f)).id == load_subject(ENGINE_TASK).id


def test_unknown_names_raise_the_harness_errors() -> None:
    from harness.engines import EngineTaskError
    from harness.errors import TaskError

    with pytest.raises(TaskError):
        load_subject("no-such-task")
    with pytest.raises(EngineTaskError):
        EngineSubject.load("no-such-engine-task")


def test_kernel_subject_keeps_the_kernel_task_values() -> None:
    from atb_agent.evaluation import CANDIDATE_FILE
    from harness.tasks import load_task

    subject, task = load_subject("relu"), load_task("relu")
    assert KERNEL_CANDIDATE_FILE == CANDIDATE_FILE == subject.candidate_file
    assert subject.id == task.id and subject.sha256 == task.source_sha256 and subject.source == task.source
    assert subject.sandbox_mounts_torch
    assert subject.campaign_config() == {}
    assert subject.search_config() == {"knob_space": subject.search_space().model_dump(mode="json")}  # type: ignore[attr-defined]
    brief = subject.model_brief()
    assert brief.startswith("Task relu: ") and task.source in brief and f"Write `{CANDIDATE_FILE}`" in brief
    assert subject.tool_brief("T") == ToolBrief(text="T", task_id="relu", kind="kernel", candidate_file=CANDIDATE_FILE)
    config = subject.search_space().sample(random.Random(3))
    assert subject.render(config) == task.render_candidate(config)


def test_a_kernelbench_file_is_searched_over_the_module_space() -> None:
    """Issue 26: a KernelBench file declares no knobs, so random search draws from its module space
    (harness/tasks/_module_space.py; tests/test_module_space.py holds the space's own tests)."""
    subject = load_subject(KB_FILE)
    assert subject.id.startswith("kb:19_ReLU:")
    assert [k.name for k in subject.search_space().knobs] == ["compile", "inference_mode"]  # type: ignore[attr-defined]
    assert "module_space" in subject.search_config()


def test_engine_subject_keeps_the_engine_task_values() -> None:
    from harness.engines import load_engine_task, render_config
    from harness.tuning.subjects._engine import ENGINE_CANDIDATE_FILE, engine_brief

    subject, task = load_subject(ENGINE_TASK), load_engine_task(ENGINE_TASK)
    assert subject.candidate_file == ENGINE_CANDIDATE_FILE and not subject.sandbox_mounts_torch
    assert subject.id == task.id and subject.sha256 == task.sha256
    assert subject.campaign_config() == {"engine": task.engine, "task_sha256": task.sha256}
    assert subject.search_config() == {}
    assert subject.model_brief().startswith(engine_brief(task) + "\n\nUse `set_flags` to write")
    brief = subject.tool_brief("T")
    assert (brief.kind, brief.candidate_file, brief.task_id) == ("engine", ENGINE_CANDIDATE_FILE, task.id)
    assert brief.flag_space == task.flag_space()
    config = subject.search_space().sample(random.Random(3))
    assert subject.render(config) == render_config(config)


@pytest.mark.parametrize("name, missing, undecodable", [
    ("relu", "the submitted workspace has no candidate.py", "candidate.py is not UTF-8 text"),
    (ENGINE_TASK, "the submitted workspace has no flags.json; call set_flags to write it, then submit",
     "flags.json is not UTF-8 text"),
])
def test_a_workspace_without_a_candidate_is_no_candidate(name: str, missing: str, undecodable: str) -> None:
    subject = load_subject(name)
    with pytest.raises(NoCandidate) as exc:
        subject.candidate_from_files({"notes.txt": b"x"})
    assert (exc.value.reason, exc.value.built) == (missing, True)
    with pytest.raises(NoCandidate) as exc:
        subject.candidate_from_files({subject.candidate_file: b"\xff\xfe"})
    assert exc.value.reason.startswith(undecodable) and exc.value.built is False
    assert subject.candidate_from_files({subject.candidate_file: b"{}"}) == "{}"


# ---------------------------------------------------------------------- the services see only the protocol

class _Session:
    def __init__(self, sid: str) -> None:
        self.session_id = sid
        self.closed = False

    def close(self) -> None:
        self.closed = True


class _Result:
    verdict, verdict_id, candidate_sha256, correct = "accepted", "v-1", "c-1", True
    speedup, speedup_ci, reason, usable_ci = 1.5, (1.4, 1.6), "", True


class FakeSubject:
    """A third kind of subject, known to nothing but this test: the services must drive it all the same."""

    kind = "kernel"
    id = "fake"
    ratio_label = "speedup over the honest baseline (x)"
    source = "fake source"
    sha256 = sha256_text("fake source")
    candidate_file = "answer.txt"
    sandbox_mounts_torch = False

    def __init__(self, device: str = "dev-a") -> None:
        self.device = device
        self.calls: list[str] = []
        self.opened: list[_Session] = []

    def model_brief(self) -> str:
        return "brief"

    def tool_brief(self, text: str) -> ToolBrief:
        return ToolBrief(text=text, task_id=self.id, kind="kernel", candidate_file=self.candidate_file)

    def search_space(self) -> Any:
        raise NotImplementedError

    def render(self, config: dict[str, Any]) -> str:
        return repr(config)

    def campaign_config(self) -> dict[str, Any]:
        return {"fake": True}

    def search_config(self) -> dict[str, Any]:
        return {}

    def check_ready(self) -> None:
        self.calls.append("check_ready")

    def device_sha256(self, backend: Any, protocol: Any) -> str:
        self.calls.append("device_sha256")
        return self.device

    def open_session(self, store: Any, protocol: Any, backend: Any, *, purpose: str,
                     resume_session_id: str | None = None) -> _Session:
        self.calls.append(f"open_session:{purpose}:{resume_session_id}")
        self.opened.append(_Session(f"s{len(self.opened)}"))
        return self.opened[-1]

    def candidate_from_files(self, files: Mapping[str, bytes]) -> str:
        if self.candidate_file not in files:
            raise NoCandidate("nothing here", built=True)
        return files[self.candidate_file].decode()

    def evaluate(self, session: Any, candidate: str, *, store: Any, protocol: Any) -> Any:
        self.calls.append(f"evaluate:{session.session_id}:{candidate}")
        return _Result()

    def verdict_detail(self, result: Any) -> dict[str, Any]:
        return {"fake": "detail"}


class _Store:
    def __init__(self, device: str) -> None:
        self.device = device

    def session(self, sid: str) -> dict[str, str]:
        return {"device_sha256": self.device}


def test_a_fake_subject_satisfies_the_protocol() -> None:
    assert isinstance(FakeSubject(), Subject)


def test_harness_services_drive_any_subject_through_the_protocol() -> None:
    from atb_agent.errors import CampaignError
    from atb_agent.services import HarnessServices, task_brief

    subject = FakeSubject()
    svc = HarnessServices("cpu")
    with pytest.raises(CampaignError, match="bind_task"):
        svc.open_session(_Store("dev-a"), None, None)     # the session is the subject's own: bind it first
    with pytest.raises(CampaignError, match="open a measurement session"):
        svc.evaluator(subject, None, None)
    svc.bind_task(subject)
    assert task_brief(subject) == "brief"
    assert svc.open_session(_Store("dev-a"), None, None) == "s0"
    assert subject.calls == ["check_ready", "open_session:tuner:None"]
    ev = svc.evaluator(subject, None, None)
    nothing = ev.evaluate(0, {"other": b""})
    assert (nothing.status, nothing.reason, nothing.built) == ("no_submission", "nothing here", True)
    got = ev.evaluate(1, {"answer.txt": b"42"})
    assert (got.status, got.verdict_id, got.speedup, got.speedup_ci, got.detail) == \
        ("accepted", "v-1", 1.5, (1.4, 1.6), {"fake": "detail"})
    assert subject.calls[-1] == "evaluate:s0:42"
    svc.close()
    assert subject.opened[0].closed


def test_a_resume_on_another_device_opens_nothing() -> None:
    from atb_agent.errors import CampaignError
    from atb_agent.services import HarnessServices

    subject = FakeSubject(device="dev-b")
    svc = HarnessServices("cpu")
    svc.bind_task(subject)
    with pytest.raises(CampaignError, match="another device fingerprint"):
        svc.open_session(_Store("dev-a"), None, "old-session")
    assert subject.opened == [] and subject.calls == ["check_ready", "device_sha256"]
    subject.device = "dev-a"
    svc.open_session(_Store("dev-a"), None, "old-session")
    assert subject.calls[-1] == "open_session:tuner:old-session"


def test_an_evaluator_for_a_subject_of_another_kind_is_refused() -> None:
    from atb_agent.errors import CampaignError
    from atb_agent.services import HarnessServices

    svc = HarnessServices("cpu")
    svc.bind_task(FakeSubject())
    svc.open_session(_Store("dev-a"), None, None)
    with pytest.raises(CampaignError, match="is a engine task but the open session is not"):
        svc.evaluator(load_subject(ENGINE_TASK), None, None)


# ---------------------------------------------------------------------- nobody else branches on the kind

SEES_ONLY_THE_PROTOCOL = [
    "atb_agent/campaign.py", "atb_agent/services.py", "atb_agent/sweep/_spec.py", "harness/tuning/search/_task.py",
    "atb_agent/cli/_replay.py", "atb_agent/mcp/_campaign.py",
]
KIND_NAMES = {"is_engine", "is_engine_task", "EngineTask", "load_engine_task", "load_task", "Task", "EngineSession",
              "MeasurementContext", "open_engine_session", "open_measurement_session", "evaluate_candidate",
              "evaluate_engine_candidate", "EngineEvaluator", "HarnessEvaluator", "KernelSubject", "EngineSubject"}


@pytest.mark.parametrize("rel", SEES_ONLY_THE_PROTOCOL)
def test_these_modules_see_only_the_subject_protocol(rel: str) -> None:
    """No kind-specific name is imported or used, and no ``"kernel"``/``"engine"`` literal is compared."""
    tree = ast.parse((ROOT / rel).read_text(), filename=rel)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in KIND_NAMES:
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in KIND_NAMES:
            found.add(node.attr)
        elif isinstance(node, ast.alias) and node.name.split(".")[-1] in KIND_NAMES:
            found.add(node.name)
        elif isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant) and side.value in ("kernel", "engine"):
                    found.add(repr(side.value))
    assert not found, f"{rel} names kind-specific things: {sorted(found)}"
