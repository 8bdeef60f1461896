"""Rebuild a saved type name as the real type when this process can do it faithfully.

A serialized type name is usually the type's ``module.qualname``
(``transformers.modeling_outputs.CausalLMOutputWithCrossAttentions``,
``mypkg.outputs.Result``). When the module can be imported:

* importing it may register the type itself (Hugging Face registers every
  ``ModelOutput`` subclass when its class is created): nothing more to do;
* a dataclass whose saved contexts name exactly its fields is registered as
  ``torch.export.register_dataclass`` would;
* a namedtuple class whose saved trees have as many children as it has fields
  is registered as ``torch.utils._pytree._register_namedtuple`` would.

Anything else (the exporting script's ``__main__``, a package not installed,
a class whose registration cannot be known) gets a stand-in, with the reason.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from torch.utils import _pytree as pytree

from .archive import TypeUse

log = logging.getLogger("fastlower.base.loading")

#: module names that never hold the exporting process's types here
_NOT_IMPORTED = frozenset({"__main__", "__mp_main__", "builtins"})


@dataclass
class Resolution:
    """How one saved type name was rebuilt: ``cls`` is the real type, or None with ``reason``."""

    name: str
    cls: Optional[type]
    how: str  # "registered", "imported", "dataclass", "namedtuple" or "" (not rebuilt)
    reason: str = ""


def is_registered(use: TypeUse) -> bool:
    return use.name in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE


def resolve(use: TypeUse) -> Resolution:
    """The real type for ``use`` if this process can rebuild it faithfully (importing its
    module when it can), else ``Resolution(cls=None, reason=...)``."""
    if is_registered(use):
        return Resolution(use.name, pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE[use.name], "registered")
    cls, reason = find_class(use.name)
    if is_registered(use):  # importing the module registered it
        log.info("imported the module of %s, which registers it", use.name)
        return Resolution(use.name, pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE[use.name], "imported")
    if cls is None:
        return Resolution(use.name, None, "", reason)
    if use.namedtuple:
        return _as_namedtuple(use, cls)
    if dataclasses.is_dataclass(cls):
        return _as_dataclass(use, cls)
    return Resolution(use.name, None, "", f"{_qualified(cls)} does not register itself as a "
                      "pytree node when imported, and is no dataclass")


def find_class(name: str) -> Tuple[Optional[type], str]:
    """The class a ``module.qualname`` string names, importing its module; else (None, why)."""
    parts = name.split(".")
    if len(parts) < 2:
        return None, f"{name!r} names no module"
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        if module_name in _NOT_IMPORTED:
            return None, f"it was defined in the exporting process's {module_name}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (module_name == exc.name
                                         or module_name.startswith(exc.name + ".")):
                continue  # this prefix is no module: try a shorter one
            return None, f"importing {module_name} failed ({type(exc).__name__}: {exc})"
        except Exception as exc:  # the user's module raised while importing
            return None, f"importing {module_name} failed ({type(exc).__name__}: {exc})"
        obj: Any = module
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
            if obj is None:
                return None, f"module {module_name} has no {'.'.join(parts[cut:])}"
        if not isinstance(obj, type):
            return None, f"{name} is a {type(obj).__name__}, not a class"
        return obj, ""
    return None, f"package {parts[0]!r} is not installed"


def _as_dataclass(use: TypeUse, cls: type) -> Resolution:
    if cls in pytree.SUPPORTED_SERIALIZED_TYPES:  # registered under another name
        return Resolution(use.name, None, "", f"{_qualified(cls)} is registered under "
                          f"{pytree.SUPPORTED_SERIALIZED_TYPES[cls].serialized_type_name!r}")
    fields = [f.name for f in dataclasses.fields(cls) if f.init]
    for context in use.contexts:
        try:
            kept, dropped = json.loads(context) if isinstance(context, str) else (None, None)
        except (ValueError, TypeError):
            kept, dropped = None, None
        if not (isinstance(kept, list) and isinstance(dropped, list)
                and sorted(kept + dropped) == sorted(fields)
                and kept == [f for f in fields if f in kept]):
            return Resolution(use.name, None, "", f"the saved tree of dataclass {_qualified(cls)} "
                              f"(context {context}) does not name its fields {fields}")
    pytree.register_dataclass(cls, serialized_type_name=use.name)
    log.info("registered dataclass %s for pytree under %s", _qualified(cls), use.name)
    return Resolution(use.name, cls, "dataclass")


def _as_namedtuple(use: TypeUse, cls: type) -> Resolution:
    if not pytree.is_namedtuple_class(cls):
        return Resolution(use.name, None, "", f"{_qualified(cls)} is not a namedtuple class")
    n_fields = len(cls._fields)  # type: ignore[attr-defined]
    if any(n != n_fields for n in use.children):
        return Resolution(use.name, None, "", f"namedtuple {_qualified(cls)} has {n_fields} "
                          f"fields, the saved tree {use.children[0]}")
    if cls in pytree.SUPPORTED_SERIALIZED_TYPES:  # registered under another name
        return Resolution(use.name, None, "", f"{_qualified(cls)} is registered under "
                          f"{pytree.SUPPORTED_SERIALIZED_TYPES[cls].serialized_type_name!r}")
    pytree._register_namedtuple(cls, serialized_type_name=use.name)
    log.info("registered namedtuple %s for pytree under %s", _qualified(cls), use.name)
    return Resolution(use.name, cls, "namedtuple")


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def missing(uses: List[TypeUse]) -> List[TypeUse]:
    """The uses whose name no pytree registration of this process knows yet."""
    return [u for u in uses if not is_registered(u)]
