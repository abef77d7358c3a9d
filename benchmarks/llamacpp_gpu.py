"""Issue 30 on the GPU machine: llama-server built for CUDA, measured under the GPU flag space.

Items, in order, one JSON line each in ``--out`` as it finishes (an item with ``"status": "ok"`` there is not
run again, so the same command resumes in the next device call):

* ``build``: the CUDA ``llama-server`` (``build_llama_server(accelerator="cuda")``, Hopper only), or on
  ``--accelerator cpu`` the cached CPU build; its CMake flags, version and SHA-256.
* ``probe``: the binary's ``--version`` and which GPU-space flags its ``--help`` lacks (none expected).
* ``aa``: the default launch against itself on the campaign's task (the A/A: its interval should contain 1.0;
  the issue's target is a width of at most 5%).
* ``spec-repetitive``, ``spec-random``: n-gram speculation (``--spec-config``, default ngram-simple) on the
  repetitive workload, where it can win, and on the random one, where it cannot.
* ``campaign``: seeded random search over the GPU flag space (``--budget``, default 10), one line per
  iteration (``campaign-iter``) and one for the campaign; it has a fixed id, so a call cut short resumes it.
* ``remeasure-best``: the campaign's best usable configuration measured again in a fresh session.

Every trial is the harness's own (``evaluate_engine_candidate`` / ``random_search_task``): default and candidate
launched, warmed, measured interleaved on the protocol's paired seeds, judged by the engine gates (output
match included) and stored. Lines report ratios only: requests/s and output tokens/s (candidate over
default, higher is better) and the latency percentiles TTFT, TPOT and end-to-end at p50 and p99 (candidate
over default, lower is better), beside the verdict, its interval and the gates that failed.

``--accelerator cpu`` rehearses the whole path on this kind of machine: the CPU build of the same sdist
stands in for the CUDA one (``ATB_LLAMA_SERVER_BINARY``; ``-ngl`` is accepted and ignored there, CUDA
graphs' variable is not read), over the same GPU flag space, with CPU-sized copies of the two tasks (the
same prompt styles, shorter prompts and answers, one generation thread) written under ``--work``.

Usage on the GPU machine (after ``scripts/device_kit.py unpack-llama-src`` and the kit's setup; see
docs/llamacpp_gpu.md for the calls and carry lists)::

    python3 benchmarks/llamacpp_gpu.py --accelerator cuda --work benchmarks/results/llamacpp_gpu \\
        --time-budget-s 540

Here (a rehearsal with small budgets)::

    python benchmarks/llamacpp_gpu.py --accelerator cpu --work /tmp/atb-gpu-rehearsal --budget 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if str(Path(__file__).resolve().parent) not in sys.path:   # benchmarks/, for _measuring_digest
    sys.path.append(str(Path(__file__).resolve().parent))
from _code_rev import checked_code_rev  # noqa: E402
from _measuring_digest import process_measuring_digest

import yaml  # noqa: E402

from harness.engines import load_engine_task, render_config  # noqa: E402
from harness.engines._errors import EngineBuildError  # noqa: E402
from harness.engines.adapters.llamacpp import BINARY_ENV  # noqa: E402
from harness.engines.llamacpp_build import build_llama_server  # noqa: E402
from harness.engines.task import TASKS_DIR, get_adapter  # noqa: E402
from harness.measure.serving.session import open_engine_session  # noqa: E402
from harness.store import ResultStore, open_store  # noqa: E402
from harness.tuning.search import random_search_task  # noqa: E402
from harness.verdict.engine import EngineEvalResult, evaluate_engine_candidate  # noqa: E402
from protocol import Protocol, load_protocol  # noqa: E402

ITEMS = ("build", "probe", "aa", "spec-repetitive", "spec-random", "campaign", "remeasure-best")
HIGHER_IS_BETTER = ("request_throughput", "output_token_throughput")
LOWER_IS_BETTER = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p50_s", "e2e_p99_s")
#: the CPU rehearsal's workload sizes (the GPU tasks' prompt styles, sized for one thread on a shared 2-core box)
CPU_WORKLOAD = {"prompt_words_min": 24, "prompt_words_max": 48, "output_tokens_min": 12, "output_tokens_max": 24,
                "concurrency": 4}
CPU_FIXED_ARGS = ["--ctx-size", "4096", "--seed", "0", "--threads-http", "2", "--threads", "1"]


class OutOfTime(Exception):
    """The call's time budget cannot fit another trial: stop between trials (the next call resumes)."""


def say(msg: str) -> None:
    print(f"[llamacpp_gpu] {msg}", file=sys.stderr, flush=True)


def code_rev() -> str:
    """The commit measured, 40 hex digits (``benchmarks/_code_rev.py``: a snapshot names its own)."""
    return checked_code_rev(ROOT, short=False)


def ratios(metrics: dict[str, Any]) -> dict[str, float | None]:
    """Candidate over default for each summary figure (throughputs: higher is better; latencies: lower)."""
    base, cand = metrics.get("baseline") or {}, metrics.get("candidate") or {}
    out: dict[str, float | None] = {}
    for key in (*HIGHER_IS_BETTER, *LOWER_IS_BETTER):
        b, c = base.get(key), cand.get(key)
        out[key] = round(c / b, 4) if isinstance(b, (int, float)) and isinstance(c, (int, float)) and b > 0 else None
    return out


def result_row(res: EngineEvalResult) -> dict[str, Any]:
    ci = list(res.speedup_ci) if res.speedup_ci else None
    return {
        "verdict": res.verdict, "verdict_id": res.verdict_id, "correct": res.correct, "ratio": res.speedup,
        "ci": ci, "ci_width_rel": round((ci[1] - ci[0]) / res.speedup, 4) if ci and res.speedup else None,
        "ci_contains_one": bool(ci and ci[0] <= 1.0 <= ci[1]), "usable": res.usable_ci, "seeds": res.seeds,
        "ratios": ratios(res.metrics), "config": res.config, "reason": res.reason,
        "failed_gates": {g.name: g.detail[:600] for g in res.gates if not g.passed},
        "output_match": next((g.detail[:600] for g in res.gates if g.name == "output_match"), None),
    }


# ----------------------------------------------------------------------------------- tasks

def cpu_rehearsal_task(name: str, work: Path) -> Path:
    """A CPU-sized copy of a shipped GPU task (same engine, flag space and prompt style), written under ``work``."""
    data = yaml.safe_load((TASKS_DIR / f"{name.replace('-', '_')}.yaml").read_text())
    data["id"] = f"{data['id']}-cpu-rehearsal"
    data["fixed_args"] = list(CPU_FIXED_ARGS)
    data["bounds"] = {"parallel": [1, 8]}
    data["requires_gpu"] = False
    data["description"] = "CPU rehearsal of " + " ".join(str(data.get("description", "")).split())
    wl = dict(data["workload"])
    wl.update(CPU_WORKLOAD)
    if wl.get("repeat_unit_words"):
        wl["repeat_unit_words"] = 8
    data["workload"] = wl
    path = work / "tasks" / f"{data['id']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def task_paths(args: argparse.Namespace) -> dict[str, Path]:
    names = {"repetitive": "llamacpp-gpu-repetitive", "random": "llamacpp-gpu-random"}
    if args.accelerator == "cpu":
        return {k: cpu_rehearsal_task(v, args.work) for k, v in names.items()}
    return {k: TASKS_DIR / f"{v.replace('-', '_')}.yaml" for k, v in names.items()}


# ----------------------------------------------------------------------------------- a build that outlives its machine

def export_build(bin_dir: Path, dest: Path) -> dict[str, Any]:
    """``bin_dir`` (llama-server and its shared libraries) as ``DEST/llama-server-bin.tar.xz`` with its SHA-256:
    brought back in a device call's files, carried to a fresh machine and given to ``--import-build``, so a
    machine that went cold does not compile again."""
    import hashlib
    import lzma
    import tarfile

    dest.mkdir(parents=True, exist_ok=True)
    out = dest / "llama-server-bin.tar.xz"
    with lzma.open(out, "wb", preset=6) as raw, tarfile.open(fileobj=raw, mode="w") as tar:  # type: ignore[call-overload]
        tar.add(str(bin_dir), arcname="bin")
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    (dest / "llama-server-bin.json").write_text(json.dumps({"file": out.name, "sha256": digest,
                                                            "bytes": out.stat().st_size}))
    say(f"exported {bin_dir} as {out} ({out.stat().st_size / 1048576:.1f} MiB)")
    return {"file": str(out), "sha256": digest, "bytes": out.stat().st_size}


def import_build(archive: Path, accelerator: Literal["cpu", "cuda"]) -> None:
    """Put an exported build where ``build_llama_server`` reuses it (it still has to answer ``--version``)."""
    import tarfile

    from harness.engines.llamacpp_build import cached_binary, version_dir

    if cached_binary(accelerator=accelerator) is not None:
        return
    root = version_dir(accelerator=accelerator)
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(root, filter="data")
    say(f"imported {archive} into {root / 'bin'}")


# ----------------------------------------------------------------------------------- the run

class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.monotonic()
        self.out: Path = args.out
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.done: dict[str, dict[str, Any]] = {}
        self.iterations: dict[int, dict[str, Any]] = {}
        if self.out.is_file():
            for line in self.out.read_text().splitlines():
                row = json.loads(line)
                if row.get("item") == "campaign-iter":
                    self.iterations[int(row["iteration"])] = row
                elif row.get("status") == "ok":
                    self.done[row["item"]] = row
        self.protocol: Protocol = load_protocol()
        self.store: ResultStore = open_store(str(args.work / "atb.sqlite"))
        self.tasks = task_paths(args)
        self.trial_s = max([float(r.get("wall_s", 0)) for r in [*self.done.values(), *self.iterations.values()]
                            if r.get("item") != "build"] + [args.trial_estimate_s])
        self._session: str | None = None
        self._iter_t = time.monotonic()
        self.backend: Literal["cpu", "cuda"] = "cuda" if args.accelerator == "cuda" else "cpu"

    # -- bookkeeping
    def left_s(self) -> float:
        return self.args.time_budget_s - (time.monotonic() - self.t0)

    def need_time(self, what: str) -> None:
        if self.left_s() < 1.2 * self.trial_s:
            raise OutOfTime(f"{self.left_s():.0f} s left, a trial takes about {self.trial_s:.0f} s: {what} waits "
                            "for the next call")

    def write(self, row: dict[str, Any]) -> None:
        row = {"accelerator": self.args.accelerator, "code_rev": code_rev(),
               "measuring_digest": process_measuring_digest(ROOT),
               "protocol_sha256": self.protocol.ref().sha256, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               **row}
        with open(self.out, "a") as fh:
            fh.write(json.dumps(row, sort_keys=True) + "\n")
        if row.get("status") == "ok" and row.get("item") != "campaign-iter":
            self.done[row["item"]] = row
        if "wall_s" in row and row.get("item") not in ("build", "probe"):
            self.trial_s = max(self.trial_s, float(row["wall_s"]))

    def session(self) -> str:
        if self._session is None:
            self._session = open_engine_session(self.store, self.protocol, self.backend,
                                                note=f"llamacpp_gpu ({self.args.accelerator})").session_id
        return self._session

    def trial(self, item: str, task: str, config: dict[str, Any], session: str | None = None) -> None:
        self.need_time(item)
        say(f"{item}: {task} {json.dumps(config, sort_keys=True)}")
        t = time.monotonic()
        res = evaluate_engine_candidate(load_engine_task(self.tasks[task]), render_config(config), store=self.store,
                                        session=session or self.session(), protocol=self.protocol,
                                        progress=lambda m: say(f"  {m}"))
        row = {"item": item, "status": "ok", "task": task, "wall_s": round(time.monotonic() - t, 1),
               **result_row(res)}
        self.write(row)
        say(f"{item}: ratio {res.speedup} ci {res.speedup_ci} {res.verdict} in {row['wall_s']} s")

    # -- items
    def build(self) -> None:
        if self.args.accelerator == "cuda" and shutil.which("nvcc") is None and Path("/usr/local/cuda/bin/nvcc").is_file():
            os.environ["PATH"] = "/usr/local/cuda/bin" + os.pathsep + os.environ.get("PATH", "")
        if self.args.import_build is not None:
            import_build(self.args.import_build, self.args.accelerator)
        t = time.monotonic()
        res = build_llama_server(jobs=self.args.jobs, accelerator=self.args.accelerator, progress=say)
        if self.args.accelerator == "cpu":
            os.environ[BINARY_ENV] = res.binary
        exported = export_build(Path(res.lib_dir), self.args.export_build) if self.args.export_build else None
        self.write({"item": "build", "status": "ok", "wall_s": round(time.monotonic() - t, 1),
                    **res.model_dump(mode="json"), "exported": exported})

    def ensure_binary(self) -> None:
        """The CPU rehearsal launches the CPU build through the GPU adapter (a resumed call skips build)."""
        if self.args.accelerator == "cpu" and not os.environ.get(BINARY_ENV):
            from harness.engines.llamacpp_build import cached_binary

            exe = cached_binary()
            if exe is not None:
                os.environ[BINARY_ENV] = str(exe)

    def probe(self) -> None:
        p = get_adapter("llama-server-cuda").probe()
        self.write({"item": "probe", "status": "ok" if not p.space_flags_missing else "error",
                    **p.model_dump(mode="json", exclude={"flags_in_help"})})

    def campaign(self) -> dict[str, Any]:
        task = self.tasks[self.args.campaign_task]
        cid = f"llamacpp-gpu-{self.args.accelerator}-{self.args.campaign_task}-b{self.args.budget}-s{self.args.seed}"
        self.need_time("campaign")

        def on_iteration(idx: int, knobs: dict[str, Any], result: Any) -> None:
            if isinstance(result, EngineEvalResult) and idx not in self.iterations:
                row = {"item": "campaign-iter", "status": "ok", "iteration": idx, "campaign_id": cid,
                       "knobs": knobs, "wall_s": round(time.monotonic() - self._iter_t, 1), **result_row(result)}
                self.iterations[idx] = row
                self.write(row)
                say(f"campaign iteration {idx}: {json.dumps(knobs, sort_keys=True)} -> {result.verdict} "
                    f"{result.speedup} {result.speedup_ci}")
            if idx + 1 < self.args.budget:
                self.need_time(f"campaign iteration {idx + 2}")
            self._iter_t = time.monotonic()

        self._iter_t = time.monotonic()
        summary = random_search_task(task, store=self.store, protocol=self.protocol, budget=self.args.budget,
                                     seed=self.args.seed, backend=self.backend,
                                     campaign_id=cid, on_iteration=on_iteration)
        best = self.best()
        row = {"item": "campaign", "status": "ok", "campaign_id": cid, "task": self.args.campaign_task,
               "budget": self.args.budget, "seed": self.args.seed, "outcome": summary.outcome.model_dump(mode="json") if summary.outcome is not None else None,
               "iterations_recorded": summary.iterations_recorded, "usable_iterations": summary.usable_iterations,
               "best_speedup": summary.best_speedup, "best_ci": list(summary.best_ci) if summary.best_ci else None,
               "best_iteration": summary.best_iteration, "unusable_reasons": summary.unusable_reasons,
               "best_config": best.get("config") if best else None}
        self.write(row)
        return row

    def best(self) -> dict[str, Any] | None:
        usable = [r for r in self.iterations.values() if r.get("usable") and r.get("verdict") == "accepted"
                  and r.get("ratio") is not None]
        return max(usable, key=lambda r: r["ratio"]) if usable else None

    def remeasure_best(self) -> None:
        best = self.best()
        if best is None:
            self.write({"item": "remeasure-best", "status": "ok", "skipped": "no usable accepted iteration"})
            return
        fresh = open_engine_session(self.store, self.protocol, self.backend,
                                    note="llamacpp_gpu: best configuration re-measured").session_id
        self.trial("remeasure-best", self.args.campaign_task, best["config"], session=fresh)
        row = self.done["remeasure-best"]
        agree = (best["ci"] is not None and row.get("ratio") is not None
                 and best["ci"][0] <= row["ratio"] <= best["ci"][1])
        self.write({"item": "remeasure-agreement", "status": "ok", "campaign_ratio": best["ratio"],
                    "campaign_ci": best["ci"], "remeasured_ratio": row.get("ratio"), "remeasured_ci": row.get("ci"),
                    "within_campaign_ci": agree})

    def run(self) -> int:
        only = [s for s in self.args.only.split(",") if s] if self.args.only else list(ITEMS)
        spec = json.loads(self.args.spec_config)
        steps = {
            "build": self.build, "probe": self.probe,
            "aa": lambda: self.trial("aa", self.args.campaign_task, {}),
            "spec-repetitive": lambda: self.trial("spec-repetitive", "repetitive", spec),
            "spec-random": lambda: self.trial("spec-random", "random", spec),
            "campaign": self.campaign, "remeasure-best": self.remeasure_best,
        }
        self.ensure_binary()
        try:
            for item in only:
                if item in self.done:
                    say(f"{item}: done before ({self.out})")
                    continue
                try:
                    steps[item]()
                except (OutOfTime, KeyboardInterrupt):
                    raise
                except EngineBuildError as exc:
                    self.write({"item": item, "status": "error", "error": str(exc)[-2000:]})
                    say(f"{item} failed; later items need the build: {exc}")
                    return 1
                except Exception as exc:  # noqa: BLE001 - recorded, and the next item still runs
                    self.write({"item": item, "status": "error", "error": f"{type(exc).__name__}: {exc}"[-2000:]})
                    say(f"{item} failed: {type(exc).__name__}: {exc}")
        except OutOfTime as exc:
            say(f"stopping: {exc}")
            return 3
        left = [i for i in only if i not in self.done]
        say("done" if not left else f"not done: {', '.join(left)}")
        return 0 if not left else 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accelerator", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "results" / "llamacpp_gpu",
                    help="the store (atb.sqlite), rehearsal tasks; carry it between calls")
    ap.add_argument("--out", type=Path, default=None, help="JSON lines (default WORK/llamacpp_gpu_ACCEL.jsonl)")
    ap.add_argument("--only", default="", help=f"comma-separated items (default all: {','.join(ITEMS)})")
    ap.add_argument("--budget", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--campaign-task", choices=["repetitive", "random"], default="repetitive")
    ap.add_argument("--spec-config", default='{"spec_type": "ngram-simple"}',
                    help="the speculation trials' configuration. Checked on CPU (SmolLM2, one request, 64 tokens): "
                         "ngram-simple at its default sizes drafted 60 accepted tokens on a gpu-repetitive prompt "
                         "but none on the rehearsal's short prompts; ngram-mod drafted on both")
    ap.add_argument("--time-budget-s", type=float, default=540.0,
                    help="stop between trials when another would not fit (the device call's limit is 600 s)")
    ap.add_argument("--trial-estimate-s", type=float, default=90.0, help="a trial's wall time until one is measured")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="compile jobs of the build")
    ap.add_argument("--export-build", type=Path, default=None,
                    help="after the build, pack its bin/ as DIR/llama-server-bin.tar.xz (e.g. $OUT)")
    ap.add_argument("--import-build", type=Path, default=None,
                    help="an exported llama-server-bin.tar.xz to reuse instead of compiling")
    args = ap.parse_args(argv)
    code_rev()   # a snapshot whose ATB_CODE_REV names another commit stops here, before anything runs
    args.work.mkdir(parents=True, exist_ok=True)
    args.out = args.out or args.work / f"llamacpp_gpu_{args.accelerator}.jsonl"
    return Run(args).run()


if __name__ == "__main__":
    sys.exit(main())
