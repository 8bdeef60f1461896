"""Inside a backend's ``preprocess`` (fastlower's call of it), new ``torch.fx.GraphModule``
objects generate their Python code when it is first needed, not when they are made.

XNNPACK's ``preprocess`` runs ~15 passes over each partition; each ``ExportPass`` makes
a new ``GraphModule`` and each pass manager step recompiles it: Python source generated
and ``exec``'d every time (~20% of a worker's time at Llama 3.2 1B's shape), for code
nothing calls. torch has the lazy form itself, ``torch.fx._lazy_graph_module.
_LazyGraphModule`` (what inductor makes): the same ``GraphModule`` whose ``recompile``
only marks the code stale; reading ``code``, calling the module, printing, pickling or
copying it generates the code first. Here ``GraphModule.__new__`` makes that class
where it would make a plain ``GraphModule`` (never for another subclass), only in the
thread or task inside :func:`lazy_code`, which fastlower enters around each
``preprocess`` call. A ``preprocess`` returns bytes and plain records: no module made
inside leaves it. ``FASTLOWER_LAZY_GRAPH_CODE=off`` turns it off.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

from .scoped_patch import ScopedMethodPatch

__all__ = ["PATCH", "lazy_code"]

_ACTIVE: ContextVar[bool] = ContextVar("fastlower_lazy_graph_code", default=False)


def _plain_class(cls: type) -> type:
    """The class ``GraphModule.__new__`` makes an instance class for (it skips its own
    per-instance ``GraphModuleImpl`` classes)."""
    for klass in cls.__mro__:
        if klass.__qualname__.split(".")[-1] != "GraphModuleImpl":
            return klass
    return cls


def _lazy_new(original: Any) -> Any:
    new = original.__func__ if isinstance(original, staticmethod) else original

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        if _ACTIVE.get():
            from torch.fx import GraphModule
            from torch.fx._lazy_graph_module import _LazyGraphModule

            if _plain_class(cls) is GraphModule:
                cls = _LazyGraphModule
        return new(cls, *args, **kwargs)

    return staticmethod(functools.wraps(new)(__new__))


def _owner() -> type:
    from torch.fx import GraphModule

    return GraphModule


PATCH = ScopedMethodPatch(_owner, "__new__", _lazy_new)


@contextmanager
def lazy_code(enabled: bool = True) -> Iterator[None]:
    """Inside the block (this thread or task), new plain ``GraphModule`` objects are
    ``_LazyGraphModule`` objects (see the module)."""
    if not enabled:
        yield
        return
    with PATCH.active(_ACTIVE, True):
        yield
