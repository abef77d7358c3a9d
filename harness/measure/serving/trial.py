"""One engine trial: the engine's default launch and a candidate launch, measured interleaved over
paired workload seeds.

Both arms are started once and stay up; while one arm is measured the other is paused (SIGSTOP of its
process group), so an idle engine's polling threads cannot take CPU from the one being measured. Each seed's
workload is sent ``engine.reps_per_seed`` times to each arm; the k-th (seed, repetition) pair runs
baseline-candidate for even k and candidate-baseline for odd k (ABBA), so a drift over the trial falls
on both arms alike, and the seed's score is the median repetition. Both arms get the same unmeasured warm-up requests
first. Seeds are drawn unpredictably (``secrets``) unless given, and recorded.

This module collects facts only; :mod:`harness.verdict.gates.engine` judges them and
:mod:`harness.verdict.engine` forms the ratio and turns them into a stored verdict.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harness.engines._errors import EngineLaunchFailed, EngineTaskError
from harness.engines.adapters.base import EngineProbe
from harness.measure.serving.client import WorkloadRun, run_workload
from harness.engines.flags import FlagValue
from harness.engines.llamacpp_build import cache_root
from harness.measure.serving.metrics import WorkloadMetrics, compute_metrics
from harness.measure.serving.outputs import OutputCheck, check_completion
from harness.measure.serving.process import EngineProcess, free_port
from harness.engines.task import EngineTask
from harness.engines.tiny_model import write_tiny_model
from harness.measure.serving.workload import make_workload
from harness.records import canonical_json, sha256_text
from protocol import Protocol

HOST = "127.0.0.1"


class PreparedModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    arg: str
    sha256: str


class ArmResult(BaseModel):
    """Everything observed of one arm."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arm: str
    config: dict[str, FlagValue]
    argv: list[str]
    ready_s: float | None = None
    runs: list[WorkloadRun] = Field(default_factory=list)
    metrics: list[WorkloadMetrics] = Field(default_factory=list)
    alive_at_end: bool = True
    log_excerpt: str = ""

    def throughputs_by_seed(self) -> dict[int, list[float]]:
        """Requests/s of every repetition, per paired seed."""
        out: dict[int, list[float]] = {}
        for m in self.metrics:
            out.setdefault(m.seed, []).append(m.request_throughput)
        return out

    def throughput_by_seed(self) -> dict[int, float]:
        """The median repetition per seed: robust to a burst of other load during one repetition."""
        import statistics

        return {s: float(statistics.median(v)) for s, v in self.throughputs_by_seed().items()}


class EngineTrial(BaseModel):
    """The facts of one trial. ``candidate`` is None when only the candidate's launch failed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str
    engine: str
    seeds: list[int]
    probe: EngineProbe
    model_sha256: str
    baseline: ArmResult
    candidate: ArmResult | None = None
    launch_error: str = ""
    launch_log: str = ""
    output_checks: list[OutputCheck] = Field(
        default_factory=list, description="near-tie checks of the candidate completions that equal no default "
                                          "completion of the same request (see harness.measure.serving.outputs)")


def prepare_model(task: EngineTask) -> PreparedModel:
    """The model argument both arms get; the tiny GGUF is written once per hyperparameter set and cached.

    Raises:
        EngineTaskError: a ``path`` model that does not exist, or a model reference missing its field.
    """
    ref = task.model
    if ref.kind == "tiny-gguf":
        from harness.engines.tiny_model import TinyModelSpec

        spec = ref.tiny or TinyModelSpec()
        key = sha256_text(canonical_json(spec.model_dump(mode="json")))[:16]
        path = cache_root() / "models" / f"tiny-llama-{key}.gguf"
        if not path.is_file():
            tmp = path.with_suffix(".partial")
            write_tiny_model(tmp, spec)
            tmp.replace(path)
        import hashlib

        return PreparedModel(arg=str(path), sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    if ref.kind == "path":
        from harness.engines.llamacpp_model import gguf_sha256, resolve_model_path

        model_path = resolve_model_path(ref.path) if ref.path else ""   # "{cache}/models/..." -> the cache root
        if not model_path or not Path(model_path).exists():
            raise EngineTaskError(f"engine task {task.id}: model path {ref.path!r} does not exist")
        if model_path.endswith(".gguf") and Path(model_path).is_file():
            return PreparedModel(arg=model_path, sha256=gguf_sha256(Path(model_path)))
        st = Path(model_path).stat()
        return PreparedModel(arg=model_path, sha256=sha256_text(f"path:{Path(model_path).resolve()}:{st.st_size}"))
    if not ref.name:
        raise EngineTaskError(f"engine task {task.id}: a hub model needs a name")
    return PreparedModel(arg=ref.name, sha256=sha256_text(f"hub:{ref.name}"))


def draw_seeds(n: int) -> list[int]:
    """``n`` distinct unpredictable workload seeds."""
    seeds: set[int] = set()
    while len(seeds) < n:
        seeds.add(secrets.randbelow(2**31 - 1))
    return sorted(seeds)


def _launch(task: EngineTask, config: dict[str, FlagValue], model: PreparedModel, protocol: Protocol,
            log_dir: Path, arm: str) -> EngineProcess:
    spec = task.adapter().launch(config, model=model.arg, host=HOST, port=free_port(HOST),
                                 fixed_args=task.fixed_args)
    proc = EngineProcess(spec, log_dir / f"{arm}.log")
    proc.start()
    try:
        proc.wait_ready(protocol.engine.startup_timeout_s)
    except EngineLaunchFailed:
        proc.stop()
        raise
    return proc


def run_engine_trial(task: EngineTask, config: dict[str, FlagValue], protocol: Protocol, *,
                     seeds: list[int] | None = None, log_dir: Path | None = None,
                     progress: Callable[[str], None] | None = None) -> EngineTrial:
    """Measure the engine's default launch against ``config`` on paired workload seeds.

    ``config`` must already be validated against ``task.flag_space()``. A candidate that fails to
    launch returns a trial with ``launch_error`` set (never a hang: the start-up timeout bounds it).

    Raises:
        EngineNotBuilt: the engine is not installed here.
        EngineLaunchFailed: the *default* launch failed: the task or machine is broken, not the candidate.
    """
    import tempfile

    say = progress or (lambda _m: None)
    adapter = task.adapter()
    probe = adapter.probe()
    model = prepare_model(task)
    seeds = list(seeds) if seeds is not None else draw_seeds(protocol.seeds.paired_seeds)
    n_req = protocol.engine.requests_per_trial
    timeout = protocol.engine.request_timeout_s
    warm = make_workload(task.workload, draw_seeds(1)[0], protocol.engine.warmup_requests) \
        if protocol.engine.warmup_requests else None
    name = task.served_model_name

    with ExitStack() as stack:
        # Engine logs live in a temporary directory unless the caller keeps them; excerpts that matter
        # (a failed launch, a crash) are copied into the trial before it is removed.
        logs = log_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="atb-engine-trial-")))
        logs.mkdir(parents=True, exist_ok=True)
        say(f"launching {task.engine} default configuration")
        base = _launch(task, {}, model, protocol, logs, "baseline")
        stack.callback(base.stop)
        if warm is not None:
            run_workload(base.base_url, name, warm, timeout)
        base.pause()
        base_argv = base.spec.argv
        say(f"launching {task.engine} candidate configuration {canonical_json(config)}")
        try:
            cand = _launch(task, config, model, protocol, logs, "candidate")
        except EngineLaunchFailed as exc:
            return EngineTrial(
                task_id=task.id, engine=task.engine, seeds=seeds, probe=probe, model_sha256=model.sha256,
                baseline=ArmResult(arm="baseline", config={}, argv=base_argv, ready_s=base.ready_after_s),
                candidate=None, launch_error=str(exc).split("; engine log ends with:")[0],
                launch_log=exc.log_excerpt[-2000:])
        stack.callback(cand.stop)
        if warm is not None:
            run_workload(cand.base_url, name, warm, timeout)
        cand.pause()
        procs = {"baseline": base, "candidate": cand}
        runs: dict[str, list[WorkloadRun]] = {"baseline": [], "candidate": []}
        reps = protocol.engine.reps_per_seed
        for i, seed in enumerate(seeds):
            workload = make_workload(task.workload, seed, n_req)
            for rep in range(reps):
                k = i * reps + rep
                for arm in (("baseline", "candidate") if k % 2 == 0 else ("candidate", "baseline")):
                    proc = procs[arm]
                    proc.resume()
                    run = run_workload(proc.base_url, name, workload, timeout)
                    runs[arm].append(run.model_copy(update={"rep": rep}))
                    proc.pause()
            say(f"seed {i + 1}/{len(seeds)}: baseline {compute_metrics(runs['baseline'][-1]).request_throughput:.2f} "
                f"req/s, candidate {compute_metrics(runs['candidate'][-1]).request_throughput:.2f} req/s")
        checks = _check_outputs(task, protocol, base, runs, seeds, say) if adapter.greedy_check else []
        arms = {}
        for arm, proc in procs.items():
            arms[arm] = ArmResult(arm=arm, config={} if arm == "baseline" else config, argv=proc.spec.argv,
                                  ready_s=proc.ready_after_s, runs=runs[arm],
                                  metrics=[compute_metrics(r) for r in runs[arm]], alive_at_end=proc.alive(),
                                  log_excerpt="" if proc.alive() else proc.log_excerpt()[-2000:])
    return EngineTrial(task_id=task.id, engine=task.engine, seeds=seeds, probe=probe, model_sha256=model.sha256,
                       baseline=arms["baseline"], candidate=arms["candidate"], output_checks=checks)


def _check_outputs(task: EngineTask, protocol: Protocol, base: EngineProcess, runs: dict[str, list[WorkloadRun]],
                   seeds: list[int], say: Callable[[str], None]) -> list[OutputCheck]:
    """After the timed repetitions (nothing here is timed): every distinct candidate completion that equals
    no default completion of the same request is walked along the default launch's greedy path, one request
    at a time (where the default is reproducible), with the candidate paused."""
    defaults: dict[tuple[int, int], set[str]] = {}
    for run in runs["baseline"]:
        for r in run.results:
            if r.ok:
                defaults.setdefault((run.seed, r.index), set()).add(r.text)
    todo: dict[tuple[int, int, str], None] = {}
    for run in runs["candidate"]:
        for r in run.results:
            if r.ok and r.text not in defaults.get((run.seed, r.index), set()):
                todo[(run.seed, r.index, r.text)] = None
    if not todo:
        return []
    requests = {s: {q.index: q for q in make_workload(task.workload, s, protocol.engine.requests_per_trial).requests}
                for s in seeds}
    say(f"checking {len(todo)} candidate completions that differ from every default completion for near ties")
    import httpx2

    e = protocol.engine
    out: list[OutputCheck] = []
    base.resume()
    try:
        with httpx2.Client(timeout=e.request_timeout_s, trust_env=False) as http:
            for seed, index, text in todo:
                req = requests[seed][index]
                out.append(check_completion(base.base_url, prompt=req.prompt, text=text, max_tokens=req.max_tokens,
                                            seed=seed, index=index, tolerance_nats=e.output_tie_tolerance_nats,
                                            top_n=e.output_check_top_n, timeout_s=e.request_timeout_s, client=http,
                                            ignore_eos=task.workload.ignore_eos))
    finally:
        base.pause()
    return out
