"""One registry pattern for every kind of plug-in: gates, tuners, engine adapters, measuring backends.

Modelled on inspect_ai's ``_util/registry.py`` (``@modelapi(name=...)``, ``@sandboxenv(name=...)``): a
plug-in is an object registered under a name by a decorator, found again by that name, and further
plug-ins come from installed packages' entry points. Unlike inspect_ai's one process-wide dict keyed by
``"type:name"``, each kind has its own typed :class:`Registry` instance, owned by the package that uses
it (so ``harness`` never needs to know about the agent side's tuners)::

    ENGINES: Registry[type[EngineAdapter]] = Registry("engine", error=EngineTaskError)

    @ENGINES.register("vllm")
    class VllmAdapter(EngineAdapter): ...

    ENGINES.get("vllm")        # the class; an unknown name raises `error` listing the known names
    ENGINES.names()            # registration order, then installed entry points

Rules every registry keeps:

* a name is taken once: registering it again, or installing an entry point under a name already taken,
  is an error (a plug-in can never replace a built-in);
* an unknown name is an error whose message lists the known names (and the entry-point group, where
  the registry has one); the error class is marked ``user_fixable`` so the CLI prints it in one line
  and exits 2;
* entry points (``importlib.metadata``, group e.g. ``autotunebench.tuners``) are read afresh on each
  lookup that misses the names registered in code, and loaded only when needed: by name, or all of
  them for :meth:`Registry.items`. Nothing is cached here; a caller that wants a fixed set (the gates)
  caches it itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Generic, TypeVar

from harness.errors import HarnessError

if TYPE_CHECKING:  # importlib.metadata is read only when a registry has entry points (it costs ~15 ms)
    from importlib.metadata import EntryPoint

T = TypeVar("T")


class RegistryError(HarnessError):
    """A plug-in name is unknown or taken twice, or an entry point is not a plug-in of its kind.

    The message lists the known names, or says which plug-in to rename or uninstall.
    """


class Registry(Generic[T]):
    """Named plug-ins of one kind, registered in code (:meth:`register`, :meth:`add`) or installed as
    entry points.

    Args:
        kind: what one plug-in is called in messages (``"gate"``, ``"engine"``, ``"tuner"``).
        plural: its plural in messages (default ``kind + "s"``).
        entry_point_group: the ``importlib.metadata`` group read for installed plug-ins (None: closed).
        from_entry_point: turns a loaded entry point's object into a ``T``, raising ``error`` (with what
            the object lacks) when it cannot; required with ``entry_point_group``.
        named_by: for plug-ins that carry their own name (a gate's ``name``): an entry point's plug-in
            is registered under ``named_by(obj)``, not the entry point's name, so every entry point is
            loaded to list the names.
        error: the exception raised for an unknown or clashing name; it must be marked
            ``user_fixable`` (:class:`harness.errors.HarnessError` and its kind, or the agent's errors).
        hint: a sentence appended to the unknown-name message (how a name is written, say).
    """

    def __init__(self, kind: str, *, plural: str | None = None, entry_point_group: str | None = None,
                 from_entry_point: Callable[[EntryPoint, object], T] | None = None,
                 named_by: Callable[[T], str] | None = None, error: type[Exception] = RegistryError,
                 hint: str = "") -> None:
        if getattr(error, "user_fixable", False) is not True:
            raise TypeError(f"the {kind} registry's error {error.__name__} is not marked user_fixable")
        if entry_point_group is not None and from_entry_point is None:
            raise TypeError(f"the {kind} registry reads entry points, so it needs from_entry_point")
        self.kind = kind
        self.plural = plural or f"{kind}s"
        self.entry_point_group = entry_point_group
        self.hint = hint
        self._from_entry_point = from_entry_point
        self._named_by = named_by
        self._error = error
        self._items: dict[str, T] = {}

    # ------------------------------------------------------------------ registering in code

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated object (function, class, instance) under ``name``.

        Raises:
            the registry's error: ``name`` is empty or already taken.
        """

        def wrap(obj: T) -> T:
            self.add(name, obj)
            return obj

        return wrap

    def add(self, name: str, obj: T) -> T:
        """Register ``obj`` under ``name`` and return it.

        Raises:
            the registry's error: ``name`` is empty or already taken.
        """
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            raise self._error(f"a {self.kind} needs a non-empty name without surrounding spaces, not {name!r}")
        if name in self._items:
            raise self._error(f"the {self.kind} name {name!r} is already taken by {_describe(self._items[name])}; "
                              f"register this {self.kind} under another name")
        self._items[name] = obj
        return obj

    # ------------------------------------------------------------------ looking up

    def registered(self, name: str) -> T | None:
        """The plug-in registered in code under ``name``, or None (entry points are not read)."""
        return self._items.get(name)

    def get(self, name: str) -> T:
        """The plug-in named ``name``: registered in code, else an installed entry point (loaded now).

        Raises:
            the registry's error: no plug-in has that name (the message lists the known ones), or an
                entry point clashes, fails to load or is not a plug-in of this kind.
        """
        if name in self._items:
            return self._items[name]
        if self.entry_point_group is not None:
            if self._named_by is None:
                for ep in self.entry_points():
                    if ep.name == name:
                        return self._load(ep)
            else:
                for plugin_name, obj in self._loaded_plugins():
                    if plugin_name == name:
                        return obj
        raise self.unknown(name)

    def require(self, name: str) -> None:
        """Raise the unknown-name error unless ``name`` is known (loads no entry point of a registry
        whose plug-ins are named by their entry point)."""
        if name not in self:
            raise self.unknown(name)

    def names(self) -> list[str]:
        """Every known name: those registered in code in registration order, then installed ones."""
        if self.entry_point_group is None:
            return list(self._items)
        if self._named_by is None:
            return [*self._items, *(ep.name for ep in self.entry_points())]
        return [*self._items, *(name for name, _ in self._loaded_plugins())]

    def items(self) -> list[tuple[str, T]]:
        """(name, plug-in) for every plug-in, in the order of :meth:`names`; loads every entry point."""
        out = list(self._items.items())
        if self.entry_point_group is None:
            return out
        if self._named_by is None:
            return out + [(ep.name, self._load(ep)) for ep in self.entry_points()]
        return out + self._loaded_plugins()

    def values(self) -> list[T]:
        """Every plug-in, in the order of :meth:`names`; loads every entry point."""
        return [obj for _, obj in self.items()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._items or name in self.names())

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def unknown(self, name: str) -> Exception:
        """The error for an unknown ``name``: it lists the known names and how to add one."""
        known = ", ".join(sorted(self.names())) or "none"
        message = f"unknown {self.kind} {name!r}; known {self.plural}: {known}"
        if self.entry_point_group is not None:
            message += f" (more can be installed as entry points in group {self.entry_point_group!r})"
        if self.hint:
            message += f". {self.hint}"
        return self._error(message)

    # ------------------------------------------------------------------ entry points

    def entry_points(self) -> list[EntryPoint]:
        """The installed entry points of this registry's group, read now (none without a group).

        Raises:
            the registry's error: for a registry whose plug-ins are named by their entry point, two
                entry points, or an entry point and a plug-in registered in code, share a name.
        """
        if self.entry_point_group is None:
            return []
        from importlib.metadata import entry_points

        eps = list(entry_points(group=self.entry_point_group))
        if self._named_by is not None:
            return eps                       # named when loaded: clashes are found in _loaded_plugins
        found: dict[str, EntryPoint] = {}
        for ep in eps:
            if ep.name in self._items:
                raise self._clash(ep, ep.name)
            if ep.name in found and found[ep.name].value != ep.value:
                raise self._error(f"two entry points in group {self.entry_point_group!r} are named {ep.name!r} "
                                  f"({found[ep.name].value} and {ep.value}); uninstall or rename one")
            found.setdefault(ep.name, ep)
        return list(found.values())

    def _load(self, ep: EntryPoint) -> T:
        assert self._from_entry_point is not None  # checked in __init__ with entry_point_group
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001 - any import failure of a plug-in is the user's to fix
            raise self._error(f"the {self.kind} entry point {ep.name!r} ({ep.value}) in group "
                              f"{self.entry_point_group!r} does not load: {type(exc).__name__}: {exc}; "
                              "fix or uninstall its package") from exc
        return self._from_entry_point(ep, obj)

    def _loaded_plugins(self) -> list[tuple[str, T]]:
        """Every entry point loaded and named by ``named_by``; a name taken twice is an error."""
        assert self._named_by is not None
        out: list[tuple[str, T]] = []
        taken = set(self._items)
        for ep in self.entry_points():
            obj = self._load(ep)
            name = self._named_by(obj)
            if name in taken:
                raise self._clash(ep, name)
            taken.add(name)
            out.append((name, obj))
        return out

    def _clash(self, ep: EntryPoint, name: str) -> Exception:
        return self._error(f"the {self.kind} plug-in {ep.value!r} (entry point {ep.name!r} in group "
                           f"{self.entry_point_group!r}) reuses the {self.kind} name {name!r}; "
                           "rename it or uninstall its package")

    def __repr__(self) -> str:
        group = f", entry_point_group={self.entry_point_group!r}" if self.entry_point_group else ""
        return f"Registry({self.kind!r}{group}, registered={list(self._items)!r})"


def _describe(obj: object) -> str:
    qualname = getattr(obj, "__qualname__", None)
    if isinstance(qualname, str):
        return f"{getattr(obj, '__module__', '?')}.{qualname}"
    return f"a {type(obj).__name__}"


__all__ = ["Registry", "RegistryError"]
