"""A shape environment's state, in comparable form.

The fields are those ``ShapeEnv.check_equal`` compares (guards and deferred runtime
asserts by expression), plus the ones it leaves out that a call can still change and
that decide later behaviour (``symbol_guard_counter``, ``pending_fresh_unbacked_symbols``);
left out are its statistics (``counter``), its logger, its fake-tensor cache (exact: its
entries change no result), and debugging records (source locations, stacks).
"""

from __future__ import annotations

import operator
from contextlib import contextmanager
from typing import Any, Dict, Iterable, Iterator, Set

__all__ = ["grown_by_other_unbacked", "shape_env_changes", "shape_env_state",
           "state_difference"]

_NOT_STATE = frozenset((
    "counter", "log", "specialization_stacks", "_equality_graph", "_unbacked_replacements",
    "fake_tensor_cache", "var_to_stack", "var_to_range_sloc", "replacements_slocs",
    "_prev_cache_key", "_version_counter", "_replacements_version_counter",
    "_expr_sym_node_id"))


_CONTAINERS = (list, tuple, set, frozenset, dict)
_EXPR = operator.attrgetter("expr")


def _inner(value: Any) -> Any:
    kind = type(value)
    if issubclass(kind, (list, tuple)):
        return tuple(value)
    if issubclass(kind, (set, frozenset)):
        return frozenset(value)
    if issubclass(kind, dict):
        return tuple(value.items())
    return value


def _flat(items: Iterable[Any]) -> bool:
    """Whether :func:`_inner` would return every item as it is (no container among
    them), judged per distinct type: a C-speed pass, where converting is a Python call
    per item. The state grows with the layers and is read at every call."""
    return not any(issubclass(kind, _CONTAINERS) for kind in set(map(type, items)))


def _field(name: str, value: Any) -> Any:
    if name == "guards":
        return tuple(map(_EXPR, value))
    if name == "deferred_runtime_asserts":
        return {symbol: tuple(map(_EXPR, ras)) for symbol, ras in value.items()}
    if name == "name_to_node":
        return frozenset(value)
    if isinstance(value, dict):
        if _flat(value.values()):
            return dict(value)  # what the conversion below gives when nothing converts
        return {key: _inner(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        if _flat(value):
            return tuple(value)
        return tuple(_inner(item) for item in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(value)
    return value


def shape_env_state(env: Any) -> Dict[str, Any]:
    """Every state field of ``env``, copied so that later changes do not reach it."""
    return {name: _field(name, value) for name, value in vars(env).items()
            if name not in _NOT_STATE}


def state_difference(before: Dict[str, Any], after: Dict[str, Any]) -> Set[str]:
    """The fields that differ."""
    names = set(before) | set(after)
    return {name for name in names if before.get(name, _MISSING) != after.get(name, _MISSING)}


_MISSING = object()

# Fields that creating an unbacked symbol (``item()``, a data-dependent size) adds an
# entry to, keyed by the new symbol: its range, its size-likeness, its replacement by an
# equal older one (and the renaming recorded for it), and the counter of such symbols.
_GROWN_BY_NEW_UNBACKED = frozenset((
    "var_to_range", "size_like", "replacements", "unbacked_renamings",
    "unbacked_symint_counter"))


def grown_by_other_unbacked(before: Dict[str, Any], after: Dict[str, Any],
                            used: Set[Any]) -> bool:
    """Whether ``after`` is ``before`` plus only unbacked symbols that are not in
    ``used``: every field equal but those that creating such a symbol grows, each of
    them holding all it held, as it held it, and new entries only for unbacked symbols
    created since (a range in ``after``, none in ``before``) and outside ``used``.

    A computation whose inputs' sizes mention only ``used`` reads, of the shape
    environment, the ranges, replacements, size-likeness, guards and runtime asserts of
    ``used`` (and of the older symbols those are replaced by, whose entries are
    unchanged): all of it as in ``before``. So it takes the same path and gives the same
    results in both."""
    from torch.utils._sympy.symbol import SymT, symbol_is_type

    ranges_before, ranges_after = before.get("var_to_range"), after.get("var_to_range")
    if not isinstance(ranges_before, dict) or not isinstance(ranges_after, dict):
        return False
    created = ranges_after.keys() - ranges_before.keys()  # each symbol gets a range
    # the symbols a grown field may have new entries for
    new = {symbol for symbol in created - used if symbol_is_type(symbol, SymT.UNBACKED_INT)}

    for name in set(before) | set(after):
        old, now = before.get(name, _MISSING), after.get(name, _MISSING)
        if old == now:
            continue
        if name not in _GROWN_BY_NEW_UNBACKED or old is _MISSING or now is _MISSING:
            return False
        if isinstance(old, int) and isinstance(now, int):
            if now < old:
                return False
        elif isinstance(old, dict) and isinstance(now, dict):
            if not old.items() <= now.items():  # every old entry kept, unchanged
                return False
            if not now.keys() - old.keys() <= new:
                return False
        elif isinstance(old, frozenset) and isinstance(now, frozenset):
            if not old <= now or not now - old <= new:
                return False
        else:
            return False
    return True


@contextmanager
def shape_env_changes(env: Any) -> Iterator[Set[str]]:
    """Yields a set that, when the block ends, holds the fields the block changed."""
    changed: Set[str] = set()
    before = shape_env_state(env)
    yield changed
    changed.update(state_difference(before, shape_env_state(env)))
