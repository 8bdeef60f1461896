"""Canonical text of the objects a lowering is configured with: partitioners, passes,
pass managers, ``EdgeCompileConfig``, ``constant_methods``, ``ExecutorchBackendConfig``.

Every value is written by what it *is*, never by where it lives: numbers, strings
and bytes by value; tensors by content; classes and functions by qualified name
(they must be importable under it) plus a digest of their source package
(:func:`source_digest`); other objects by class and, recursively, their attributes
(``__dict__`` and ``__slots__``). An object met twice is written the second time as
a back-reference (its ordinal), so shared state and cycles stay in the key without
object ids.

What cannot be written this way raises :class:`~.errors.Uncacheable` naming the path
to it: a lambda or a function defined inside another, a bound method of an object
with no canonical form, an open file, a socket, a lock, a generator, a module-less
C object. The lowering is then neither looked up nor stored.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import importlib.metadata
import io
import sys
import threading
import types
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch
import xxhash

from ..preprocess.code_digests import directory_digest
from .errors import Uncacheable

# modules whose code is fixed by the versions in the key (torch, executorch, python)
_VERSIONED_ROOTS = ("torch", "executorch", "builtins", "sympy", "numpy", "typing", "_operator",
                    "operator", "functools", "collections", "abc", "enum", "math")
_VIEW_SPEC_MODULE = "executorch.exir.passes.replace_view_copy_with_view_pass"
# attributes that are per-call scaffolding, replaced before they are read: an ExportPass
# re-creates its tracer and interpreter for every graph it runs on and sets its fake
# mode from the graph's inputs
_EXPORT_PASS_SCAFFOLDING = ("interpreter", "tracer", "fake_tensor_mode", "node_debug_str")
_TRANSIENT = {
    "executorch.exir.pass_base._ExportPassBase": _EXPORT_PASS_SCAFFOLDING,
    "torch._export.pass_base._ExportPassBaseDeprecatedDoNotUse": _EXPORT_PASS_SCAFFOLDING,
}
_UNCACHEABLE_TYPES = (io.IOBase, types.GeneratorType, types.CoroutineType,
                      types.AsyncGeneratorType, types.FrameType, types.TracebackType,
                      weakref.ReferenceType, type(threading.Lock()), type(threading.RLock()),
                      threading.Thread, threading.Event, threading.Condition)


def _is_stdlib(module: str) -> bool:
    root = module.split(".")[0]
    return root in sys.stdlib_module_names or root.startswith("_") and \
        root.lstrip("_") in sys.stdlib_module_names


@functools.lru_cache(maxsize=None)
def _distribution(root: str) -> str:
    dists = importlib.metadata.packages_distributions().get(root) or []
    found = []
    for dist in dists:
        try:
            found.append(f"{dist}=={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ",".join(sorted(found))


@functools.lru_cache(maxsize=None)
def source_digest(module: str) -> str:
    """Digest of the source a module's code comes from, '' when the key's versions cover it.

    torch, executorch (outside ``executorch.backends``) and the standard library are
    fixed by the versions in the key. An ExecuTorch backend package
    (``executorch.backends.<name>``) is digested as a whole, so is the top-level
    package of any other module (every file, recursively), or the file of a
    top-level module (a script, ``__main__``); an installed distribution's
    version is added. Computed once per process.
    """
    parts = module.split(".")
    if module.startswith("executorch.backends.") and len(parts) >= 3:
        root = ".".join(parts[:3])
    elif parts[0] in _VERSIONED_ROOTS or _is_stdlib(module):
        return ""
    else:
        root = parts[0]
    mod = sys.modules.get(root)
    if mod is None:
        try:
            mod = importlib.import_module(root)
        except Exception:  # a module that cannot be imported by name (a script)
            mod = sys.modules.get(module)
    file = getattr(mod, "__file__", None) if mod is not None else None
    if not file:
        return f"no-source:{root}"
    path = Path(file).resolve()
    target = path.parent if hasattr(mod, "__path__") else path
    return f"{root}:{directory_digest(target)}:{_distribution(parts[0])}"


def qualified(obj: Any, what: str, path: str) -> str:
    """``module.qualname`` of a class or function importable under that name."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if not module or not qualname:
        raise Uncacheable(f"{path}: {what} {obj!r} has no qualified name")
    if "<lambda>" in qualname:
        raise Uncacheable(f"{path}: a lambda ({module}.{qualname}) has no canonical form; "
                          "use a module-level function")
    if "<locals>" in qualname:
        raise Uncacheable(f"{path}: {what} {module}.{qualname} is defined inside a function; "
                          "define it at module level")
    found: Any = sys.modules.get(module)
    if found is None:
        raise Uncacheable(f"{path}: module {module} of {what} {qualname} is not imported")
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not obj and not (isinstance(obj, types.BuiltinFunctionType)
                                 and found is not None and getattr(found, "__self__", None)
                                 is getattr(obj, "__self__", None)):
        raise Uncacheable(f"{path}: {what} {module}.{qualname} is not reachable under its name")
    return f"{module}.{qualname}"


class ObjectCanonical:
    """Writes objects in canonical form (see the module docstring)."""

    def __init__(self, tensor: Callable[[torch.Tensor], str]) -> None:
        self.tensor = tensor  # a tensor's text (by content), from the program canonicaliser
        # attribute values to write instead of an object's own (by id): the values the
        # code about to run will set before it reads them
        self.overrides: Dict[int, Dict[str, Any]] = {}
        self.seen: Dict[int, int] = {}
        self.keep: List[Any] = []  # objects in ``seen`` stay alive, so their ids stay unique

    def text(self, obj: Any, path: str) -> str:  # noqa: C901 - one dispatch table
        if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
            return repr(obj)
        if isinstance(obj, enum.Enum):
            return f"{self.named(type(obj), path)}.{obj.name}"
        if isinstance(obj, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            return str(obj)
        if isinstance(obj, torch.Tensor):
            return self.tensor(obj)
        op = _operator_name(obj)
        if op is not None:
            return f"op:{op}"
        if isinstance(obj, (type, types.FunctionType)) and _is_local(obj):
            return self.local(obj, path)
        if isinstance(obj, type):
            return self.named(obj, path)
        if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType)):
            if isinstance(obj, types.BuiltinFunctionType) and obj.__self__ is not None and \
                    not isinstance(obj.__self__, types.ModuleType):
                return f"bound:{self.text(obj.__self__, path)}.{obj.__name__}"
            return self.named(obj, path)
        if isinstance(obj, types.MethodType):
            return f"method:{self.text(obj.__self__, path)}.{obj.__func__.__name__}"
        if isinstance(obj, types.ModuleType):
            return f"module:{obj.__name__}:{source_digest(obj.__name__)}"
        if isinstance(obj, _UNCACHEABLE_TYPES):
            raise Uncacheable(f"{path}: a {type(obj).__qualname__} has no canonical form")
        back = self.seen.get(id(obj))
        if back is not None:
            return f"ref#{back}"
        self.seen[id(obj)] = len(self.seen)
        self.keep.append(obj)
        if isinstance(obj, (list, tuple)):
            inner = ",".join(self.text(x, f"{path}[{i}]") for i, x in enumerate(obj))
            return f"{self.type_name(obj, path)}[{inner}]"
        if isinstance(obj, (set, frozenset)):
            return f"{type(obj).__name__}{{{','.join(sorted(self.text(x, path) for x in obj))}}}"
        if isinstance(obj, (dict, types.MappingProxyType)):
            items = ",".join(f"{self.text(k, path)}:{self.text(v, f'{path}[{k!r}]')}"
                             for k, v in obj.items())
            return f"{self.type_name(obj, path)}{{{items}}}"
        if type(obj).__name__ == "_Guard" and type(obj).__module__ == _VIEW_SPEC_MODULE:
            # ExecuTorch's _ViewSpec guard: its lambda is fixed by its name
            return f"view-guard:{obj.name}={self.text(obj.expected_val, path)}"
        if isinstance(obj, torch.fx.GraphModule):
            # (ExportPass instances hold an empty one, and a tracer over one)
            tensors = ",".join(f"{name}={self.tensor(t)}" for name, t in
                               list(obj.named_parameters()) + list(obj.named_buffers()))
            return f"graph-module:{xxhash.xxh3_128_hexdigest(obj.code.encode())}[{tensors}]"
        if isinstance(obj, torch.fx.Graph):
            return f"graph:{xxhash.xxh3_128_hexdigest(str(obj).encode())}"
        if isinstance(obj, functools.partial):
            return (f"partial({self.text(obj.func, path)},{self.text(obj.args, path)},"
                    f"{self.text(obj.keywords, path)})")
        return self.instance(obj, path)

    def local(self, obj: Any, path: str) -> str:
        """A class or function made inside a function of torch or ExecuTorch (a fixed
        version): its name, and what it closes over (``create_op_support(fn)``,
        ``any_chain(...)``), recursively. Made inside anyone else's code: uncacheable."""
        module = getattr(obj, "__module__", "") or ""
        what = "class" if isinstance(obj, type) else "function"
        if not _versioned(module):
            kind = "a lambda" if "<lambda>" in obj.__qualname__ else f"{what} {obj.__qualname__}"
            raise Uncacheable(f"{path}: {kind} (module {module}) is defined inside a function "
                              "and has no canonical form; use a module-level one")
        back = self.seen.get(id(obj))
        if back is not None:
            return f"ref#{back}"
        self.seen[id(obj)] = len(self.seen)
        self.keep.append(obj)
        name = f"{module}.{obj.__qualname__}"
        if isinstance(obj, type):
            members = {k: v for k, v in vars(obj).items()
                       if isinstance(v, (types.FunctionType, staticmethod, classmethod))}
            inner = ",".join(f"{k}={self.text(getattr(v, '__func__', v), f'{path}.{k}')}"
                             for k, v in sorted(members.items()))
            bases = ",".join(self.text(b, path) for b in obj.__bases__ if b is not object)
            return f"local-class:{name}({bases}){{{inner}}}"
        cells = [c.cell_contents for c in (obj.__closure__ or ()) if _filled(c)]
        return (f"local-fn:{name}(closure={self.text(cells, f'{path}.<closure>')},"
                f"defaults={self.text(obj.__defaults__, path)},"
                f"kwdefaults={self.text(obj.__kwdefaults__, path)})")

    def type_name(self, obj: Any, path: str) -> str:
        cls = type(obj)
        if cls in (list, tuple, dict, set, frozenset, types.MappingProxyType):
            return cls.__name__
        return self.named(cls, path)

    def named(self, obj: Any, path: str) -> str:
        what = "class" if isinstance(obj, type) else "function"
        name = qualified(obj, what, path)
        digest = source_digest(obj.__module__)
        return f"{name}@{digest}" if digest else name

    def instance(self, obj: Any, path: str) -> str:
        cls = type(obj)
        state: Dict[str, Any] = {}
        if hasattr(obj, "__dict__"):
            state.update(vars(obj))
        for klass in cls.__mro__:
            for slot in getattr(klass, "__slots__", ()) or ():
                if isinstance(slot, str) and slot not in ("__dict__", "__weakref__") and \
                        hasattr(obj, slot):
                    state[slot] = getattr(obj, slot)
        if dataclasses.is_dataclass(obj):
            state.update({f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)
                          if hasattr(obj, f.name)})
        state.update(self.overrides.get(id(obj), {}))
        for klass in cls.__mro__:
            for name in _TRANSIENT.get(f"{klass.__module__}.{klass.__qualname__}", ()):
                state.pop(name, None)
        if not state and not hasattr(obj, "__dict__") and cls.__module__ == "builtins":
            raise Uncacheable(f"{path}: a {cls.__qualname__} has no canonical form")
        if not state and not hasattr(obj, "__dict__") and not getattr(cls, "__slots__", None):
            raise Uncacheable(f"{path}: a {cls.__module__}.{cls.__qualname__} (a C object "
                              "without attributes) has no canonical form")
        inner = ",".join(f"{k}={self.text(state[k], f'{path}.{k}')}" for k in sorted(state))
        # the packages of the base classes too (a subclass of XnnpackPartitioner in mypkg)
        sources = sorted({d for d in (source_digest(b.__module__) for b in cls.__mro__[1:]) if d})
        return f"{self.text(cls, path)}({inner})" + (f"@bases{sources}" if sources else "")


def _is_local(obj: Any) -> bool:
    qualname = getattr(obj, "__qualname__", "") or ""
    return "<locals>" in qualname or "<lambda>" in qualname


def _versioned(module: str) -> bool:
    """Code fixed by the versions in the key (torch, ExecuTorch but its backends, stdlib)."""
    root = module.split(".")[0]
    if module.startswith("executorch.backends."):
        return False
    return root in _VERSIONED_ROOTS or _is_stdlib(module)


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018  # reading an empty cell raises ValueError
    except ValueError:  # an empty cell
        return False
    return True


def _operator_name(obj: Any) -> Optional[str]:
    if isinstance(obj, (torch._ops.OpOverload, torch._ops.OpOverloadPacket,
                        torch._ops.HigherOrderOperator)):
        return str(obj) if not isinstance(obj, torch._ops.HigherOrderOperator) else obj.name()
    module = type(obj).__module__
    if module.startswith("executorch.exir.dialects"):
        name = getattr(obj, "__name__", None)
        if isinstance(name, str):
            return f"{module}:{name}"
    return None
