"""A static scan of a candidate's source: what it imports, calls, references and overwrites.

Why a static scan at all when the worker observes the candidate at run time: the two layers fail
differently. Run-time facts (integrity checks, audit events, ops seen) cannot be fooled by spelling,
but only see what the candidate did on the inputs it was given; the scan sees every branch, including
one that only fires when the candidate believes it is being timed. A gate fails on either layer.

The scan resolves import aliases (``import torch.nn.functional as F``, ``from time import
perf_counter``) and constant ``getattr``/``setattr`` names, so ``F.relu`` is ``torch.nn.functional.relu``
and ``setattr(time, "perf_counter_ns", f)`` is an overwrite of ``time.perf_counter_ns``. It never
executes the candidate. A source that does not parse yields ``parse_error`` and no findings; gates that
rely on the scan fail closed on it.
"""

from __future__ import annotations

import ast
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field


class SourceRef(BaseModel):
    """One occurrence of a resolved dotted name in the candidate source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str            # resolved dotted name, e.g. "torch.nn.functional.relu"; "?.relu" for x.relu
    line: int


class SourceScan(BaseModel):
    """Everything the gates read from a candidate's source text."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    parse_error: str = ""
    imports: list[SourceRef] = Field(default_factory=list)       # module names imported
    calls: list[SourceRef] = Field(default_factory=list)         # callee of every call
    references: list[SourceRef] = Field(default_factory=list)    # every attribute chain / name read
    overwrites: list[SourceRef] = Field(default_factory=list)    # attribute chains assigned, set or deleted
    call_args: list[tuple[str, list[str], int]] = Field(default_factory=list)  # (callee, constant str args, line)
    strings: list[SourceRef] = Field(default_factory=list)       # string constants (name = the text)
    matmul_lines: list[int] = Field(default_factory=list)        # lines using the ``@`` operator

    def where(self, refs: list[SourceRef]) -> str:
        """A short, deduplicated 'name (line N)' list for a gate's detail."""
        seen: dict[str, int] = {}
        for r in refs:
            seen.setdefault(r.name, r.line)
        return ", ".join(f"{n} (line {ln})" for n, ln in list(seen.items())[:8])


class _Scanner(ast.NodeVisitor):
    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        self.imports: list[SourceRef] = []
        self.calls: list[SourceRef] = []
        self.references: list[SourceRef] = []
        self.overwrites: list[SourceRef] = []
        self.call_args: list[tuple[str, list[str], int]] = []
        self.strings: list[SourceRef] = []
        self.matmul_lines: list[int] = []

    # ------------------------------------------------------------------ name resolution
    def resolve(self, node: ast.AST) -> str | None:
        """The dotted name an expression denotes, with import aliases expanded; '?.' for unknown roots."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base if base is not None else '?'}.{node.attr}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                base = self.resolve(node.args[0])
                return f"{base if base is not None else '?'}.{node.args[1].value}"
            return None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                return node.args[0].value.split(".")[0]
            return None
        if isinstance(node, ast.Subscript):
            base = self.resolve(node.value)
            return f"{base}[]" if base is not None else None
        return None

    # ------------------------------------------------------------------ imports
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.imports.append(SourceRef(name=a.name, line=node.lineno))
            if a.asname:
                self.aliases[a.asname] = a.name
            else:
                root = a.name.split(".")[0]
                self.aliases.setdefault(root, root)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = "." * node.level + (node.module or "")
        self.imports.append(SourceRef(name=mod, line=node.lineno))
        for a in node.names:
            full = f"{mod}.{a.name}" if mod else a.name
            self.imports.append(SourceRef(name=full, line=node.lineno))
            self.aliases[a.asname or a.name] = full

    # ------------------------------------------------------------------ reads, calls, writes
    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = self.resolve(node)
        if name is not None:
            self.references.append(SourceRef(name=name, line=node.lineno))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        self.references.append(SourceRef(name=self.aliases.get(node.id, node.id), line=node.lineno))

    def visit_Call(self, node: ast.Call) -> None:
        callee = self.resolve(node.func)
        if callee is not None:
            self.calls.append(SourceRef(name=callee, line=node.lineno))
            consts = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            consts += [k.value.value for k in node.keywords
                       if isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)]
            self.call_args.append((callee, consts, node.lineno))
        resolved = self.resolve(node)
        if resolved is not None and resolved != callee:
            self.references.append(SourceRef(name=resolved, line=node.lineno))
        if isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") and node.args:
            base = self.resolve(node.args[0]) or "?"
            attr = "<dynamic>"
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                attr = node.args[1].value
            self.overwrites.append(SourceRef(name=f"{base}.{attr}", line=node.lineno))
        self.generic_visit(node)

    def _target(self, target: ast.AST, line: int) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._target(t, line)
            return
        if isinstance(target, ast.Starred):
            self._target(target.value, line)
            return
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            name = self.resolve(target)
            if name is not None:
                self.overwrites.append(SourceRef(name=name, line=line))

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._target(t, node.lineno)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target, node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._target(node.target, node.lineno)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._target(t, node.lineno)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult):
            self.matmul_lines.append(node.lineno)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.strings.append(SourceRef(name=node.value, line=getattr(node, "lineno", 0)))


@lru_cache(maxsize=64)
def scan_source(source: str) -> SourceScan:
    """Scan a candidate's source text (cached: every gate of one evaluation shares one scan)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        return SourceScan(parse_error=f"{type(exc).__name__}: {exc}")
    s = _Scanner()
    # Imports first, so aliases resolve for uses that appear above a late import.
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            s.visit_Import(node)
        elif isinstance(node, ast.ImportFrom):
            s.visit_ImportFrom(node)
    imports = list(s.imports)
    s.visit(tree)  # visits the imports again; their second copy in s.imports is dropped
    return SourceScan(
        imports=imports, calls=s.calls, references=s.references, overwrites=s.overwrites,
        call_args=s.call_args, strings=s.strings, matmul_lines=sorted(set(s.matmul_lines)),
    )


def matching(refs: list[SourceRef], prefixes: tuple[str, ...] = (), exact: frozenset[str] = frozenset(),
             suffixes: tuple[str, ...] = ()) -> list[SourceRef]:
    """The refs whose name equals one of ``exact``, starts with a prefix, or ends with a suffix."""
    out = []
    for r in refs:
        n = r.name
        if n in exact or any(n == p or n.startswith(p + ".") or n.startswith(p + "[") for p in prefixes) \
                or any(n.endswith(sfx) for sfx in suffixes):
            out.append(r)
    return out
