"""Finding and loading tasks: native names, or paths to KernelBench-format files.

Task files are parsed (``ast``) in the harness's own process and executed only in the measuring
children, so loading a task for its metadata runs none of its code.
"""

from __future__ import annotations

import ast
from pathlib import Path

from pydantic import ValidationError

from harness.errors import TaskError
from harness.records import sha256_text
from harness.tasks._model import Task, TaskMeta

NATIVE_DIR = Path(__file__).resolve().parent / "native"
_REQUIRED = ("Model", "get_inputs", "get_init_inputs")


def native_task_names() -> list[str]:
    """Names of the native suite, sorted."""
    return sorted(p.stem for p in NATIVE_DIR.glob("*.py") if not p.name.startswith("_"))


def _read_meta(tree: ast.Module, path: Path) -> TaskMeta:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ATB_META" for t in node.targets):
            try:
                raw = ast.literal_eval(node.value)
            except ValueError as exc:
                raise TaskError(f"{path}: ATB_META must be a literal dict ({exc})") from exc
            try:
                return TaskMeta.model_validate(raw)
            except ValidationError as exc:
                raise TaskError(f"{path}: ATB_META is malformed: {exc}") from exc
    return TaskMeta()


def _defined_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def load_task_file(path: Path, task_id: str | None = None) -> Task:
    """Load a task from a KernelBench-format file.

    Raises:
        TaskError: the file is missing, not Python, or lacks Model / get_inputs / get_init_inputs.
    """
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"no task file at {path}; give a native task name (see `atb tasks`) or a path")
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise TaskError(f"task file {path} does not parse: {exc}") from exc
    missing = [n for n in _REQUIRED if n not in _defined_names(tree)]
    if missing:
        raise TaskError(f"task file {path} lacks {', '.join(missing)} (KernelBench format: class Model, "
                        "get_inputs(), get_init_inputs())")
    digest = sha256_text(source)
    native = path.resolve().parent == NATIVE_DIR
    tid = task_id or (path.stem if native else f"kb:{path.stem}:{digest[:12]}")
    return Task(id=tid, kind="native" if native else "kernelbench", path=path.resolve(), source=source,
                source_sha256=digest, meta=_read_meta(tree, path))


def load_task(name_or_path: str | Path) -> Task:
    """A native task by name, or a KernelBench-format file by path.

    Raises:
        TaskError: no native task of that name and no such file, or the file is malformed.
    """
    text = str(name_or_path)
    if isinstance(name_or_path, str) and text in native_task_names():
        return load_task_file(NATIVE_DIR / f"{text}.py")
    path = Path(text)
    if path.suffix == ".py" or path.exists():
        return load_task_file(path)
    raise TaskError(f"unknown task {text!r}: native tasks are {', '.join(native_task_names())}; "
                    "or give the path of a KernelBench-format .py file")


def native_tasks() -> list[Task]:
    return [load_task(n) for n in native_task_names()]
