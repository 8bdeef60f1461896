"""Make ExecuTorch's own entry points (``to_edge_transform_and_lower``,
``EdgeProgramManager.to_backend``, ``backend_api.to_backend``) use fastlower.

How it works. For each entry point of :data:`ENTRY_POINTS` (ExecuTorch's
``to_backend``, and ``to_edge_transform_and_lower`` / ``EdgeProgramManager.to_executorch``
behind the lowering cache of :mod:`fastlower.cache`) fastlower makes, once, a
*dispatcher*: a function that looks like the reference (``functools.wraps``: same name,
docstring and attributes, ``__wrapped__`` is the reference) and, at each call, runs

* the implementation the calling thread or asyncio task asked for with
  :func:`installed` (a context variable: other threads and tasks do not see it);
* else fastlower's, if :func:`install` asked for it process-wide;
* else the reference.

While anything asks for fastlower (an open :func:`installed` block in any thread, or
:func:`install`), the dispatcher is bound in place of the reference in every module
whose attribute of that name *is* the reference object: the reference's own module
(``executorch.exir.backend.backend_api``, so a module imported later gets the
dispatcher from it) and those that imported it (``executorch.exir.program._program``,
a user's script...). When nothing asks for fastlower any more, every binding is the
reference again. A thread that never asked runs the reference, whatever other threads
do; the dispatcher adds one context-variable read per call.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

log = logging.getLogger(__name__)

Routes = Mapping[str, Callable[..., Any]]


@dataclass(frozen=True)
class EntryPoint:
    """An ExecuTorch function fastlower can stand in for.

    ``name`` is the attribute name (``to_backend``) and the key of the entry in
    :func:`routed`; ``module`` is where the reference is defined; ``implementation``
    is fastlower's, as ``"module:attribute"`` (imported on first use). ``owner``
    names a class of ``module`` when the reference is a method of it
    (``EdgeProgramManager.to_executorch``): then the class is the one binding site.
    """

    module: str
    name: str
    implementation: str
    owner: Optional[str] = None

    def owner_class(self) -> Optional[type]:
        """The class whose attribute the reference is (None for a module function)."""
        if self.owner is None:
            return None
        return getattr(importlib.import_module(self.module), self.owner)  # type: ignore[no-any-return]

    @property
    def reference(self) -> Callable[..., Any]:
        """ExecuTorch's own function (captured when ``fastlower.patch`` is imported)."""
        return _BOUND[self.name].reference

    @property
    def dispatcher(self) -> Callable[..., Any]:
        """The function bound in the reference's place while anything asks for fastlower."""
        return _BOUND[self.name].dispatcher

    def fastlower(self) -> Callable[..., Any]:
        """fastlower's implementation of this entry point."""
        module, _, attribute = self.implementation.partition(":")
        return getattr(importlib.import_module(module), attribute)  # type: ignore[no-any-return]


# The entry points fastlower stands in for. Add one by naming the reference's module
# and attribute and fastlower's implementation; nothing else changes.
ENTRY_POINTS: Tuple[EntryPoint, ...] = (
    EntryPoint("executorch.exir.backend.backend_api", "to_backend", "fastlower.api:to_backend"),
    # the lowering cache (fastlower.cache): a whole call served from its folder, or
    # the reference's own steps (with fastlower's to_backend) when it misses
    EntryPoint("executorch.exir.program._program", "to_edge_transform_and_lower",
               "fastlower.cache:to_edge_transform_and_lower"),
    EntryPoint("executorch.exir.program._program", "to_executorch",
               "fastlower.cache:to_executorch", owner="EdgeProgramManager"),
)


# --- per entry point: the reference, captured once, and its dispatcher -----------------

@dataclass(frozen=True)
class _Bound:
    reference: Callable[..., Any]
    dispatcher: Callable[..., Any]


_BOUND: Dict[str, _Bound] = {}
_LOCK = threading.Lock()  # guards _BOUND, _demand, _process_routes and every (re)binding

# what this thread / task asked for: None = nothing (the process-wide choice applies),
# else entry name -> implementation (an entry missing from it runs the reference)
_ROUTES: ContextVar[Optional[Routes]] = ContextVar("fastlower_patch_routes", default=None)
_process_routes: Routes = {}  # install(): fastlower's implementation of every entry
_demand = 0  # open routed() blocks in every thread and task, plus 1 while install() holds


def _make_dispatcher(name: str, reference: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(reference)
    def dispatcher(*args: Any, **kwargs: Any) -> Any:
        routes = _ROUTES.get()
        if routes is None:
            routes = _process_routes
        return routes.get(name, reference)(*args, **kwargs)

    dispatcher.__fastlower_dispatcher__ = True  # type: ignore[attr-defined]
    return dispatcher


def _bind_entry(entry: EntryPoint) -> None:
    if entry.name in _BOUND:
        raise ValueError(f"two entry points named {entry.name!r}")
    owner = entry.owner_class()
    reference = (getattr(importlib.import_module(entry.module), entry.name) if owner is None
                 else owner.__dict__[entry.name])
    if getattr(reference, "__fastlower_dispatcher__", False):  # fastlower.patch reloaded
        reference = reference.__wrapped__
    if str(getattr(reference, "__module__", "")).split(".")[0] == "fastlower":
        raise RuntimeError(
            f"{entry.module}.{entry.name} is already replaced by {reference!r}; "
            "fastlower.patch needs ExecuTorch's own function there")
    _BOUND[entry.name] = _Bound(reference, _make_dispatcher(entry.name, reference))


# --- binding sites -----------------------------------------------------------------------

def _sites(entry: EntryPoint, value: object) -> List[Any]:
    """Every imported module (fastlower's excepted) whose ``entry.name`` attribute is
    ``value``; for a method, its class when the attribute is ``value``."""
    owner = entry.owner_class()
    if owner is not None:
        return [owner] if owner.__dict__.get(entry.name) is value else []
    found: List[Any] = []
    for module in list(sys.modules.values()):
        if module is None or str(getattr(module, "__name__", "")).startswith("fastlower"):
            continue
        try:
            if module.__dict__.get(entry.name) is value:
                found.append(module)
        except Exception:  # exotic modules without a plain __dict__
            continue
    return found


def _rebind_locked(to_dispatcher: bool) -> None:
    for entry in ENTRY_POINTS:
        bound = _BOUND[entry.name]
        old, new = ((bound.reference, bound.dispatcher) if to_dispatcher
                    else (bound.dispatcher, bound.reference))
        for module in _sites(entry, old):
            try:
                setattr(module, entry.name, new)
            except Exception as exc:  # a module refusing attribute writes keeps its binding
                log.debug("cannot rebind %s.%s: %r", getattr(module, "__name__", module),
                          entry.name, exc)


def _add_demand_locked() -> None:
    global _demand
    if _demand == 0:
        _rebind_locked(to_dispatcher=True)
    _demand += 1


def _drop_demand_locked() -> None:
    global _demand
    _demand -= 1
    if _demand == 0:
        _rebind_locked(to_dispatcher=False)


def _fastlower_routes() -> Dict[str, Callable[..., Any]]:
    return {entry.name: entry.fastlower() for entry in ENTRY_POINTS}


# --- public API -------------------------------------------------------------------------

@contextmanager
def routed(routes: Routes) -> Iterator[None]:
    """Within the block, this thread's (task's) calls of each entry point named in
    ``routes`` run ``routes[name]``; entry points not named run the reference.

    Other threads and tasks are not affected. Blocks nest; the innermost one holds.
    ``fastlower.report.preview_export`` uses it to stand a partitioner-only
    ``to_backend`` in for the reference's.
    """
    unknown = set(routes) - {entry.name for entry in ENTRY_POINTS}
    if unknown:
        raise KeyError(f"fastlower.patch has no entry point {sorted(unknown)}")
    with _LOCK:
        _add_demand_locked()
    token = _ROUTES.set(dict(routes))
    try:
        yield
    finally:
        try:
            _ROUTES.reset(token)
        finally:
            with _LOCK:
                _drop_demand_locked()


@contextmanager
def installed() -> Iterator[None]:
    """Within the block, ExecuTorch's entry points called by this thread (or asyncio
    task) run fastlower.

    Other threads and tasks keep what they asked for (the reference, unless
    :func:`install` is in force). Threads started inside the block do not inherit it
    (run them with ``contextvars.copy_context().run``, or use :func:`install`);
    asyncio tasks created inside it do. Blocks nest.
    """
    with routed(_fastlower_routes()):
        yield


@contextmanager
def reference() -> Iterator[None]:
    """Within the block, this thread's (task's) calls run the reference, even under
    :func:`install` or an outer :func:`installed`."""
    with routed({}):
        yield


def install() -> None:
    """Make ExecuTorch's entry points run fastlower in every thread that does not ask
    otherwise, until :func:`uninstall`. Calling it again changes nothing."""
    global _process_routes
    routes = _fastlower_routes()
    with _LOCK:
        if not _process_routes:
            _add_demand_locked()
        _process_routes = routes


def uninstall() -> None:
    """Undo :func:`install`. Once no :func:`installed` block is open either, every
    binding is ExecuTorch's own function again. Calling it again changes nothing."""
    global _process_routes
    with _LOCK:
        if _process_routes:
            _process_routes = {}
            _drop_demand_locked()


def is_installed() -> bool:
    """Whether :func:`install` is in force."""
    return bool(_process_routes)


def implementation(name: str = "to_backend") -> Callable[..., Any]:
    """What a call of entry point ``name`` would run in this thread or task now."""
    entry = _entry(name)
    routes = _ROUTES.get()
    if routes is None:
        routes = _process_routes
    return routes.get(name, entry.reference)


def reference_of(name: str = "to_backend") -> Callable[..., Any]:
    """ExecuTorch's own function behind entry point ``name`` (never a dispatcher)."""
    return _entry(name).reference


def _entry(name: str) -> EntryPoint:
    for entry in ENTRY_POINTS:
        if entry.name == name:
            return entry
    raise KeyError(f"fastlower.patch has no entry point {name!r}")


for _entry_point in ENTRY_POINTS:
    _bind_entry(_entry_point)
del _entry_point
