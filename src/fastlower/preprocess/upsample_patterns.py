"""XNNPACK's ``ConvertToUpsampleBilinear2d`` pass without building its patterns for a
graph they cannot match, while fastlower preprocesses.

The pass (one of the 17 of XNNPACK's ``preprocess``) matches each pattern of
``bilinear_2d.get_graphs_dict()`` in the partition's graph, then retraces the graph.
Those patterns are built on first use by exporting and lowering a small module four
times (``lru_cache``): 2.9 s of the first ``preprocess`` of a process (py-spy,
``export_llm`` at stories110M size), in every lowering's window. In ExecuTorch 1.5
every pattern is one ``upsample_bilinear2d.vec`` node
(``tests/preprocess/test_upsample_patterns.py`` checks it), and a pattern's node only
matches a node of the same target: a graph without such a node has no match.

Inside a :func:`skipped_when_absent` block (this thread or task; a worker forked inside
it too), the pass on such a graph does what it does after an empty match, the
``recompile`` and the retrace; any other graph runs ExecuTorch's method.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator

from ..scoped_patch import ScopedMethodPatch

__all__ = ["PATCH", "matchable", "skipped_when_absent"]

_ACTIVE: ContextVar[bool] = ContextVar("fastlower_upsample_patterns", default=False)


def matchable(graph_module: Any) -> bool:
    """Whether any node of ``graph_module``'s graph could match an upsample pattern."""
    return any(node.op == "call_function" and "upsample" in str(node.target)
               for node in graph_module.graph.nodes)


def _skipping_call(original: Callable[..., Any]) -> Callable[..., Any]:
    def call(self: Any, graph_module: Any) -> Any:
        if not _ACTIVE.get() or matchable(graph_module):
            return original(self, graph_module)
        from torch.fx.passes.infra.pass_base import PassResult

        graph_module.recompile()
        graph_module = super(_owner(), self).call(graph_module).graph_module
        return PassResult(graph_module, True)

    return functools.wraps(original)(call)


def _owner() -> Any:
    from executorch.backends.xnnpack._passes.convert_to_upsample_bilinear2d import (
        ConvertToUpsampleBilinear2d,
    )

    return ConvertToUpsampleBilinear2d


PATCH = ScopedMethodPatch(_owner, "call", _skipping_call)


@contextmanager
def skipped_when_absent() -> Iterator[None]:
    """Inside the block, the pass skips its patterns on a graph without an upsample node."""
    try:
        PATCH.install()
    except ImportError:  # no XNNPACK backend in this environment: nothing to patch
        yield
        return
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
