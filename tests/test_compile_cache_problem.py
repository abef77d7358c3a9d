"""Issue 26, campaign speed: the compile cache of harness renderings has one entry per *problem*.

The points of one problem share its model code, so every exact rendering of a compiled point of the
same task reads and extends one entry (Inductor's own keys decide what is reused inside it); any other
text still gets no key, so an agent's candidate can neither read an entry nor add to it. ``keep``
merges a child's cache into the entry file by file: a new file is added, a file the entry holds
already stays as it is.

No test reads a time; they check keys and which files cross between evaluations (real files, the real
cache; only the measuring worker is a stand-in, as in tests/test_compile_cost.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.measure.compile_cache import CHILD_DIR, KEY_ENV, RenderedPointCache, lend
from harness.tasks import load_task
from harness.tasks._module_space import point_of_rendering, render_point

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests/fixtures/module_space"
CONV = load_task(str(FIX / "tiny_conv_relu.py"))
SHIFT = load_task(str(FIX / "tiny_scale_shift.py"))
# different compiled points of one problem: another mode, Inductor options, inference mode, layout
POINTS = [{"compile": "default"}, {"compile": "max-autotune"},
          {"compile": "max-autotune", "epilogue_fusion": False, "inference_mode": True},
          {"compile": "default", "channels_last": True}]


def _worker(tmp: Path) -> SimpleNamespace:
    scratch = tmp / "atb-child-candidate-x"
    scratch.mkdir(parents=True, exist_ok=True)
    return SimpleNamespace(scratch=scratch, confinement="bwrap:userns+pidns", workdir=tmp / "session")


def _write(folder: Path, rel: str, data: bytes) -> None:
    (folder / rel).parent.mkdir(parents=True, exist_ok=True)
    (folder / rel).write_bytes(data)


def test_different_compiled_points_of_one_problem_share_one_key(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)   # the default: per problem
    cache = RenderedPointCache(tmp_path, "cpu", "dev")
    texts = [render_point(CONV, p) for p in POINTS]
    assert len(set(texts)) == len(POINTS) and all(point_of_rendering(CONV, t) is not None for t in texts)
    keys = {cache.key_for(CONV, t) for t in texts}
    assert len(keys) == 1 and None not in keys
    # the benchmark-only per-rendering key still tells them apart
    old = RenderedPointCache(tmp_path, "cpu", "dev", key_by="rendering")
    assert len({old.key_for(CONV, t) for t in texts}) == len(POINTS)


def test_another_problem_has_another_key(tmp_path: Path) -> None:
    cache = RenderedPointCache(tmp_path, "cpu", "dev", key_by="problem")
    conv = {cache.key_for(CONV, render_point(CONV, p)) for p in POINTS}
    shift = {cache.key_for(SHIFT, render_point(SHIFT, p)) for p in ({"compile": "default"}, {"compile": "max-autotune"})}
    assert len(conv) == 1 and len(shift) == 1 and None not in conv | shift
    assert conv != shift
    # the key follows the problem's text, not its file name: a one-line change is another problem,
    # the same text under another name is the same problem
    changed = tmp_path / "tiny_conv_relu.py"
    changed.write_text(CONV.source.replace("size = 12", "size = 13"))
    renamed = tmp_path / "renamed_conv.py"
    shutil.copyfile(CONV.path, renamed)
    other, same = load_task(str(changed)), load_task(str(renamed))
    assert cache.key_for(other, render_point(other, {"compile": "default"})) not in conv | {None}
    assert cache.key_for(same, render_point(same, {"compile": "max-autotune"})) in conv
    # the backend and the device are still in the key
    assert RenderedPointCache(tmp_path, "cuda", "dev", key_by="problem").key_for(
        CONV, render_point(CONV, POINTS[0])) not in conv


def test_an_agent_candidate_gets_no_key_while_another_point_of_the_problem_is_seeded(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    first, second = render_point(CONV, POINTS[0]), render_point(CONV, POINTS[2])
    a = _worker(tmp_path / "a")   # point 0 compiles and its files are kept
    with lend(CONV, first, a, "cpu", "dev", root=root) as use:
        _write(a.scratch / CHILD_DIR, "inductor/cc/kernel.so", b"\x7fELF point 0")
    assert use.key and use.kept_files == 1
    # an agent's candidate: point 2's rendering with one line added, and any other text
    cache = RenderedPointCache(root, "cpu", "dev", key_by="problem")
    for agent in (second + "\nimport os\n", second.replace("class ModelNew", "import os\nclass ModelNew"),
                  "_ATB_POINT = " + repr(point_of_rendering(CONV, second)) + "\n"):
        assert cache.key_for(CONV, agent) is None
    evil = _worker(tmp_path / "evil")
    with lend(CONV, second + "\nimport os\n", evil, "cpu", "dev", root=root) as bad:
        assert not (evil.scratch / CHILD_DIR).exists()   # nothing of point 0 is lent to it
        _write(evil.scratch / CHILD_DIR, "inductor/cc/evil.py", b"import os\n")
    assert bad.key == "" and bad.seeded_files == 0 and bad.kept_files == 0 and "not an exact rendering" in bad.why_not
    assert not list(root.rglob("evil.py"))
    # the harness's own rendering of point 2 is seeded with what point 0 compiled
    b = _worker(tmp_path / "b")
    with lend(CONV, second, b, "cpu", "dev", root=root) as hit:
        assert (b.scratch / CHILD_DIR / "inductor/cc/kernel.so").read_bytes() == b"\x7fELF point 0"
    assert hit.key == use.key and hit.seeded_files == 1


def test_keep_merges_a_childs_new_files_and_leaves_existing_ones(tmp_path: Path) -> None:
    cache = RenderedPointCache(tmp_path / "cache", "cpu", "dev", key_by="problem")
    key = cache.key_for(CONV, render_point(CONV, POINTS[0]))
    assert key is not None
    one = tmp_path / "one" / CHILD_DIR
    _write(one, "inductor/fxgraph/aa/entry", b"graph of point 0")
    _write(one, "inductor/cc/kernel.so", b"first kernel")
    assert cache.keep(key, one) == 2
    two = tmp_path / "two" / CHILD_DIR   # a later point: seeded with the entry, then compiles more
    assert cache.seed(key, two) == 2
    (two / "inductor/cc/kernel.so").write_bytes(b"rewritten by the child")   # an existing file: not taken
    _write(two, "inductor/fxgraph/bb/entry", b"graph of point 1")               # a new file: added
    (two / "inductor/cc/link.so").symlink_to(two / "inductor/cc/kernel.so")     # a symlink: never copied
    assert cache.merge(key, two) == (1, 2)
    entry = cache.entry(key)
    assert (entry / "inductor/cc/kernel.so").read_bytes() == b"first kernel"
    assert (entry / "inductor/fxgraph/aa/entry").read_bytes() == b"graph of point 0"
    assert (entry / "inductor/fxgraph/bb/entry").read_bytes() == b"graph of point 1"
    assert not (entry / "inductor/cc/link.so").exists()
    assert not [p for p in cache.root.iterdir() if p.name.startswith(".tmp-")]   # no staging left behind
    assert cache.keep(key, two) == 0   # nothing new the second time


def test_a_full_entry_stops_growing(tmp_path: Path) -> None:
    cache = RenderedPointCache(tmp_path / "cache", "cpu", "dev", max_entry_bytes=10, key_by="problem")
    key = cache.key_for(CONV, render_point(CONV, POINTS[0]))
    assert key is not None
    one = tmp_path / "one" / CHILD_DIR
    _write(one, "a", b"123456")
    assert cache.keep(key, one) == 1
    two = tmp_path / "two" / CHILD_DIR
    _write(two, "b", b"789")          # fits: 9 bytes
    _write(two, "c", b"abcdef")       # would make 15: not added, and nothing after it
    assert cache.keep(key, two) == 1
    assert sorted(p.name for p in cache.entry(key).iterdir()) == ["a", "b"]


def test_the_key_mode_comes_from_the_environment_and_a_typo_is_refused(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    texts = [render_point(CONV, p) for p in POINTS[:2]]
    monkeypatch.setenv(KEY_ENV, "rendering")
    by_text = RenderedPointCache(tmp_path, "cpu", "dev")
    assert by_text.key_by == "rendering" and by_text.key_for(CONV, texts[0]) != by_text.key_for(CONV, texts[1])
    monkeypatch.setenv(KEY_ENV, "problem")
    by_problem = RenderedPointCache(tmp_path, "cpu", "dev")
    assert by_problem.key_for(CONV, texts[0]) == by_problem.key_for(CONV, texts[1])
    monkeypatch.setenv(KEY_ENV, "per-point")
    with pytest.raises(ValueError, match=KEY_ENV):
        RenderedPointCache(tmp_path, "cpu", "dev")
    w = _worker(tmp_path)
    with lend(CONV, texts[0], w, "cpu", "dev", root=tmp_path / "cache") as use:   # the cache is off, and says why
        pass
    assert use.key == "" and KEY_ENV in use.why_not
