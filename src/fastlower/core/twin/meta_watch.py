"""Twin of csrc/bind_meta_watch.cpp: whether what torch.fx's ``get_source_partitions``
reads from some nodes' ``meta`` dicts may have changed since the watch was made.

The values it reads (``source_fn_stack[-1]``, ``torch_fn``, the last value of
``nn_module_stack``) are compared by identity, and a ``source_fn_stack`` list by identity
and length, so an in-place write (``meta["torch_fn"] = ...``, ``stack.append(...)``,
``stack[-1] = ...``) is seen.  Those values must be tuples (immutable) and the
containers dicts, lists or tuples: anything else is declined with ``ValueError``
(the C++ core raises ``Unsupported``, a ``ValueError``), and the caller keeps no index.
The C++ watch skips a ``meta`` dict whose version tag (PEP 509) has not changed (on
Python 3.10 and 3.11; later versions deprecate the tag) and checks an ``nn_module_stack``
dict by all its items rather than its last value, so it also reports a write into that
dict that leaves the last value alone; both are sound, the core is the more conservative.
"""

from __future__ import annotations

from operator import is_ as _is
from typing import Any, Iterable, List, Tuple

_NONE = (None, None, -1)


def _stack_state(meta: dict) -> Tuple[Any, Any, int]:
    stack = meta.get("source_fn_stack", None)
    if stack is None:
        return _NONE
    if type(stack) not in (list, tuple):
        raise ValueError("source_fn_stack is not a list or tuple")
    last = stack[-1] if stack else None
    if stack and type(last) is not tuple:
        raise ValueError("source_fn_stack[-1] is not a tuple")
    return stack, last, len(stack)


def _module_state(meta: dict) -> Tuple[Any, Any]:
    modules = meta.get("nn_module_stack", None)
    if modules is None:
        return None, None
    if type(modules) is not dict:
        raise ValueError("nn_module_stack is not a dict")
    values = list(modules.values())
    if any(type(v) is not tuple for v in values):
        raise ValueError("an nn_module_stack value is not a tuple")
    return modules, values[-1] if values else None


def _state(meta: Any) -> Tuple[Any, ...]:
    if type(meta) is not dict:
        raise ValueError("meta is not a dict")
    torch_fn = meta.get("torch_fn", None)
    if torch_fn is not None and type(torch_fn) is not tuple:
        raise ValueError("torch_fn is not a tuple")
    stack, last, length = _stack_state(meta)
    return (stack, last, torch_fn, *_module_state(meta), length)


class MetaWatch:
    """Watch these ``node.meta`` dicts (see the module doc)."""

    def __init__(self, metas: Iterable[Any]) -> None:
        self._metas: List[Any] = list(metas)
        self._states = [_state(meta) for meta in self._metas]

    def unchanged(self) -> bool:
        """False if anything get_source_partitions reads may have changed since."""
        for meta, before in zip(self._metas, self._states):
            try:
                now = _state(meta)
            except ValueError:
                return False
            # the stack's length (last) by value, every other item by identity
            if now[-1] != before[-1] or not all(map(_is, now[:-1], before[:-1])):
                return False
        return True

    def __len__(self) -> int:
        return len(self._metas)
