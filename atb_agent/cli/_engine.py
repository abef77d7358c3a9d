"""``atb engine build|make-model|flags|eval``: serving-engine tasks.

* ``atb engine build llama-cpp`` builds (or reuses) the cached C++ ``llama-server``;
* ``atb engine make-model`` writes the seeded tiny random-weight llama GGUF;
* ``atb engine flags ENGINE_TASK`` lists the flags a tuner may set, with ranges and constraints;
* ``atb engine eval ENGINE_TASK CONFIG`` measures a configuration (a JSON/YAML file, or inline JSON)
  against the engine's default launch and stores the verdict.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from atb_agent.cli import _args
from atb_agent.cli._common import EXIT_OK, BadInput, add_db, add_json, emit, progress


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("engine", help="serving-engine tasks: build llama-server, make the tiny model, evaluate")
    esub = p.add_subparsers(dest="engine_command", metavar="ACTION", parser_class=type(p))
    esub.required = True

    b = esub.add_parser("build", help="build (or reuse) an engine binary: `atb engine build llama-cpp`")
    b.add_argument("target", choices=["llama-cpp"])
    b.add_argument("--jobs", type=_args.jobs, default=2, help="parallel compile jobs (default 2)")
    b.add_argument("--sdist", type=Path, default=None,
                   help="a local llama-cpp-python source distribution instead of downloading it")
    add_json(b)
    b.set_defaults(handler=_build)

    m = esub.add_parser("make-model", help="write the seeded tiny random-weight llama GGUF")
    m.add_argument("--out", type=Path, default=Path("tiny-llama.gguf"), help="output path (default ./tiny-llama.gguf)")
    m.add_argument("--seed", type=_args.seed, default=0)
    m.add_argument("--embedding-length", type=_args.embedding_length, default=None)
    m.add_argument("--block-count", type=_args.block_count, default=None)
    add_json(m)
    m.set_defaults(handler=_make_model)

    f = esub.add_parser("flags", help="list an engine task's tunable flags")
    f.add_argument("task", metavar="ENGINE_TASK")
    add_json(f)
    f.set_defaults(handler=_flags)

    e = esub.add_parser("eval", help="measure a flag configuration against the engine's default launch")
    e.add_argument("task", metavar="ENGINE_TASK", help="a shipped engine task name or a task YAML file")
    e.add_argument("config", metavar="CONFIG", help="a JSON/YAML file of flag -> value, or inline JSON")
    e.add_argument("--logs", type=Path, default=None, help="keep the engines' logs in this directory")
    add_db(e)
    add_json(e)
    e.set_defaults(handler=_eval)


def _build(args: argparse.Namespace) -> int:
    from harness.engines import build_llama_server

    if args.jobs < 1:
        raise BadInput("--jobs must be at least 1")
    res = build_llama_server(jobs=args.jobs, sdist=args.sdist, progress=progress)
    how = "reused cached" if res.reused else f"built in {res.seconds:.0f} s:"
    emit(res, args, f"{how} {res.binary}\n{res.version_text}")
    return EXIT_OK


def _make_model(args: argparse.Namespace) -> int:
    from harness.engines import TinyModelSpec, write_tiny_model

    over = {k: v for k, v in {"embedding_length": args.embedding_length, "block_count": args.block_count}.items()
            if v is not None}
    try:
        spec = TinyModelSpec(seed=args.seed, **over)
    except ValueError as exc:
        raise BadInput(f"bad model hyperparameters: {' '.join(str(exc).split())}") from exc
    model = write_tiny_model(args.out, spec)
    emit(model, args, f"wrote {model.path} ({model.bytes} bytes, vocab {model.vocab_size}, sha256 {model.sha256})")
    return EXIT_OK


def _flags(args: argparse.Namespace) -> int:
    from harness.engines import load_engine_task

    task = load_engine_task(args.task)
    space = task.flag_space()
    payload = {"task": task.id, "engine": task.engine, "flags": space.describe(),
               "constraints": [c.model_dump() for c in space.constraints]}
    lines = [f"{task.id} ({task.engine}):"]
    for fl in space.flags:
        rng = f"{fl.low:g}..{fl.high:g}" if fl.low is not None else (
            "|".join(fl.choices or []) if fl.choices else "true|false")
        lines.append(f"  {fl.name:<28} {fl.type:<6} {rng:<24} default {fl.default!s:<8} {fl.help}")
    lines += [f"  constraint: {c.model_dump()}" for c in space.constraints]
    emit(payload, args, "\n".join(lines))
    return EXIT_OK


def _config_text(arg: str) -> str:
    p = Path(arg)
    if p.is_file():
        return p.read_text()
    if arg.lstrip().startswith("{"):
        return arg
    raise BadInput(f"CONFIG '{arg}' is neither a file nor inline JSON (e.g. '{{\"parallel\": 4}}')")


def _eval(args: argparse.Namespace) -> int:
    from harness.engines import load_engine_task
    from harness.measure.serving.session import open_engine_session
    from harness.store import open_store
    from harness.verdict.engine import evaluate_engine_candidate
    from protocol import load_protocol

    task = load_engine_task(args.task)
    text = _config_text(args.config)
    protocol = load_protocol()
    store = open_store(args.db)
    session = open_engine_session(store, protocol, backend="cuda" if task.requires_gpu else "cpu",
                                  note=f"atb engine eval {task.id}")
    res = evaluate_engine_candidate(task, text, store=store, session=session, protocol=protocol,
                                    log_dir=args.logs, progress=progress)
    ci = f" (95% CI {res.speedup_ci[0]:.3f}-{res.speedup_ci[1]:.3f})" if res.speedup_ci else ""
    ratio = f"{res.speedup:.3f}x{ci} vs {res.baseline_label}" if res.speedup is not None else "no ratio"
    human = f"{res.verdict}: {ratio}; verdict {res.verdict_id}" + (f"\nreason: {res.reason}" if res.reason else "")
    emit(res, args, human)
    return EXIT_OK
