"""ExecuTorch's entry points, captured once, and their per-thread dispatchers.

The machinery under :mod:`fastlower.patch`, which knows nothing of fastlower's own
implementations (``patch`` names them): so the implementations (``fastlower.cache``)
can ask this module for the reference they stand in for, and route a call
(:func:`routed`), without importing ``patch``. See :mod:`fastlower.patch` for how
dispatch works; every public name here is also reachable there.
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
    :func:`routed`; ``module`` is where the reference is defined. ``owner`` names a
    class of ``module`` when the reference is a method of it
    (``EdgeProgramManager.to_executorch``): then the class is the one binding site.
    fastlower's implementation of each is named in ``fastlower.patch.IMPLEMENTATIONS``.
    """

    module: str
    name: str
    owner: Optional[str] = None
    optional: bool = False  # not ExecuTorch's: skipped where its module or name is missing

    def owner_class(self) -> Optional[type]:
        """The class whose attribute the reference is (None for a module function)."""
        if self.owner is None:
            return None
        return getattr(importlib.import_module(self.module), self.owner)

    @property
    def reference(self) -> Callable[..., Any]:
        """ExecuTorch's own function (captured when ``fastlower.in_process.dispatch`` is
        imported)."""
        return _BOUND[self.name].reference

    @property
    def dispatcher(self) -> Callable[..., Any]:
        """The function bound in the reference's place while anything asks for fastlower."""
        return _BOUND[self.name].dispatcher


# The entry points fastlower stands in for. Add one here (the reference's module and
# attribute) and its implementation in fastlower.patch.IMPLEMENTATIONS.
ENTRY_POINTS: Tuple[EntryPoint, ...] = (
    EntryPoint("executorch.exir.backend.backend_api", "to_backend"),
    # the lowering cache (fastlower.cache): a whole call served from its folder, or
    # the reference's own steps (with fastlower's to_backend) when it misses
    EntryPoint("executorch.exir.program._program", "to_edge_transform_and_lower"),
    EntryPoint("executorch.exir.program._program", "to_executorch", owner="EdgeProgramManager"),
    # the edge stage inside to_edge_transform_and_lower (fastlower.in_process.edge: the retraces
    # that change nothing skipped); routed by fastlower's to_edge_transform_and_lower
    EntryPoint("executorch.exir.program._program", "_gen_edge_manager_for_partitioners"),
    # torchao's HQQ quantization of a weight (export_llm's 8da4w source transform), served
    # from the cache folder for a weight it has quantized before (fastlower.cache.quantized)
    EntryPoint("torchao.quantization.quant_primitives",
               "_choose_qparams_and_quantize_scale_only_hqq", optional=True),
    # torch.export's own steps, called by the pipeline (export_llm exports twice): torch's
    # code inside fastlower's in-process block (fastlower.in_process.torch_export)
    EntryPoint("torch.export", "export"),
    EntryPoint("torch.export.exported_program", "run_decompositions", owner="ExportedProgram"),
    # ExecuTorch's EdgeProgramManager.transform, called by the pipeline between the lowering's
    # steps (export_llm's ConvertToLinearPass): inside fastlower's lowering block
    # (fastlower.in_process.edge_transform)
    EntryPoint("executorch.exir.program._program", "transform", owner="EdgeProgramManager"),
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
_process_routes: Routes = {}  # patch.install(): fastlower's implementation of every entry
_demand = 0  # open routed() blocks in every thread and task, plus 1 while process routes hold


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
    try:
        owner = entry.owner_class()
        reference = (getattr(importlib.import_module(entry.module), entry.name)
                     if owner is None else owner.__dict__[entry.name])
    except (ImportError, AttributeError, KeyError):
        if entry.optional:  # another torchao: nothing to stand in for
            log.debug("entry point %s.%s not found: not routed", entry.module, entry.name)
            return
        raise
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
        bound = _BOUND.get(entry.name)
        if bound is None:  # an optional entry point this process does not have
            continue
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


# --- public API -------------------------------------------------------------------------

@contextmanager
def routed(routes: Routes) -> Iterator[None]:
    """Within the block, this thread's (task's) calls of each entry point named in
    ``routes`` run ``routes[name]``; entry points not named run the reference.

    Other threads and tasks are not affected. Blocks nest; the innermost one holds.
    ``fastlower.frontends.preview.preview_export`` uses it to stand a partitioner-only
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
def reference() -> Iterator[None]:
    """Within the block, this thread's (task's) calls run the reference, even under
    ``patch.install()`` or an outer ``patch.installed()``."""
    with routed({}):
        yield


def set_process_routes(routes: Routes) -> None:
    """What every thread that does not ask otherwise runs (``patch.install``: fastlower's
    implementations; ``{}``: the reference again, once no ``routed`` block is open)."""
    global _process_routes
    with _LOCK:
        had = bool(_process_routes)
        if routes and not had:
            _add_demand_locked()
        _process_routes = dict(routes)
        if had and not routes:
            _drop_demand_locked()


def is_installed() -> bool:
    """Whether ``patch.install()`` is in force."""
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
