"""Generic containers that stand in for pytree types this process cannot rebuild.

A lowering does not need the Python type of a program's inputs and outputs:
ExecuTorch flattens them and the ``.pte`` takes and returns the leaves in
order. What it does need is the tree's *structure*, because the ``.pte``
records it (``ContainerMetadata``: the tree spec dumped by torch's pytree).

A stand-in therefore keeps exactly what the saved spec says: the serialized
type name, the dumped context string (returned unchanged, so the spec dumps to
the same text and the ``.pte`` to the same bytes) and the keys that context
names, in order. Two kinds:

* :class:`StandIn`, for any registered node type (a dataclass, a Hugging Face
  ``ModelOutput``, a custom container): a read-only container of its leaves,
  indexable by key, by position and, for names, as attributes;
* a namedtuple class with positional fields ``field0``, ``field1``, ... for a
  namedtuple (a saved spec names the namedtuple but not its fields).

Each stand-in type is registered with torch's pytree under the saved name, for
the life of the process (a program holding such a spec needs it to flatten and
unflatten). A later import of the real type registers the real one under the
same name; programs loaded after that use it.
"""

from __future__ import annotations

import collections
import json
import threading
from typing import Any, ClassVar, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from torch.utils import _pytree as pytree

_LOCK = threading.Lock()
#: serialized type name -> its stand-in class (one per name and process)
_STANDINS: Dict[str, type] = {}


def _keys_of(context: Optional[str]) -> Tuple[str, List[Any], List[Any]]:
    """(key kind, keys, keys whose value was None) that a dumped context names.

    ``["a", "b"]`` (a ``ModelOutput``, a dict-like container): mapping keys;
    ``[["a", "b"], ["c"]]`` (``register_dataclass``: fields kept, fields that were
    None): attribute names; anything else: positions.
    """
    try:
        decoded = json.loads(context) if isinstance(context, str) else None
    except ValueError:
        decoded = None
    if isinstance(decoded, list) and all(isinstance(k, str) for k in decoded):
        return "mapping", list(decoded), []
    if (isinstance(decoded, list) and len(decoded) == 2
            and all(isinstance(p, list) for p in decoded)
            and all(isinstance(k, str) for p in decoded for k in p)):
        return "attribute", list(decoded[0]), list(decoded[1])
    return "index", [], []


class StandIn:
    """A container standing in for a type that could not be rebuilt in this process.

    ``type_name`` is the saved (serialized) type name; ``keys()``/``values()``/
    ``items()`` are the leaves as the saved tree orders them; ``obj["logits"]``,
    ``obj.logits`` and ``obj[0]`` all work where the saved context names keys.
    """

    type_name: ClassVar[str] = ""
    reason: ClassVar[str] = ""  # why the real type could not be rebuilt
    known_contexts: ClassVar[List[Optional[str]]] = []  # the contexts the archive used

    __slots__ = ("_keys", "_values", "_none", "_context", "_kind")

    def __init__(self, values: Iterable[Any] = (), context: Optional[str] = None) -> None:
        kind, keys, none = _keys_of(context)
        values = list(values)
        if kind != "index" and len(keys) != len(values):
            raise ValueError(f"{self.type_name}: context names {len(keys)} keys for "
                             f"{len(values)} values")
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_keys", keys if kind != "index" else list(range(len(values))))
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_none", none)
        object.__setattr__(self, "_context", context)

    # an unpickled example input: built empty, then given its state
    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            state = dict(state[0] or {}, **state[1])  # (dict, slots)
        if not isinstance(state, dict):
            raise TypeError(f"{self.type_name}: cannot rebuild from a {type(state).__name__}")
        for key, value in state.items():
            self.__setitem__(key, value)

    def __setitem__(self, key: Any, value: Any) -> None:
        if not hasattr(self, "_keys"):
            StandIn.__init__(self)
            object.__setattr__(self, "_kind", "attribute")
        if key in self._keys:
            self._values[self._keys.index(key)] = value
        else:
            self._keys.append(key)
            self._values.append(value)

    def keys(self) -> List[Any]:
        return list(self._keys)

    def values(self) -> List[Any]:
        return list(self._values)

    def items(self) -> List[Tuple[Any, Any]]:
        return list(zip(self._keys, self._values))

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int) and key not in self._keys:
            return self._values[key]
        try:
            return self._values[self._keys.index(key)]
        except ValueError:
            raise KeyError(key) from None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._keys:
            return self._values[self._keys.index(name)]
        if name in self._none:
            return None
        raise AttributeError(f"{self.type_name} (stand-in) has no field {name!r}")

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._keys if self._kind == "mapping" else self._values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StandIn) or type(other) is not type(self):
            return False
        return other._keys == self._keys and all(
            a is b for a, b in zip(other._values, self._values))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={_short(v)}" for k, v in zip(self._keys, self._values))
        return f"{type(self).__name__}[stand-in]({body})"

    # the pytree node functions
    def _context_string(self) -> Optional[str]:
        """The dumped context of this container: its own when the spec built it, else
        the archive's context that names exactly its keys."""
        if self._context is not None or not self.known_contexts:
            return self._context
        present = [k for k, v in zip(self._keys, self._values) if v is not None]
        absent = [k for k, v in zip(self._keys, self._values) if v is None]
        for context in self.known_contexts:
            kind, keys, none = _keys_of(context)
            if kind == "mapping" and keys == list(self._keys):
                return context
            if kind == "attribute" and keys == present and none == absent:
                return context
        if len(set(self.known_contexts)) == 1:
            return self.known_contexts[0]
        raise ValueError(f"{self.type_name} (stand-in): keys {self._keys} match none of the "
                         "saved tree's contexts")

    def _leaves(self) -> List[Any]:
        context = self._context_string()
        kind, keys, _none = _keys_of(context)
        if kind == "index" or self._context is not None:
            return list(self._values)
        by_key = dict(zip(self._keys, self._values))
        return [by_key[k] for k in keys]


def _short(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"tensor{list(shape)}"
    return repr(value)


def _flatten(obj: StandIn) -> Tuple[List[Any], Optional[str]]:
    return obj._leaves(), obj._context_string()


def _flatten_with_keys(obj: StandIn) -> Tuple[List[Tuple[Any, Any]], Optional[str]]:
    leaves, context = _flatten(obj)
    kind, keys, _none = _keys_of(context)
    if kind == "mapping":
        entries: Sequence[Any] = [pytree.MappingKey(k) for k in keys]
    elif kind == "attribute":
        entries = [pytree.GetAttrKey(k) for k in keys]
    else:
        entries = [pytree.SequenceKey(i) for i in range(len(leaves))]
    return list(zip(entries, leaves)), context


def _unflatten_with(cls: type):
    def unflatten(values: Iterable[Any], context: Optional[str]) -> StandIn:
        return cls(values, context)
    return unflatten


def _identity(context: Any) -> Any:
    return context


def _class_name(type_name: str) -> str:
    return type_name.rsplit(".", 1)[-1] or "StandIn"


def container(type_name: str, reason: str, contexts: Sequence[Optional[str]]) -> type:
    """The :class:`StandIn` subclass registered under ``type_name`` (made on first use)."""
    with _LOCK:
        cls = _STANDINS.get(type_name)
        if cls is None:
            cls = type(_class_name(type_name), (StandIn,), {
                "__slots__": (), "__module__": __name__, "type_name": type_name,
                "reason": reason, "known_contexts": list(dict.fromkeys(contexts))})
            pytree.register_pytree_node(
                cls, _flatten, _unflatten_with(cls), serialized_type_name=type_name,
                to_dumpable_context=_identity, from_dumpable_context=_identity,
                flatten_with_keys_fn=_flatten_with_keys)
            _STANDINS[type_name] = cls
        else:
            known = cls.known_contexts  # type: ignore[attr-defined]
            known.extend(c for c in contexts if c not in known)
        return cls


def namedtuple(type_name: str, reason: str, n_fields: int) -> type:
    """A namedtuple class of ``n_fields`` positional fields registered under ``type_name``."""
    with _LOCK:
        known = _STANDINS.get(type_name)
        if known is not None:
            fields = len(getattr(known, "_fields", ()))
            if fields != n_fields:
                raise ValueError(f"namedtuple {type_name} has {fields} fields in one tree and "
                                 f"{n_fields} in another")
            return known
        factory: Any = collections.namedtuple  # a class made at run time, named by the file
        made = factory(_class_name(type_name), [f"field{i}" for i in range(n_fields)])
        made.__module__ = __name__
        made.type_name, made.reason = type_name, reason
        pytree._register_namedtuple(made, serialized_type_name=type_name)
        _STANDINS[type_name] = made
        return made


def by_name(type_name: str) -> Optional[type]:
    """The stand-in registered for ``type_name`` in this process, if any."""
    with _LOCK:
        return _STANDINS.get(type_name)


def is_standin(cls: Any) -> bool:
    return isinstance(cls, type) and any(cls is c for c in _STANDINS.values())


def replaced_in(spec: Optional[pytree.TreeSpec]) -> List[type]:
    """The stand-in types a tree spec uses, in order of first use."""
    found: List[type] = []
    stack = [spec] if spec is not None else []
    while stack:
        node = stack.pop(0)
        if node.is_leaf():
            continue
        # a namedtuple's node type is collections.namedtuple, its class the context
        for cls in (node.type, node.context):
            if is_standin(cls) and cls not in found:
                found.append(cls)
        stack.extend(node.children())
    return found
