"""A shape environment's state, in comparable form.

The fields are those ``ShapeEnv.check_equal`` compares (guards and deferred runtime
asserts by expression), plus the ones it leaves out that a call can still change and
that decide later behaviour (``symbol_guard_counter``, ``pending_fresh_unbacked_symbols``);
left out are its statistics (``counter``), its logger, its fake-tensor cache (exact: its
entries change no result), and debugging records (source locations, stacks).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Dict, Iterator, Set

__all__ = ["shape_env_changes", "shape_env_state", "state_difference"]

_NOT_STATE = frozenset((
    "counter", "log", "specialization_stacks", "_equality_graph", "_unbacked_replacements",
    "fake_tensor_cache", "var_to_stack", "var_to_range_sloc", "replacements_slocs",
    "_prev_cache_key", "_version_counter", "_replacements_version_counter",
    "_expr_sym_node_id"))


def _inner(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(value)
    if isinstance(value, (set, frozenset)):
        return frozenset(value)
    if isinstance(value, dict):
        return tuple(value.items())
    return value


def _field(name: str, value: Any) -> Any:
    if name == "guards":
        return tuple(guard.expr for guard in value)
    if name == "deferred_runtime_asserts":
        return {symbol: tuple(ra.expr for ra in ras) for symbol, ras in value.items()}
    if name == "name_to_node":
        return frozenset(value)
    if isinstance(value, dict):
        return {key: _inner(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
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


@contextmanager
def shape_env_changes(env: Any) -> Iterator[Set[str]]:
    """Yields a set that, when the block ends, holds the fields the block changed."""
    changed: Set[str] = set()
    before = shape_env_state(env)
    yield changed
    changed.update(state_difference(before, shape_env_state(env)))
