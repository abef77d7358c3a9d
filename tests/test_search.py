"""The seeded random-search baseline: knob spaces, determinism, and the same harness path as any tuner."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from harness.records import sha256_text
from harness.store import open_store
from harness.tasks import load_task
from harness.tuning.campaigns import CampaignError, CampaignRecorder, IterationConflict, get_iterations
from harness.tuning.search import (
    BoolKnob, CategoricalKnob, Forbidden, Implies, IntKnob, KnobSpace, KnobSpaceError, LessEqual, RandomSearch,
    run_random_search,
)
from test_campaign_support import PROTO, make_verdict, open_session


def _space() -> KnobSpace:
    return KnobSpace(
        knobs=[IntKnob(name="batch", low=16, high=512, log2=True), IntKnob(name="ubatch", low=16, high=512, log2=True),
               BoolKnob(name="spec"), CategoricalKnob(name="spec_type", choices=["none", "ngram", "cache"])],
        constraints=[LessEqual(left="ubatch", right="batch"),
                     Implies(when={"spec": [False]}, then={"spec_type": ["none"]}),
                     Forbidden(combination={"spec": [True], "spec_type": ["none"]})])


def test_samples_respect_every_constraint() -> None:
    space = _space()
    seq = RandomSearch(space, 7).sequence(40)
    assert all(not space.violations(c) for c in seq)
    assert all(c["ubatch"] <= c["batch"] for c in seq)
    assert {c["batch"] for c in seq} <= {16, 32, 64, 128, 256, 512}
    assert len({json.dumps(c, sort_keys=True) for c in seq}) == 40     # no repeats while new points remain


def test_same_seed_same_sequence_and_a_private_rng() -> None:
    space = _space()
    random.seed(0)
    first = RandomSearch(space, 1).sequence(20)
    random.seed(12345)          # the global RNG cannot shift the search's sequence
    random.random()
    assert RandomSearch(space, 1).sequence(20) == first
    assert RandomSearch(space, 2).sequence(20) != first


def test_a_small_space_repeats_only_after_it_is_exhausted() -> None:
    space = KnobSpace.coerce({"a": ["x", "y"], "b": [1, 2]})
    seq = RandomSearch(space, 3).sequence(6)
    assert len({json.dumps(c, sort_keys=True) for c in seq[:4]}) == 4 and len(seq) == 6


def test_bad_spaces_and_configurations_are_typed_errors() -> None:
    with pytest.raises(ValueError, match="unique"):
        KnobSpace(knobs=[BoolKnob(name="a"), BoolKnob(name="a")])
    with pytest.raises(ValueError, match="unknown knobs"):
        KnobSpace(knobs=[BoolKnob(name="a")], constraints=[LessEqual(left="a", right="b")])
    with pytest.raises(KnobSpaceError, match="not a valid knob space"):
        KnobSpace.coerce({"knobs": [{"kind": "int", "name": "n", "low": 5, "high": 1}]})
    with pytest.raises(KnobSpaceError, match="constraint violated: ubatch <= batch"):
        _space().validate_config({"batch": 16, "ubatch": 32, "spec": False, "spec_type": "none"})
    with pytest.raises(KnobSpaceError, match="'spec_type': 'bogus'"):
        _space().validate_config({"batch": 16, "ubatch": 16, "spec": False, "spec_type": "bogus"})
    impossible = KnobSpace(knobs=[BoolKnob(name="a")],
                           constraints=[Forbidden(combination={"a": [True]}), Forbidden(combination={"a": [False]})])
    with pytest.raises(KnobSpaceError, match="contradiction"):
        RandomSearch(impossible, 1).propose()


def test_a_native_task_space_renders_a_deterministic_candidate_sequence() -> None:
    task = load_task("relu")
    space = KnobSpace.coerce(task.knob_space)
    shas = [sha256_text(task.render_candidate(k)) for k in RandomSearch(space, 1).sequence(6)]
    again = [sha256_text(task.render_candidate(k)) for k in RandomSearch(space, 1).sequence(6)]
    assert shas == again and len(set(shas)) == 6


def test_an_engine_flag_space_plugs_in() -> None:
    from harness.engines.flags import FlagSpace, FlagSpec, LessEqual as FlagLE

    flags = FlagSpace(engine="llama.cpp", flags=[
        FlagSpec(name="batch_size", type="int", cli="-b", low=32, high=2048, log=True),
        FlagSpec(name="ubatch_size", type="int", cli="-ub", low=32, high=2048, log=True),
        FlagSpec(name="cont_batching", type="bool", cli="-cb", cli_false="-nocb")],
        constraints=[FlagLE(left="ubatch_size", right="batch_size")])
    seq = RandomSearch(flags, 5).sequence(10)
    assert seq == RandomSearch(flags, 5).sequence(10)
    assert all(flags.validate_config(c) == c for c in seq)


def test_resume_skips_recorded_iterations_and_refuses_a_changed_space(tmp_path: Path) -> None:
    store = open_store(tmp_path / "atb.sqlite")
    sid = open_session(store)
    space = KnobSpace.coerce({"impl": ["a", "b", "c", "d"]})
    evaluated: list[str] = []

    def evaluate(source: str) -> dict[str, str]:      # stores a real verdict for this exact candidate text
        evaluated.append(source)
        return {"verdict_id": make_verdict(store, sid, source, 1.0 + 0.1 * len(evaluated))}

    def render(k: dict[str, object]) -> str:
        return f"# impl={k['impl']}\n"

    kw = dict(task_id="relu", kind="kernel", render=render, evaluate=evaluate, store=store, protocol=PROTO,
              session_id=sid, budget=3, seed=4)
    first = run_random_search(space=space, **kw)  # type: ignore[arg-type]
    assert first.usable_iterations == 3 and len(evaluated) == 3
    again = run_random_search(space=space, campaign_id=first.campaign.id, **kw)  # type: ignore[arg-type]
    assert len(evaluated) == 3 and again.candidate_sequence == first.candidate_sequence
    assert [i.detail["knobs"] for i in get_iterations(store, first.campaign.id)] == RandomSearch(space, 4).sequence(3)
    with pytest.raises(IterationConflict, match="knob space or the task's renderer changed"):
        run_random_search(space=KnobSpace.coerce({"impl": ["z", "y"]}), campaign_id=first.campaign.id, **kw)  # type: ignore[arg-type]


@pytest.mark.slow
def test_atb_run_random_on_a_native_task_records_the_seeds_sequence(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """End to end through the real harness (child processes, timing, gates, store): budget 2 on ReLU."""
    from atb_agent.cli import main

    db = tmp_path / "atb.sqlite"
    assert main(["run", "relu", "--tuner", "random", "--budget", "2", "--seed", "1", "--db", str(db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    task = load_task("relu")
    expected = [sha256_text(task.render_candidate(k)) for k in RandomSearch(KnobSpace.coerce(task.knob_space), 1).sequence(2)]
    assert out["candidate_sequence"] == expected and out["iterations_recorded"] == 2 and out["outcome"] == "completed"
    with open_store(db) as store:
        its = get_iterations(store, out["run_id"])
        assert all(it.verdict_id and store.verdict(it.verdict_id).candidate_sha256 == sha for it, sha in zip(its, expected))
        assert all(it.usable or it.unusable_reason for it in its)
    # resuming the finished run re-evaluates nothing and reports the same sequence
    assert main(["run", "relu", "--tuner", "random", "--budget", "2", "--seed", "1", "--db", str(db), "--json",
                 "--resume", out["run_id"]]) == 0
    assert json.loads(capsys.readouterr().out)["candidate_sequence"] == expected


def test_a_resumed_search_measures_in_a_new_session_and_adopts_a_verdict_stored_before_the_kill(tmp_path: Path) -> None:
    """Issue 14: resuming random search in a new session used to fail every time ("measured in session
    X (campaign's: Y)"), leaving an orphan verdict. Now the new session is attached; and a verdict the
    killed run stored for its next candidate (killed before the iteration row) is recorded, not redone."""
    store = open_store(tmp_path / "atb.sqlite")
    first_session = open_session(store)
    space = KnobSpace.coerce({"impl": ["a", "b", "c", "d"]})
    evaluated: list[str] = []
    session = {"id": first_session}

    def evaluate(source: str) -> dict[str, str]:
        evaluated.append(source)
        return {"verdict_id": make_verdict(store, session["id"], source, 1.0 + 0.1 * len(evaluated))}

    def render(k: dict[str, object]) -> str:
        return f"# impl={k['impl']}\n"

    class Killed(Exception):
        pass

    def killed_after_storing_the_second_verdict(i: int, knobs: object, result: object) -> None:
        if i == 0:
            evaluate(render(RandomSearch(space, 4).sequence(2)[1]))    # iteration 1's verdict is stored...
            raise Killed()                                               # ...and the run dies before its row

    kw = dict(task_id="relu", kind="kernel", render=render, evaluate=evaluate, store=store, protocol=PROTO,
              budget=3, seed=4)
    with pytest.raises(Killed):
        run_random_search(space=space, session_id=first_session, on_iteration=killed_after_storing_the_second_verdict,
                          **kw)  # type: ignore[arg-type]
    (campaign_id,), = store.query("SELECT id FROM campaigns")
    assert [i.idx for i in get_iterations(store, campaign_id)] == [0] and len(evaluated) == 2
    session["id"] = open_session(store)                    # the resumed run's own session, same device
    done = run_random_search(space=space, session_id=session["id"], campaign_id=campaign_id, **kw)  # type: ignore[arg-type]
    its = get_iterations(store, campaign_id)
    assert [i.idx for i in its] == [0, 1, 2] and done.outcome is not None and done.outcome.status == "completed"
    assert len(evaluated) == 3, "the verdict stored before the kill was measured again"
    assert its[1].detail.get("verdict_measured_before_resume") is True
    assert [store.verdict(i.verdict_id).session_id for i in its if i.verdict_id] == [first_session, first_session,
                                                                                        session["id"]]
    orphans = store.query("SELECT count(*) FROM verdicts v WHERE NOT EXISTS "
                          "(SELECT 1 FROM iterations i WHERE i.verdict_id = v.id)")[0][0]
    assert orphans == 0


def test_a_resume_on_another_device_is_refused_before_a_session_is_opened(tmp_path: Path) -> None:
    from harness.tuning.search import random_search_task

    store = open_store(tmp_path / "atb.sqlite")
    sid = open_session(store, device="not-this-machine")
    rec = CampaignRecorder.open(store, PROTO, task_id="relu", kind="kernel", tuner_spec="random", seed=1, budget=2,
                                session_id=sid, config={"backend": "cpu"})
    counts = [store.query(f"SELECT count(*) FROM {t}")[0][0] for t in ("sessions", "verdicts", "reports")]
    with pytest.raises(CampaignError, match="device"):
        random_search_task("relu", store=store, protocol=PROTO, budget=2, seed=1, backend="cpu",
                           campaign_id=rec.campaign_id)
    with pytest.raises(CampaignError, match="same arguments"):
        random_search_task("relu", store=store, protocol=PROTO, budget=3, seed=1, backend="cpu",
                           campaign_id=rec.campaign_id)
    assert [store.query(f"SELECT count(*) FROM {t}")[0][0] for t in ("sessions", "verdicts", "reports")] == counts
