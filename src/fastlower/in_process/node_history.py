"""A new node's provenance history shared with its source's, not deep-copied, while
fastlower lowers.

torch.fx records where a node came from in ``node.meta["from_node"]``: a list of
``NodeSource``, each holding its own source's history in ``from_node``.
``NodeSource(node)`` deep-copies ``node.meta["from_node"]`` (``torch/fx/traceback.py``),
and every retrace and pass makes one per new node, so each copies a history that grows
with the passes behind it: 12% of ExecuTorch's edge stage in ``export_llm``'s pipeline
(py-spy, ``benchmarks/README.md``). Neither torch nor ExecuTorch changes a ``NodeSource``
once made (its ``_dict`` and ``_action_string`` are caches of its own values), so a new
list holding the same ``NodeSource`` objects equals the deep copy value for value; only
identity differs (two histories may now hold the same object).

The patch: ``NodeSource.__init__``, bound by the first :func:`shared_history` block and
kept until :func:`uninstall`, runs torch's own code unless the calling thread or asyncio
task is inside such a block (a context variable) and ``FASTLOWER_NODE_HISTORY`` is
``share`` (the default; ``copy`` is torch's way throughout).
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator

from .. import settings
from .scoped_patch import ScopedMethodPatch

__all__ = ["installed", "shared_history", "uninstall"]

_SHARING: ContextVar[bool] = ContextVar("fastlower_shared_node_history", default=False)
def _node_source() -> Any:
    from torch.fx.traceback import NodeSource

    return NodeSource


def _sharing_init(original: Callable[..., None]) -> Callable[..., None]:
    """``NodeSource.__init__`` that shares ``node``'s history inside a block, else
    ``original``."""

    def __init__(self: Any, node: Any, pass_name: str = "", action: Any = None) -> None:
        history = node.meta.get("from_node") if node and _SHARING.get() else None
        if not isinstance(history, list):
            original(self, node, pass_name, action)
            return
        original(self, None, pass_name, action)  # every field in torch's order
        self.node_info = self.NodeInfo(name=node.name, target=str(node.target),
                                       graph_id=id(node.graph))
        self.from_node = list(history)

    return functools.wraps(original)(__init__)


_PATCH = ScopedMethodPatch(_node_source, "__init__", _sharing_init)
installed = _PATCH.installed  # whether the patch is bound now
# puts torch's ``NodeSource.__init__`` back (a binding someone else made after
# fastlower's stays); the next :func:`shared_history` block binds the patch again
uninstall = _PATCH.uninstall


@contextmanager
def shared_history() -> Iterator[None]:
    """Inside the block, in this thread or task, ``NodeSource(node)`` shares ``node``'s
    history (see the module); nested blocks are fine."""
    if settings.choice(settings.NODE_HISTORY) != "share":
        yield
        return
    with _PATCH.active(_SHARING, True):
        yield
