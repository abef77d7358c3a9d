"""Issue 26, campaign speed: parallel first-call compile whose workers are gone before timing, and a
compile cache shared only among the harness's exact renderings of compiled points (one entry per problem;
tests/test_compile_cache_problem.py tests the per-problem key and the merge).

No test here reads a time: they check which threads and processes exist, which folders a child gets,
and which files cross between evaluations.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.measure import compile_cache
from harness.measure.compile_cache import (
    CHILD_DIR,
    RenderedPointCache,
    bound_by_confinement,
    lend,
)
from harness.measure.compile_threads import ENV, MAX_COMPILE_THREADS, compile_threads
from harness.measure.runner import Worker, _confine
from harness.measure.session import worker_config
from harness.tasks import load_task
from harness.tasks._module_space import point_of_rendering, render_point
from protocol import load_protocol

ROOT = Path(__file__).resolve().parents[1]
TASK = load_task(str(ROOT / "tests/fixtures/module_space/tiny_conv_relu.py"))
COMPILED = render_point(TASK, {"compile": "default"})
P = load_protocol()


# ------------------------------------------------------------------------------ the thread knob
def test_compile_threads_knob_is_clamped_and_defaults_to_the_cpu_count() -> None:
    assert compile_threads({ENV: "1"}) == 1
    assert compile_threads({ENV: "0"}) == 1
    assert compile_threads({ENV: "64"}) == MAX_COMPILE_THREADS
    assert 1 <= compile_threads({}) <= MAX_COMPILE_THREADS
    with pytest.raises(ValueError):
        compile_threads({ENV: "many"})


def test_worker_config_carries_the_compile_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "3")
    assert worker_config("cpu", P)["compile_threads"] == 3


# -------------------------------------------------------------- no compile worker while timing
def test_the_child_ends_the_compile_pools_after_the_first_call_and_before_timing() -> None:
    """The load handler ends the pools after its untimed first call and before any fact is taken; the
    prepare handler (the start of every timed seed) ends them again."""
    tree = ast.parse((ROOT / "harness/measure/runner/_child.py").read_text())
    funcs = {f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}

    def calls(name: str) -> list[str]:
        out: list[tuple[int, str]] = []
        for node in ast.walk(funcs[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                out.append((node.lineno, node.func.id))
        return [n for _, n in sorted(out)]

    load = calls("_cmd_load")
    assert "_end_compile_pool" in load
    assert load.index("_forward") < load.index("_end_compile_pool") < load.index("_check_finished")
    assert "_end_compile_pool" in calls("_cmd_prepare")


POOL_PROBE = textwrap.dedent('''
    import json, os, sys
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "2"
    os.environ["TORCHINDUCTOR_QUIESCE_ASYNC_COMPILE_POOL"] = "0"
    from torch._inductor.async_compile import AsyncCompile
    from harness.measure.runner._compile_pool import compile_threads_alive, end_compile_pools

    def children():
        kids = []
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                kids += f.read().split()
        return kids

    AsyncCompile.pool().submit(lambda: 1).result()      # the C++ compile's thread pool
    AsyncCompile.wait_pool_ready(timeout=120)           # the Triton sidecar process and its reader thread
    before = {"threads": compile_threads_alive(), "children": children()}
    ended = end_compile_pools()
    from torch._inductor import config
    after = {"threads": compile_threads_alive(), "children": children(), "compile_threads": config.compile_threads,
             "ended": ended, "pool_cached": AsyncCompile.pool.cache_info().currsize}
    print(json.dumps({"before": before, "after": after}))
''')


def test_no_compile_worker_outlives_end_compile_pools() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", POOL_PROBE], capture_output=True, text=True, env=env, timeout=240,
                         check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    # the probe did start both kinds of worker
    assert got["before"]["children"] and any(t.startswith("ThreadPoolExecutor") for t in got["before"]["threads"])
    assert any(t == "InductorSubproc" for t in got["before"]["threads"])
    after = got["after"]
    assert after["threads"] == [] and after["children"] == [], after
    assert after["compile_threads"] == 1 and after["pool_cached"] == 0   # a later compile runs in process
    assert not any(e.startswith("error") for e in after["ended"]), after


POOL_CANDIDATE = '''
import json, os, threading
import torch
import torch.nn as nn


def _children():
    kids = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/children") as f:
            kids += f.read().split()
    return kids


class ModelNew(nn.Module):
    calls = 0

    def forward(self, x):
        from torch._inductor.async_compile import AsyncCompile
        from torch._inductor import config

        ModelNew.calls += 1
        if ModelNew.calls == 1:   # the first call (in load) starts the pools, as a parallel compile does:
            AsyncCompile.pool().submit(lambda: 1).result()   # the C++ compile's threads
            AsyncCompile.wait_pool_ready(timeout=100)        # CUDA's: Triton's sidecar process, a reader thread
            with open("during.json", "w") as f:
                json.dump({"threads": [t.name for t in threading.enumerate()], "children": _children()}, f)
        else:                     # a later call: what exists now, after load ended the pools
            with open("threads.json", "w") as f:
                json.dump({"threads": [t.name for t in threading.enumerate()], "children": _children(),
                           "compile_threads": config.compile_threads,
                           "pool_cached": AsyncCompile.pool.cache_info().currsize}, f)
        return torch.relu(x)
'''


def test_a_measuring_child_has_no_compile_pool_after_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real (confined, where bwrap works) child with two compile threads: the pools its first call
    started (the C++ compile's threads; the Triton sidecar process and its reader thread that CUDA uses)
    are gone before the next command, and later compiles are set to run in process."""
    monkeypatch.setenv(ENV, "2")
    relu = load_task("relu")
    worker = Worker("candidate", worker_config("cpu", P), tmp_path, 120.0).start()
    try:
        path = tmp_path / "atb_candidate_pool.py"
        path.write_text(POOL_CANDIDATE)
        load = worker.request({"op": "load", "task_path": str(relu.path), "task_module": "atb_task_relu_pool",
                               "init_seed": 3, "candidate_path": str(path), "candidate_module": "atb_candidate_pool"})
        assert load.ok is True, load
        call = worker.request({"op": "call", "seed": 5, "distribution": "task",
                               "class_inputs": P.correctness.class_inputs})
        assert call.ok is True, call
        assert worker.scratch is not None
        during = json.loads((worker.scratch / "during.json").read_text())
        seen = json.loads((worker.scratch / "threads.json").read_text())
    finally:
        worker.close()
    assert "InductorSubproc" in during["threads"] and during["children"], during   # the pools did start
    assert not any(t.startswith(("ThreadPoolExecutor", "InductorSubproc", "subproc_worker_timer"))
                   for t in seen["threads"]), seen
    assert seen["children"] == [], seen
    assert seen["compile_threads"] == 1 and seen["pool_cached"] == 0, seen


# --------------------------------------------------------------------- who gets the cache
def test_only_the_exact_rendering_of_a_compiled_point_has_a_key(tmp_path: Path) -> None:
    cache = RenderedPointCache(tmp_path, "cpu", "dev")
    assert point_of_rendering(TASK, COMPILED) is not None
    key = cache.key_for(TASK, COMPILED)
    assert key is not None and key == cache.key_for(TASK, COMPILED)
    assert cache.key_for(TASK, COMPILED + "\n") is None                                 # one byte more
    assert cache.key_for(TASK, COMPILED.replace("relu", "relu ", 1)) is None           # the task part changed
    assert cache.key_for(TASK, COMPILED.replace("class ModelNew", "import os\nclass ModelNew")) is None
    assert cache.key_for(TASK, render_point(TASK, {})) is None                           # nothing compiled
    assert cache.key_for(TASK, TASK.start_source()) is None
    assert cache.key_for(TASK, "_ATB_POINT = {'compile': 'default'}\n") is None
    other = render_point(TASK, {"compile": "max-autotune"})
    assert cache.key_for(TASK, other) == key                                              # one entry per problem
    by_text = RenderedPointCache(tmp_path, "cpu", "dev", key_by="rendering")              # the benchmarks' old key
    assert by_text.key_for(TASK, other) not in (None, by_text.key_for(TASK, COMPILED))
    assert RenderedPointCache(tmp_path, "cuda", "dev").key_for(TASK, COMPILED) != key   # the backend is in the key


def _worker(tmp: Path, confinement: str = "bwrap:userns+pidns") -> SimpleNamespace:
    scratch = tmp / "atb-child-candidate-x"
    scratch.mkdir(parents=True, exist_ok=True)
    return SimpleNamespace(scratch=scratch, confinement=confinement, workdir=tmp / "session")


def _plant(root: Path, key: str) -> None:
    entry = root / key / "inductor" / "fxgraph"
    entry.mkdir(parents=True)
    (entry / "entry.py").write_text("# compiled by a harness rendering\n")


def test_an_agent_candidate_never_gets_the_cache(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    key = RenderedPointCache(root, "cpu", "dev").key_for(TASK, COMPILED)
    assert key is not None
    _plant(root, key)
    # the agent submits its own file (here: the rendering with one line added)
    agent = COMPILED + "\nimport os\n"
    worker = _worker(tmp_path)
    with lend(TASK, agent, worker, "cpu", "dev", root=root) as use:
        assert not (worker.scratch / CHILD_DIR).exists()   # nothing seeded
        # whatever it compiles (or plants) in its own cache folder ...
        planted = worker.scratch / CHILD_DIR / "inductor" / "fxgraph"
        planted.mkdir(parents=True)
        (planted / "evil.py").write_text("import os\n")
    # ... never reaches the shared folder
    assert use.key == "" and use.seeded_files == 0 and use.kept_files == 0
    assert "not an exact rendering" in use.why_not
    assert sorted(p.name for p in root.iterdir()) == [key]
    assert not list(root.rglob("evil.py"))


def test_a_rendering_is_seeded_and_its_compile_is_kept(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    first = _worker(tmp_path / "a")
    with lend(TASK, COMPILED, first, "cpu", "dev", root=root) as use:
        assert use.seeded_files == 0   # a miss
        out = first.scratch / CHILD_DIR / "inductor" / "xy"
        out.mkdir(parents=True)
        (out / "kernel.so").write_bytes(b"\x7fELF")
        (out / "link").symlink_to("/etc/passwd")   # never followed, never copied
    assert use.kept_files == 1
    second = _worker(tmp_path / "b")
    with lend(TASK, COMPILED, second, "cpu", "dev", root=root) as use2:
        assert use2.seeded_files == 1
        assert (second.scratch / CHILD_DIR / "inductor" / "xy" / "kernel.so").read_bytes() == b"\x7fELF"
        assert not (second.scratch / CHILD_DIR / "inductor" / "xy" / "link").exists()
        (second.scratch / CHILD_DIR / "inductor" / "xy" / "extra.py").write_text("x = 1\n")
    # the entry grows by what the later evaluation added; what it held already stays
    assert use2.kept_files == 1 and use2.already_files == 1
    assert (root / use2.key / "inductor" / "xy" / "extra.py").read_text() == "x = 1\n"


def test_an_unconfined_worker_gets_no_cache(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    key = RenderedPointCache(root, "cpu", "dev").key_for(TASK, COMPILED)
    assert key is not None
    _plant(root, key)
    worker = _worker(tmp_path, confinement="unconfined:bwrap not found")
    with lend(TASK, COMPILED, worker, "cpu", "dev", root=root) as use:
        assert not (worker.scratch / CHILD_DIR).exists()
    assert use.key == "" and "not confined" in use.why_not


def test_the_cache_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compile_cache.ENV, "off")
    assert compile_cache.default_root() is None
    worker = _worker(tmp_path)
    with lend(TASK, COMPILED, worker, "cpu", "dev") as use:
        pass
    assert use.key == "" and "off" in use.why_not
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "c"))
    assert compile_cache.default_root() == tmp_path / "c"


def test_a_root_that_children_can_see_is_refused(tmp_path: Path) -> None:
    assert bound_by_confinement(ROOT / "harness" / "cache")                      # the project's packages
    assert bound_by_confinement(Path(sys.prefix) / "cache")                      # the interpreter's folders
    assert bound_by_confinement(tmp_path / "session" / "cache", also=(tmp_path / "session",))   # a work dir
    assert bound_by_confinement(tmp_path / "cache") == ""
    root = tmp_path / "session" / "cache"
    key = RenderedPointCache(root, "cpu", "dev").key_for(TASK, COMPILED)
    assert key is not None
    _plant(root, key)
    worker = _worker(tmp_path)   # its workdir is tmp_path / "session"
    with lend(TASK, COMPILED, worker, "cpu", "dev", root=root) as use:
        assert not (worker.scratch / CHILD_DIR).exists()
    assert use.key == "" and "measuring children see" in use.why_not


def test_a_confined_child_binds_nothing_of_the_default_root(tmp_path: Path) -> None:
    """The default root is not among (nor under) the paths a measuring child's confinement binds."""
    root = compile_cache.default_root() or Path.home() / ".cache" / "autotunebench" / "compile-cache"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (tmp_path / "work").mkdir()
    plan = _confine.plan("cpu", tmp_path / "work", scratch)
    try:
        if not plan.confined:
            pytest.skip(f"no confinement here: {plan.descriptor}")
        argv = plan.prefix
        sources = [argv[i + 1] for i, a in enumerate(argv) if a in ("--bind", "--ro-bind", "--dev-bind")]
        real = Path(os.path.realpath(root))
        assert not [s for s in sources if real.is_relative_to(Path(os.path.realpath(s)))], sources
    finally:
        plan.close()
