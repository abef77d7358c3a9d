"""`atb ab`'s preflight (issue 28): whatever an arm lacks is refused before the A/B is registered, with
exit 2 and one line naming it; the store is left byte-identical (SQLite) or without a new row
(PostgreSQL). And the arms' endpoints (`--base-url`, a per-arm `base_url`) are part of the registration."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from atb_agent.cli import main
from harness.science.prereg import ABSpec, load_spec, register
from harness.store import open_store
from protocol import load_protocol

EXAMPLE = Path(__file__).resolve().parents[1] / "protocol" / "preregistrations" / "example-hint-ab.yaml"
LOCAL = Path(__file__).resolve().parents[1] / "protocol" / "preregistrations" / "example-smollm2-ab.yaml"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spec(tmp: Path, **over: Any) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data.update({"id": "pf-ab", "budget": 2, "seeds": [1], "decision_rule": {"min_seed_wins": 1}})
    for key, value in over.items():
        if key in ("control", "treatment"):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp / "ab.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main([*argv, "--json"]) == 2
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1, out
    err = str(json.loads(out)["error"])
    assert "\n" not in err and "PreflightFailed" in err and "nothing stored" in err, err
    return err


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


CASES: list[tuple[str, dict[str, Any], list[str], str]] = [
    ("no key", {}, [], "control: api_key: the OpenAI tuner needs an API key"),
    ("endpoint down", {}, ["--base-url", "http://127.0.0.1:{port}/v1"], "control: endpoint: http://127.0.0.1:"),
    ("unknown task", {"task": "no_such_task", "control": {"tuner": "random"}, "treatment": {"tuner": "random"}},
     [], "task: 'no_such_task' does not load"),
    ("unknown tuner", {"control": {"tuner": "random"}, "treatment": {"tuner": "nosuchtuner"}}, [],
     "treatment: tuner:"),
    ("identical arms", {"control": {"tuner": "random", "config": {}}, "treatment": {"tuner": "random", "config": {}}},
     [], "arms: A/B pf-ab: the arms 'control' and 'treatment' have the same tuner, config and endpoint"),
    ("config typo", {"control": {"tuner": "random"},
                     "treatment": {"tuner": "random", "config": {"system_promt_suffix": "x"}}}, [],
     "treatment: config: unknown key(s) system_promt_suffix"),
    ("seed out of range", {"control": {"tuner": "random"}, "treatment": {"tuner": "random"}, "seeds": [2**63]}, [],
     "seeds: seeds out of 0..2**62-1"),
    ("base_url on random", {"control": {"tuner": "random", "base_url": "http://127.0.0.1:9/v1"},
                            "treatment": {"tuner": "random"}}, [], "control: endpoint: base_url"),
]


@pytest.mark.usefixtures("no_keys")
@pytest.mark.parametrize("name, over, extra, fragment", CASES, ids=[c[0] for c in CASES])
def test_a_failed_preflight_refuses_in_one_line_and_leaves_the_sqlite_store_byte_identical(
        name: str, over: dict[str, Any], extra: list[str], fragment: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(tmp_path, **over)
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    db = store_dir / "atb.sqlite"
    with open_store(db):
        pass                                            # an existing store, as after earlier work
    before = _files(store_dir)
    argv = ["ab", str(spec), "--db", str(db), *[x.replace("{port}", str(_closed_port())) for x in extra]]
    assert fragment in _refused(argv, capsys)
    assert _files(store_dir) == before, "a failed preflight changed the store"
    fresh = tmp_path / "fresh" / "atb.sqlite"
    fresh.parent.mkdir()
    assert fragment in _refused(["ab", str(spec), "--db", str(fresh), *argv[4:]], capsys)
    assert not any(fresh.parent.iterdir()), "a failed preflight created a store"


@pytest.mark.usefixtures("no_keys")
def test_a_store_that_cannot_be_written_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(tmp_path, control={"tuner": "random"})
    err = _refused(["ab", str(spec), "--db", str(tmp_path / "missing" / "atb.sqlite")], capsys)
    assert "store: the folder of --db" in err
    (tmp_path / "junk.sqlite").write_text("not a database, " * 100)
    err = _refused(["ab", str(spec), "--db", str(tmp_path / "junk.sqlite")], capsys)
    assert "is not a SQLite database" in err
    err = _refused(["ab", str(spec), "--db", f"postgresql://nobody@127.0.0.1:{_closed_port()}/x"], capsys)
    assert "store: cannot reach the results store" in err


def _pg_counts(url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT schemaname || '.' || tablename FROM pg_tables "
                                             "WHERE schemaname NOT IN ('pg_catalog', 'information_schema')")]
        return {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in tables}  # type: ignore[index]


@pytest.mark.usefixtures("no_keys")
def test_a_failed_preflight_adds_no_row_to_a_postgres_store(pg_db: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from harness.store import open_store

    with open_store(pg_db):
        pass
    before = _pg_counts(pg_db)
    assert "preregistrations" in " ".join(before)
    err = _refused(["ab", str(_spec(tmp_path)), "--db", pg_db, "--transcripts", str(tmp_path)], capsys)
    assert "api_key" in err
    assert _pg_counts(pg_db) == before


def test_the_endpoint_is_registered_with_the_spec(tmp_path: Path) -> None:
    """A spec without endpoints hashes as before the field existed; an endpoint changes the digest."""
    spec = load_spec(EXAMPLE)
    assert "base_url" not in spec.registered_json()["control"]
    with_url = spec.model_copy(update={"control": spec.control.model_copy(update={"base_url": "http://h:1/v1"})})
    assert with_url.registered_json()["control"]["base_url"] == "http://h:1/v1"
    assert with_url.digest != spec.digest
    again = ABSpec.model_validate(json.loads(json.dumps(with_url.registered_json())))
    assert again.digest == with_url.digest


def test_base_url_fills_the_model_arms_and_a_changed_endpoint_is_an_edit(
        tmp_path: Path, no_keys: None, capsys: pytest.CaptureFixture[str]) -> None:
    from atb_agent.cli._run import _resolve_endpoints

    spec = load_spec(_spec(tmp_path, control={"tuner": "random"}))
    filled = _resolve_endpoints(spec, "http://127.0.0.1:1/v1")
    assert filled.control.base_url is None                     # random calls no endpoint
    assert filled.treatment.base_url == "http://127.0.0.1:1/v1"
    own = _resolve_endpoints(spec.model_copy(update={"treatment": spec.treatment.model_copy(
        update={"base_url": "http://own:2/v1"})}), "http://127.0.0.1:1/v1")
    assert own.treatment.base_url == "http://own:2/v1"          # an arm's own endpoint wins
    db = tmp_path / "atb.sqlite"
    with open_store(db) as store:
        register(store, filled, load_protocol())
    before = db.read_bytes()
    assert main(["ab", str(tmp_path / "ab.yaml"), "--db", str(db), "--base-url", "http://127.0.0.1:2/v1",
                 "--json"]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert "RegistrationEdited" in err and "differs in treatment.base_url" in err
    assert db.read_bytes() == before


def test_the_shipped_local_model_example_fits_the_protocol() -> None:
    spec = load_spec(LOCAL)
    assert spec.control.tuner == spec.treatment.tuner == "openai:smollm2"
    assert spec.treatment_marker in spec.treatment.config["system_prompt_suffix"]
    assert spec.treatment_marker not in json.dumps(spec.control.model_dump())
    assert spec.usability.ci_relative_halfwidth_max == load_protocol().usability.ci_relative_halfwidth_max


def test_a_suffix_reaches_the_system_prompt_and_the_transcript_header() -> None:
    from atb_agent.errors import TunerSpecError
    from atb_agent.tuners import GraphTuner, apply_arm_config, with_suffix

    tuner = GraphTuner("openai:m", "openai", "m", lambda *a: None)  # type: ignore[arg-type,return-value]
    apply_arm_config(tuner, {"system_prompt_suffix": "ATB-TREATMENT: hint"})
    assert tuner.identity().system_prompt_suffix == "ATB-TREATMENT: hint"
    assert with_suffix("base", "ATB-TREATMENT: hint").endswith("\n\nATB-TREATMENT: hint")
    with pytest.raises(TunerSpecError, match="not known"):
        apply_arm_config(tuner, {"temperature": 2})
