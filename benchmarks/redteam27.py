"""Issue 27's red team, re-run: each of its 15 break classes tried again, as an attacker would, against the
current code on CPU. One JSON line per attempt: ``{"class", "attempt", "store", "outcome", "evidence", "s"}``
with ``outcome`` one of ``held`` (the attack was stopped or made visible), ``broke`` (it worked as it did on
``829bcb1``) or ``error`` (the attempt itself could not be carried out: said, never counted as held).

``python benchmarks/redteam27.py [--pg URL] [--only SUBSTR] [--out benchmarks/results/redteam27_cpu]``

Writes ``OUT.jsonl`` and ``OUT.md``. PostgreSQL attempts run when ``--pg`` (or ``ATB_TEST_PG_URL``) names a
server (``source scripts/services.sh``); each gets a fresh database.

The attacker: has the candidate's code path (what a submitted candidate runs), raw write access to the
store (file or server: may drop/disable triggers, edit, recompute every hash, restore the triggers), can
edit and relock the protocol, and can edit transcripts; does not have the checkpoint key (the owner's key
folder is this run's own, ``ATB_KEY_DIR``). The store attacks use the same raw tools as
``tests/test_store_checkpoint.py`` (its ``Attacked`` class is imported: one toolkit, not two), the
transcript forgery is ``tests/test_replay_forged.py``'s ``forge``.

The 15 classes (issue 27's list): 1 candidate rewrites the start arm; 2 forged store passes verify (middle-row
rewrite, recomputed chain); 3 ``verify-verdict`` agrees with it; 4 newest verdict deleted; 5 tail truncated;
6 fabricated verdict appended; 7 fake ``openai:gpt-forged`` campaign appended; 8 forged transcript replays as
reproduced; 9 draft protocol never flagged; 10 URL credentials reach candidate code and stored text;
11 newline in a file name spoofs ``list_files``; 12 a line over 64 KiB unreadable by ``read_file``;
13 honest relu stores ``roofline_fraction`` above 1; 14 ``atb sweep`` with an unknown tuner starts Ray;
15 ``compare`` with an unknown id creates an empty store.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

WORK = Path(tempfile.mkdtemp(prefix="atb-redteam27-"))
os.environ["ATB_KEY_DIR"] = str(WORK / "owner-keys")       # the owner's key: the attacker never uses it
SECRET_DB = "postgresql://atb:s3cr3t-pw@db.internal:5432/atb"
SECRET_BASE = "https://user:tok3n-pw@llm.internal/v1"


def _cli(argv: list[str]) -> tuple[int, str, str]:
    """``atb ARGV`` in this process: (exit code, stdout, stderr)."""
    from atb_agent.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return int(code), out.getvalue(), err.getvalue()


# ------------------------------------------------------------------------------ stores under attack
@contextlib.contextmanager
def attacked_store(kind: str, pg: str | None) -> Iterator[Any]:
    """A signed store (two verdicts, a finished campaign: its end signed the head) and the raw access."""
    from test_store_checkpoint import Attacked, _fill

    if kind == "sqlite":
        from harness.store import connect, open_store

        path = WORK / f"{uuid.uuid4().hex[:8]}.sqlite"
        store: Any = open_store(path)
        raw: Any = connect(path)
        a = Attacked("sqlite", store, raw, str(path))
        closers: list[Callable[[], None]] = [raw.close, store.close]
    else:
        import psycopg

        from harness.store import open_store
        from harness.store._postgres import PgExecutor

        assert pg is not None
        name = f"atb_rt27_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(pg, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        url = pg.rpartition("/")[0] + "/" + name
        store = open_store(url)
        conn = psycopg.connect(url, autocommit=True)
        a = Attacked("postgresql", store, PgExecutor(conn), url)

        def drop() -> None:
            with psycopg.connect(pg, autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

        closers = [conn.close, store.close, drop]
    try:
        a.session = _fill(a.store)
        yield a
    finally:
        for close in closers:
            with contextlib.suppress(Exception):
                close()


def _verify_cli(a: Any, *extra: str) -> tuple[int, dict[str, Any]]:
    code, out, _ = _cli(["store", "verify", "--db", a.url, "--json", *extra])
    return code, json.loads(out) if out.strip() else {}


def _rejected(a: Any) -> tuple[bool, str]:
    v = a.verify()
    code, data = _verify_cli(a)
    held = (not v.ok) and code == 2
    first = v.problems[0].line() if v.problems else "no problem found"
    return held, f"verify ok={v.ok}, `atb store verify` exit {code}: {first[:220]}"


def a2_middle_rewrite(kind: str, pg: str | None) -> tuple[bool, str]:
    """Samples of v-1's candidate / 3, its ratio x3, every later hash recomputed, triggers restored."""
    from test_store_checkpoint import SEEDS

    with attacked_store(kind, pg) as a:
        vid_seq = a.seq_of("verdicts", "id = ?", ("v-1",))
        cset = str(a.raw.execute("SELECT candidate_set_id FROM verdicts WHERE id = ?", ("v-1",)).fetchone()[0])
        first = a.seq_of("measurements", "set_id = ? AND seed = ?", (cset, SEEDS[0]))
        a.triggers_off()
        for m in a.raw.execute("SELECT id, samples_json FROM measurements WHERE set_id = ?", (cset,)).fetchall():
            a.raw.execute("UPDATE measurements SET samples_json = ? WHERE id = ?",
                          (json.dumps([x / 3 for x in json.loads(m[1])]), m[0]))
        a.raw.execute("UPDATE verdicts SET ratio = ratio * 3, ci_low = ci_low * 3, ci_high = ci_high * 3 "
                      "WHERE id = ?", ("v-1",))
        a.recompute_from(min(first, vid_seq))
        a.triggers_on()
        return _rejected(a)


def a3_verify_verdict(kind: str, pg: str | None) -> tuple[bool, str]:
    """The same forgery, then ``atb verify-verdict v-1``: does it vouch for the tripled ratio?"""
    from test_store_checkpoint import SEEDS

    with attacked_store(kind, pg) as a:
        vid_seq = a.seq_of("verdicts", "id = ?", ("v-1",))
        cset = str(a.raw.execute("SELECT candidate_set_id FROM verdicts WHERE id = ?", ("v-1",)).fetchone()[0])
        first = a.seq_of("measurements", "set_id = ? AND seed = ?", (cset, SEEDS[0]))
        a.triggers_off()
        for m in a.raw.execute("SELECT id, samples_json FROM measurements WHERE set_id = ?", (cset,)).fetchall():
            a.raw.execute("UPDATE measurements SET samples_json = ? WHERE id = ?",
                          (json.dumps([x / 3 for x in json.loads(m[1])]), m[0]))
        a.raw.execute("UPDATE verdicts SET ratio = ratio * 3, ci_low = ci_low * 3, ci_high = ci_high * 3 "
                      "WHERE id = ?", ("v-1",))
        a.recompute_from(min(first, vid_seq))
        a.triggers_on()
        code, out, err = _cli(["verify-verdict", "v-1", "--db", a.url, "--json"])
        store = (json.loads(out).get("store") if out.strip().startswith("{") else None) or {}
        held = code != 0 and store.get("verified") is not True
        return held, f"`atb verify-verdict` exit {code}; store verified={store.get('verified')}: " \
                     f"{str(store.get('first_problem') or err.strip() or out.strip())[:200]}"


def a4_newest_deleted(kind: str, pg: str | None) -> tuple[bool, str]:
    """A verdict stored and signed on demand, then deleted with everything after it (no recompute)."""
    from test_store_checkpoint import _add_verdict

    with attacked_store(kind, pg) as a:
        device = str(a.store.session(a.session)["device_sha256"])
        _add_verdict(a.store, a.session, device, "v-3")
        a.store.checkpoint()
        v3 = a.seq_of("verdicts", "id = ?", ("v-3",))
        a.triggers_off()
        a.delete_from(v3)
        a.triggers_on()
        return _rejected(a)


def a5_tail_truncated(kind: str, pg: str | None) -> tuple[bool, str]:
    """Everything from the campaign row on cut off (the campaign, its iterations, the checkpoint)."""
    with attacked_store(kind, pg) as a:
        cut = a.seq_of("campaigns", "id = ?", ("run-1",))
        a.triggers_off()
        a.delete_from(cut)
        a.triggers_on()
        return _rejected(a)


def a6_fabricated_verdict(kind: str, pg: str | None) -> tuple[bool, str]:
    """A rule-abiding 4.5x verdict (with its sets) appended through the chain. Held when it is visibly
    outside every signature: ``--require-signed`` fails and ``verify-verdict`` does not vouch for it."""
    from test_store_checkpoint import REF, _set, _verdict_row

    from harness.records import utc_now

    with attacked_store(kind, pg) as a:
        device = str(a.store.session(a.session)["device_sha256"])
        c, b = _set(a.store, a.session, device, "candidate", 1 / 3), _set(a.store, a.session, device, "baseline")
        for ms in (c, b):
            a.append_chained("measurement_sets", {
                "id": ms.id, "session_id": ms.session_id, "device_sha256": ms.device_sha256, "task_id": "relu",
                "subject_sha256": ms.subject_sha256, "arm": ms.arm, "kind": "kernel", "unit": "ns",
                "created_at": utc_now(), "protocol_version": REF.version, "protocol_sha256": REF.sha256})
            for s in ms.samples:
                a.append_chained("measurements", {
                    "set_id": ms.id, "seed": s.seed, "samples_json": json.dumps(s.values), "round_lengths_json": "[2]",
                    "protocol_version": REF.version, "protocol_sha256": REF.sha256})
        a.append_chained("verdicts", _verdict_row("v-forged", a.session, device, c.id, b.id, ratio=4.5))
        code, data = _verify_cli(a, "--require-signed")
        vcode, vout, _ = _cli(["verify-verdict", "v-forged", "--db", a.url, "--json"])
        signed = (json.loads(vout).get("store") or {}).get("signed") if vout.strip().startswith("{") else None
        unsigned = ((data.get("checkpoint") or {}).get("unsigned_by_table") or {})
        held = code == 2 and unsigned.get("verdicts", 0) >= 1 and signed is not True
        return held, (f"`store verify --require-signed` exit {code}, unsigned rows by table {unsigned}; "
                      f"`verify-verdict v-forged` exit {vcode}, store signed={signed}")


def a7_fake_campaign(kind: str, pg: str | None) -> tuple[bool, str]:
    """A campaign of ``openai:gpt-forged`` appended and signed with the attacker's own key, then a
    checkpoint claiming the owner's key id."""
    from test_store_checkpoint import REF

    from harness.records import sha256_text, utc_now
    from harness.store._chain import row_at
    from harness.store._checkpoint import Checkpoint, message_for
    from harness.store._signing import load_or_create_signing_key

    with attacked_store(kind, pg) as a:
        ref = {"protocol_version": REF.version, "protocol_sha256": REF.sha256, "created_at": utc_now()}
        device = str(a.store.session(a.session)["device_sha256"])
        a.append_chained("campaigns", {"id": "run-forged", "task_id": "relu", "kind": "kernel",
                                       "tuner_spec": "openai:gpt-forged", "seed": 1, "budget": 1,
                                       "session_id": a.session, "device_sha256": device, **ref})
        a.append_chained("iterations", {"campaign_id": "run-forged", "idx": 0, "verdict_id": "v-1",
                                        "candidate_sha256": sha256_text("candidate"), "usable": 1, **ref})
        theirs = load_or_create_signing_key(WORK / f"attacker-keys-{uuid.uuid4().hex[:6]}")
        seq = a.head_seq()
        head = str(row_at(a.raw, seq)[1]["row_hash"])
        store_id = str(row_at(a.raw, 1)[1]["row_hash"])
        msg = message_for(store_id, seq, head, utc_now(), theirs.key_id)
        forged = Checkpoint(store_id=store_id, head_seq=seq, head_hash=head, signed_at=json.loads(msg)["signed_at"],
                            key_id=theirs.key_id, public_key=theirs.public.raw.hex(), signature=theirs.sign(msg))
        a.append_chained("reports", {"id": "report-forged", "kind": "store_checkpoint", "subject": store_id,
                                     "body_json": forged.model_dump_json(), **ref})
        code, data = _verify_cli(a, "--require-signed")
        cp = data.get("checkpoint") or {}
        own_key_ignored = cp.get("untrusted_checkpoints") == 1 and (cp.get("unsigned_by_table") or {}).get("campaigns") == 1
        claimed = forged.model_copy(update={"key_id": cp.get("key_id")})
        a.append_chained("reports", {"id": "report-forged-2", "kind": "store_checkpoint", "subject": store_id,
                                     "body_json": claimed.model_dump_json(), **ref})
        v = a.verify()
        held = code == 2 and own_key_ignored and not v.ok
        return held, (f"own-key checkpoint untrusted={cp.get('untrusted_checkpoints')}, unsigned "
                      f"{cp.get('unsigned_by_table')}, `--require-signed` exit {code}; claiming the owner's key id: "
                      f"verify ok={v.ok} ({(v.problems[0].line() if v.problems else '')[:120]})")


# ------------------------------------------------------------------------------ the other classes
ATTACK_START = (ROOT / "tests" / "test_start_arm_readonly.py")

_EVAL: dict[str, Any] = {}


def _relu_eval() -> Any:
    """One real evaluation of the start-arm attack on relu (the candidate is the start's own code and, at
    import, rewrites every start file it can reach); shared by classes 1 and 13."""
    if "res" not in _EVAL:
        from test_start_arm_readonly import ATTACK

        from harness.measure.session import open_measurement_session
        from harness.store import open_store
        from harness.verdict.evaluate import evaluate_candidate
        from protocol import load_protocol

        proto = load_protocol()
        store = open_store(WORK / "eval.sqlite")
        with open_measurement_session(store, "cpu", proto, note="redteam27") as ctx:
            res = evaluate_candidate("relu", ATTACK, store=store, session=ctx, protocol=proto, prespawn_next=False)
        _EVAL["res"], _EVAL["detail"] = res, store.verdict(res.verdict_id).detail
        store.close()
    return _EVAL["res"]


def a1_start_arm() -> tuple[bool, str]:
    res = _relu_eval()
    svs = res.speedup_vs_start
    held = svs is not None and 0.5 < svs < 2.0 and res.correct
    return held, (f"speedup_vs_start {svs} (829bcb1: 18.9x; honest ~1.0), verdict {res.verdict} "
                  f"({res.reason[:160]}), confinement {res.confinement.get('candidate')}")


def a13_roofline() -> tuple[bool, str]:
    res = _relu_eval()
    detail = _EVAL["detail"]
    frac = detail.get("roofline_fraction")
    held = frac is None or float(frac) <= 1.0
    return held, (f"honest relu's stored roofline_fraction {frac} (829bcb1: 1.86); ceiling defect "
                  f"{str(detail.get('roofline_ceiling_defect'))[:120]}; speedup {res.speedup}")


LEAK = """
import os, json, torch, torch.nn as nn
secrets = [v for v in os.environ.values() if "s3cr3t-pw" in v or "tok3n-pw" in v]
names = sorted(k for k in os.environ if k in ("DATABASE_URL", "OPENAI_BASE_URL"))
raise RuntimeError("exfil " + json.dumps({"names": names, "values": secrets, "db": os.environ.get("DATABASE_URL", "")}))
"""


def a10_credentials() -> tuple[bool, str]:
    """DATABASE_URL and OPENAI_BASE_URL with passwords in the harness's environment; a candidate raises with
    every credential it can see, so the stored reason (what a campaign shows the model) would carry them;
    a KernelBench task file's import does the same in the FLOP-count process."""
    from harness.measure.cost import begin_cost
    from harness.measure.session import open_measurement_session
    from harness.store import open_store
    from harness.tasks import load_task_file
    from harness.verdict.evaluate import evaluate_candidate
    from protocol import load_protocol

    old = {k: os.environ.get(k) for k in ("DATABASE_URL", "OPENAI_BASE_URL")}
    os.environ["DATABASE_URL"], os.environ["OPENAI_BASE_URL"] = SECRET_DB, SECRET_BASE
    try:
        proto = load_protocol()
        store = open_store(WORK / "leak.sqlite")
        with open_measurement_session(store, "cpu", proto, note="redteam27") as ctx:
            res = evaluate_candidate("relu", LEAK, store=store, session=ctx, protocol=proto, prespawn_next=False)
        v = store.verdict(res.verdict_id)
        stored = json.dumps({"reason": v.reason, "gates": [g.model_dump() for g in v.gates], "detail": v.detail})
        store.close()
        task_file = WORK / "leak_task.py"
        task_file.write_text(
            "import os, torch\nN = 1 + (2 if any('s3cr3t-pw' in v or 'tok3n-pw' in v for v in os.environ.values()) "
            "else 0)\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
            "def get_inputs():\n    return [torch.zeros(N)]\ndef get_init_inputs():\n    return []\n")
        counted = begin_cost(load_task_file(task_file)).counted()
    finally:
        for k, val in old.items():
            if val is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = val
    m = re.search(r'exfil (\{.*?\})', v.reason)
    seen = json.loads(m.group(1).replace('\\"', '"')) if m else None
    in_store = "s3cr3t-pw" in stored or "tok3n-pw" in stored
    in_count = counted is not None and counted.input_bytes != 4
    held = not in_store and not in_count and (seen is None or (not seen["names"] and not seen["values"]))
    return held, (f"candidate saw {seen}; secret in stored verdict: {in_store}; count process saw a secret: "
                  f"{in_count} ({counted.confinement if counted else None})")


def a8_forged_transcript() -> tuple[bool, str]:
    """A real (loopback-served) campaign; its transcript's verdicts changed to 5.0x with the same-length text
    patched in the request bodies and the chain recomputed; replayed beside its store and moved elsewhere."""
    from loopback import LoopbackServer
    from loopback.scripts import three_iterations
    from loopback.services import ScriptedServices
    from loopback.workspace import MemoryToolBox
    from test_replay_forged import forge

    from atb_agent.campaign import CampaignSpec, run_campaign
    from atb_agent.errors import ReplayDivergence
    from atb_agent.replay import replay_transcript

    os.environ.setdefault("OPENAI_API_KEY", "sk-redteam")
    with LoopbackServer(three_iterations()) as srv:
        summary = run_campaign(CampaignSpec(task="gelu", tuner="openai:scripted-model", budget=3, seed=7,
                                            store=WORK / "run" / "atb.sqlite",
                                            base_url=srv.openai_base_url, scripted=False),
                                            services=ScriptedServices())
    recorded = Path(summary.outcome.detail["transcript"])

    def replay(p: Path) -> Any:
        return replay_transcript(p, toolbox_factory=lambda inbox, brief: MemoryToolBox(brief, inbox))

    beside = recorded.parent / "forged.jsonl"
    forge(recorded, beside)
    try:
        r = replay(beside)
        beside_said = f"ok={r.ok} verdicts_reproduced={r.verdicts_reproduced}"
        beside_held = not (r.ok and r.verdicts_reproduced)
    except ReplayDivergence as exc:
        beside_said, beside_held = f"ReplayDivergence ({exc.field})", True
    away = WORK / "elsewhere" / "forged.jsonl"
    forge(recorded, away)
    r2 = replay(away)
    away_held = not (r2.ok and r2.verdicts_reproduced)
    return beside_held and away_held, (f"beside its store: {beside_said}; moved away: ok={r2.ok} "
                                       f"verdicts_reproduced={r2.verdicts_reproduced} evidence={r2.verdict_evidence}")


def a9_draft_protocol() -> tuple[bool, str]:
    """The red team's edit (version bumped, anomaly_speedup 1000, paired_seeds 2) relocked; is it said to be a
    draft by `protocol verify`, stamped on a verdict, counted by `store verify`, refused by `compare`?"""
    import protocol._loader as loader
    from protocol.relock import relock

    d = WORK / "draft"
    d.mkdir()
    p, lock = d / "protocol.yaml", d / "protocol.lock.json"
    shutil.copy(loader.PROTOCOL_PATH, p)
    shutil.copy(loader.LOCK_PATH, lock)
    text = re.sub(r"(?m)^version: .*$", "version: 9.9.9", p.read_text(), count=1)
    text = re.sub(r"(?m)^(\s*)anomaly_speedup: .*$", r"\1anomaly_speedup: 1000", text, count=1)
    text = re.sub(r"(?m)^(\s*)paired_seeds: .*$", r"\1paired_seeds: 2", text, count=1)
    p.write_text(text)
    with contextlib.redirect_stdout(io.StringIO()):
        relock(p, lock)
    saved = (loader.PROTOCOL_PATH, loader.LOCK_PATH, os.environ.pop("ATB_ALLOW_DRAFT_PROTOCOL", None))
    loader.PROTOCOL_PATH, loader.LOCK_PATH = p, lock
    try:
        from harness.engines import load_engine_task
        from harness.measure.serving.session import open_engine_session
        from harness.verdict.engine import evaluate_engine_candidate
        from harness.store import open_store
        from protocol import load_protocol

        pcode, pout, _ = _cli(["protocol", "verify", "--json"])
        pv = json.loads(pout)
        proto = load_protocol()
        db = WORK / "draft.sqlite"
        with open_store(db) as store:
            session = open_engine_session(store, proto)
            res = evaluate_engine_candidate(load_engine_task("llamacpp-tiny"), '{"threads": 64}', store=store,
                                            session=session, protocol=proto)
            stamped = store.verdict(res.verdict_id).detail.get("protocol_draft")
        vcode, vout, _ = _cli(["store", "verify", "--db", str(db), "--json"])
        sv = json.loads(vout)
        rcode, _, _ = _cli(["store", "verify", "--db", str(db), "--require-released"])
        ccode, cout, _ = _cli(["compare", "run-a", "run-b", "--db", str(db), "--json"])
    finally:
        loader.PROTOCOL_PATH, loader.LOCK_PATH = saved[0], saved[1]
        if saved[2] is not None:
            os.environ["ATB_ALLOW_DRAFT_PROTOCOL"] = saved[2]
    refused = "DraftProtocolRefused" in cout
    held = pv.get("protocol_draft") is True and stamped is True and sv.get("draft_verdicts", 0) >= 1 \
        and rcode == 2 and refused
    return held, (f"`protocol verify` protocol_draft={pv.get('protocol_draft')} (exit {pcode}); engine verdict "
                  f"protocol_draft={stamped}; `store verify` exit {vcode} draft_verdicts={sv.get('draft_verdicts')}, "
                  f"--require-released exit {rcode}; `compare` refused={refused}")


def _bwrap_box() -> Any:
    from protocol import load_protocol
    from sandbox import SandboxLimits
    from sandbox._bwrap import BwrapSandbox

    return BwrapSandbox(SandboxLimits.from_params(load_protocol().sandbox))


def _toolbox(box: Any) -> Any:
    from tools import ToolBox

    return ToolBox(box, "relu", lambda files: {"verdict": "rejected"})


def a11_list_files_newline() -> tuple[bool, str]:
    box = _bwrap_box()
    try:
        tb = _toolbox(box)
        box.exec("printf x > \"$(printf 'notes (1 bytes)\\ncandidate.py')\"; printf y > plain.py", timeout_s=10)
        out = tb.call("list_files", {}).content
    finally:
        box.close()
    names = [ln.split(" (")[0] for ln in out.splitlines()]
    held = "candidate.py" not in names and len(out.splitlines()) == 2
    return held, f"list_files shows {out.splitlines()!r}"


def a12_long_line() -> tuple[bool, str]:
    box = _bwrap_box()
    try:
        tb = _toolbox(box)
        cap = box.limits.exec_output_cap_bytes
        text = "first\n" + "a" * (cap + 5000) + "\nlast\n"
        box.write_file("blob.py", text)
        got, start, calls = "", 1, 0
        for _ in range(20):
            calls += 1
            out = tb.call("read_file", {"path": "blob.py", "start_line": start})
            body, _, note = out.content.partition("\n[... output capped at")
            got += body
            if not note or "start_line=" not in note:
                break
            start = int(note.rsplit("start_line=", 1)[1].rstrip("]"))
    finally:
        box.close()
    return got == text, f"a {cap + 5000}-byte line (cap {cap}): read back whole={got == text} in {calls} call(s)"


def a14_sweep_unknown_tuner() -> tuple[bool, str]:
    spec = WORK / "sweep.yaml"
    spec.write_text("tasks: [relu]\ntuners: [random, no-such-tuner]\nseeds: [1]\nbudget: 1\n")
    db = WORK / "sweep.sqlite"
    t0 = time.monotonic()
    code, out, _ = _cli(["sweep", str(spec), "--db", str(db), "--json", "--no-live"])
    took = time.monotonic() - t0
    held = code == 2 and took < 10 and not db.exists()
    return held, f"exit {code} after {took:.1f} s (829bcb1: exit 1 after 14 s, Ray started); store created: {db.exists()}"


def a15_compare_creates_store() -> tuple[bool, str]:
    db = WORK / "typo" / "typo.sqlite"
    db.parent.mkdir()
    os.environ["ATB_ALLOW_DRAFT_PROTOCOL"] = "1"      # what is tried here is the store's refusal, not the draft's
    try:
        code, _, _ = _cli(["compare", "run-a", "run-b", "--db", str(db), "--json"])
    finally:
        os.environ.pop("ATB_ALLOW_DRAFT_PROTOCOL", None)
    held = code == 2 and not db.exists() and not os.listdir(db.parent)
    return held, f"exit {code}; files left at --db's folder: {os.listdir(db.parent)}"


STORE_ATTEMPTS: list[tuple[int, str, Callable[[str, str | None], tuple[bool, str]]]] = [
    (2, "forged store (middle-row rewrite, chain recomputed) passes verify", a2_middle_rewrite),
    (3, "verify-verdict agrees with the forged store", a3_verify_verdict),
    (4, "newest verdict deleted", a4_newest_deleted),
    (5, "tail truncated", a5_tail_truncated),
    (6, "fabricated verdict appended", a6_fabricated_verdict),
    (7, "fake openai:gpt-forged campaign appended", a7_fake_campaign),
]
OTHER_ATTEMPTS: list[tuple[int, str, Callable[[], tuple[bool, str]]]] = [
    (1, "candidate rewrites the start arm", a1_start_arm),
    (8, "forged transcript replays as reproduced", a8_forged_transcript),
    (9, "draft protocol never flagged", a9_draft_protocol),
    (10, "URL credentials reach candidate code and stored text", a10_credentials),
    (11, "newline in a file name spoofs list_files", a11_list_files_newline),
    (12, "a line over the read cap cannot be read", a12_long_line),
    (13, "honest relu stores roofline_fraction above 1", a13_roofline),
    (14, "sweep with an unknown tuner starts Ray", a14_sweep_unknown_tuner),
    (15, "compare with an unknown id creates an empty store", a15_compare_creates_store),
]


def _run(cls: int, name: str, store: str, fn: Callable[[], tuple[bool, str]]) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        held, evidence = fn()
        outcome = "held" if held else "broke"
    except Exception as exc:  # noqa: BLE001 - an attempt that cannot be carried out is reported, not hidden
        outcome, evidence = "error", f"{type(exc).__name__}: {exc} | {traceback.format_exc().splitlines()[-3:]}"
    return {"class": cls, "attempt": name, "store": store, "outcome": outcome, "evidence": evidence[:600],
            "s": round(time.perf_counter() - t0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pg", default=os.environ.get("ATB_TEST_PG_URL"))
    ap.add_argument("--only", default="", help="run only attempts whose name contains this text")
    ap.add_argument("--out", default="benchmarks/results/redteam27_cpu")
    args = ap.parse_args()
    from harness.records import utc_now

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = [ln[3:] for ln in subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                             capture_output=True, text=True).stdout.splitlines()]
    rows: list[dict[str, Any]] = []
    plan: list[tuple[int, str, str, Callable[[], tuple[bool, str]]]] = []
    for cls, name, fn in sorted(STORE_ATTEMPTS + OTHER_ATTEMPTS, key=lambda x: x[0]):  # type: ignore[operator]
        if (cls, name, fn) in OTHER_ATTEMPTS:
            plan.append((cls, name, "-", fn))  # type: ignore[arg-type]
            continue
        for kind in ("sqlite", "postgresql"):
            if kind == "postgresql" and not args.pg:
                continue
            plan.append((cls, name, kind, (lambda f=fn, k=kind: f(k, args.pg))))  # type: ignore[misc]
    for cls, name, store, fn in plan:
        if args.only and args.only not in name:
            continue
        row = _run(cls, name, store, fn)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    counts = {k: sum(r["outcome"] == k for r in rows) for k in ("held", "broke", "error")}
    lines = ["# Issue 27's red team, re-run on CPU", "",
             f"{utc_now()}, code `{head}`" + (f" (the working tree also had uncommitted changes in: {', '.join(dirty)})"
                                                if dirty else "") + f", {platform.platform()}, "
             f"Python {platform.python_version()}; PostgreSQL: {'yes' if args.pg else 'not run'}.",
             "Command: `source scripts/services.sh && python benchmarks/redteam27.py`"
             + (f" (`--only {args.only}`)" if args.only else ""), "",
             f"**{counts['held']} held, {counts['broke']} broke, {counts['error']} could not be carried out** "
             f"({len(rows)} attempts over {len({r['class'] for r in rows})} classes).", "",
             "| class | attempt | store | outcome | evidence | s |", "|---|---|---|---|---|---|"]
    for r in rows:
        ev = r["evidence"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r['class']} | {r['attempt']} | {r['store']} | **{r['outcome']}** | {ev} | {r['s']} |")
    lines += ["", "What this does not show:", "",
              "- Only the red team's own techniques are re-tried, one attempt each (two where a store is involved);",
              "  it is a regression check of these 15 classes, not a new red team.",
              "- A known gap, by design and documented in `harness/store/_checkpoint.py`: a writer who rewrites the",
              "  first row and deletes every checkpoint, verified with a key folder that never signed that store,",
              "  sees a store that was never signed (every row reported unsigned; `--require-signed` fails it).",
              "- Appended rows are not refused, only shown as unsigned: a store verified without `--require-signed`",
              "  passes with them (class 6 and 7 hold only in that sense).",
              "- Class 1 was run on CPU only; a start arm on CUDA was not attacked here."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    shutil.rmtree(WORK, ignore_errors=True)
    return 0 if counts["broke"] == 0 and counts["error"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
