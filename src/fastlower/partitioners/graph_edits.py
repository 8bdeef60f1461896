"""Which nodes of a cached graph were edited, and whether the edits were undone.

Indexes built from an fx graph inside ``accelerated()`` (:mod:`.source_partitions`) are
valid only while the graph is unchanged.  Every edit torch.fx can make goes through a
few ``Node`` entry points; while a graph has an index in the calling context's scope,
those entry points record, for each node the edit touches, its state *before* the first
edit since the index was last checked (:func:`node_state`: position in the node list,
``op``, positional input nodes, users, and the metadata ``get_source_partitions``
reads).  Checking an index is then O(nodes touched): it is still valid iff every touched
node is back in its recorded state (XNNPACK's GEMM configs, for one, rewire a node's
``args`` and ``users`` and restore them between two lookups).

Entry points (``torch.fx.Node``): ``__setattr__`` (any attribute, so ``args``,
``kwargs``, ``users``, ``meta``, ``op``...), ``_update_args_kwargs`` (argument changes,
erasure, node creation), ``_replace_input_with`` (``replace_input_with``,
``replace_all_uses_with``), ``insert_arg``, ``_prepend`` (insertion, moves) and
``_remove_from_list`` (erasure).  Writes into an existing node's ``meta`` dict in place
(``node.meta["source_fn_stack"] = ...``) are seen by the cache's metadata watch instead
(:mod:`.source_partitions`).  Not seen: writes into a node's ``users`` dict in place.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Dict, Optional

import torch
from torch.fx.node import Node, map_arg

from .registry import Patch, register
from .switch import _SCOPE

_NODE_BASE = torch._C._NodeBase


class GraphCache:
    """The indexes of one graph in one scope, the nodes edited since they were checked and
    a watch over the nodes' ``meta`` dicts (in-place writes, which no hook sees)."""

    __slots__ = ("touched", "results", "watch")

    def __init__(self) -> None:
        self.touched: Dict[Node, Any] = {}   # node -> node_state() before its first edit
        self.results: Dict[Any, Any] = {}    # index key -> index
        self.watch: Any = None               # MetaWatch made with the first index kept

    def unchanged(self) -> bool:
        """True iff every node edited since the last check is back in its recorded state
        (then the record is cleared) and no watched ``meta`` may have changed; False drops
        every index of the graph."""
        same = all(_same(before, node_state(node)) for node, before in self.touched.items())
        self.touched.clear()
        if same and self.results and not self.watch.unchanged():
            same = False
        if not same:
            self.results.clear()
            self.watch = None
        return same


def node_state(node: Node) -> Any:
    """What ``get_source_partitions`` reads of ``node`` (identities, so an equal copy of a
    metadata value counts as an edit), plus its users as a set (their order does not
    change any source partition)."""
    try:
        meta = node.meta
        stack = meta.get("source_fn_stack")
        module_stack = meta.get("nn_module_stack")
        identity = (node._erased, node._prev, node._next, node.op, meta, stack,
                    stack[-1] if stack else None, len(stack) if stack is not None else -1,
                    meta.get("torch_fn"), module_stack,
                    list(module_stack.values())[-1] if module_stack else None,
                    *[a for a in node._args if isinstance(a, Node)])
        return identity, frozenset(node.users)
    except Exception:  # a node in an odd state (being unpickled...): never equal to anything
        return object()


def _same(before: Any, now: Any) -> bool:
    if type(before) is not tuple or type(now) is not tuple:
        return False
    (ident0, users0), (ident1, users1) = before, now
    return (len(ident0) == len(ident1) and all(map(operator.is_, ident0, ident1))
            and users0 == users1)


def _cache_of(node: Any) -> Optional[GraphCache]:
    scope = _SCOPE.get()
    if scope is None or not scope.graphs:
        return None
    return scope.graphs.get(getattr(node, "graph", None))


def _touch(cache: GraphCache, node: Any) -> Any:
    if isinstance(node, Node) and node not in cache.touched:
        cache.touched[node] = node_state(node)
    return node


def _touch_neighbours(cache: GraphCache, node: Node) -> None:
    _touch(cache, node)
    _touch(cache, getattr(node, "_prev", None))
    _touch(cache, getattr(node, "_next", None))


def _hook_setattr(original: Callable) -> Callable:
    def __setattr__(self, name: str, value: Any) -> None:
        cache = _cache_of(self)
        if cache is not None:
            _touch(cache, self)
        original(self, name, value)

    __setattr__.__wrapped__ = original  # type: ignore[attr-defined]
    return __setattr__


def _hook_update_args_kwargs(_original: Any) -> Callable:
    base = _NODE_BASE._update_args_kwargs

    def _update_args_kwargs(self, new_args, new_kwargs):
        cache = _cache_of(self)
        if cache is not None:
            _touch(cache, self)
            for node in self._input_nodes:
                _touch(cache, node)
            map_arg((new_args, new_kwargs), lambda node: _touch(cache, node))
        return base(self, new_args, new_kwargs)

    return _update_args_kwargs


def _hook_replace_input_with(_original: Any) -> Callable:
    base = _NODE_BASE._replace_input_with

    def _replace_input_with(self, old_input, new_input):
        cache = _cache_of(self)
        if cache is not None:
            _touch(cache, self)
            _touch(cache, old_input)
            _touch(cache, new_input)
        return base(self, old_input, new_input)

    return _replace_input_with


def _hook_prepend(_original: Any) -> Callable:
    base = _NODE_BASE._prepend

    def _prepend(self, x):
        cache = _cache_of(self)
        if cache is not None:
            _touch_neighbours(cache, self)
            _touch_neighbours(cache, x)
        return base(self, x)

    return _prepend


def _hook_remove_from_list(_original: Any) -> Callable:
    base = _NODE_BASE._remove_from_list

    def _remove_from_list(self):
        cache = _cache_of(self)
        if cache is not None:
            _touch_neighbours(cache, self)
        return base(self)

    return _remove_from_list


def _hook_insert_arg(original: Callable) -> Callable:
    def insert_arg(self, idx, arg):
        cache = _cache_of(self)
        if cache is not None:
            _touch(cache, self)
            map_arg(arg, lambda node: _touch(cache, node))
        return original(self, idx, arg)

    insert_arg.__doc__ = original.__doc__
    insert_arg.__wrapped__ = original  # type: ignore[attr-defined]
    return insert_arg


_PURPOSE = "records edits of graphs indexed inside accelerated() (no-op for other graphs)"
for _name, _make in (("__setattr__", _hook_setattr),
                     ("_update_args_kwargs", _hook_update_args_kwargs),
                     ("_replace_input_with", _hook_replace_input_with),
                     ("insert_arg", _hook_insert_arg),
                     ("_prepend", _hook_prepend),
                     ("_remove_from_list", _hook_remove_from_list)):
    register(Patch("torch.fx.node", "Node", _name, _make, _PURPOSE))
