"""XNNPACK's pattern passes without building their patterns for a graph they cannot
match, while fastlower preprocesses.

Two of the passes of XNNPACK's ``preprocess`` match patterns in the partition's graph,
then retrace it: ``ConvertToUpsampleBilinear2d`` (``bilinear_2d.get_graphs_dict()``)
and ``ConvertToSDPAPass`` (``sdpa.get_graphs()``). Their patterns are built on first use
by exporting and lowering small modules (``lru_cache``): 2.9 s and 1.2 s of the first
``preprocess`` of a process (py-spy, ``export_llm`` at stories110M size), in every
lowering's window. A pattern's node only matches a graph node of the same target
(``SubgraphMatcher``), and in ExecuTorch 1.5 every upsample pattern holds an
``upsample_bilinear2d.vec`` node and every SDPA pattern a ``_softmax`` node
(``tests/preprocess/test_xnnpack_patterns.py`` checks it): a graph without a node of
that operator has no match.

Inside a :func:`skipped_when_absent` block (this thread or task; a worker forked inside
it too), such a pass on such a graph does what it does after an empty match, the
``recompile`` and the retrace; any other graph runs ExecuTorch's method.
"""

from __future__ import annotations

import functools
import importlib
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Dict, Iterator, Tuple

from . import xnnpack_draws
from .scoped_patch import ScopedMethodPatch

__all__ = ["PASSES", "PATCHES", "matchable", "skipped_when_absent", "uninstall"]

_ACTIVE: ContextVar[bool] = ContextVar("fastlower_xnnpack_patterns", default=False)

# pass class ("module:Class") -> the operator every one of its patterns holds
PASSES: Dict[str, str] = {
    "executorch.backends.xnnpack._passes.convert_to_upsample_bilinear2d"
    ":ConvertToUpsampleBilinear2d": "upsample_bilinear2d",
    "executorch.backends.xnnpack._passes.convert_to_sdpa:ConvertToSDPAPass": "_softmax",
}


def matchable(graph_module: Any, operator: str) -> bool:
    """Whether a node of ``graph_module``'s graph calls an operator whose name holds
    ``operator`` (a superset of the nodes a pattern node could match)."""
    return any(node.op == "call_function" and operator in str(node.target)
               for node in graph_module.graph.nodes)


def _owner(path: str) -> Callable[[], Any]:
    module, _, name = path.partition(":")
    return lambda: getattr(importlib.import_module(module), name)


def _skipping_call(owner: Callable[[], Any], operator: str
                   ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def replace(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, graph_module: Any) -> Any:
            if not _ACTIVE.get():
                return original(self, graph_module)
            if matchable(graph_module, operator):
                with xnnpack_draws.kept():  # the build's draws are made once (as_reference)
                    return original(self, graph_module)
            from torch.fx.passes.infra.pass_base import PassResult

            graph_module.recompile()
            graph_module = super(owner(), self).call(graph_module).graph_module
            return PassResult(graph_module, True)

        return functools.wraps(original)(call)

    return replace


def _patch(path: str, operator: str) -> Tuple[str, ScopedMethodPatch]:
    owner = _owner(path)
    return path, ScopedMethodPatch(owner, "call", _skipping_call(owner, operator))


PATCHES: Dict[str, ScopedMethodPatch] = dict(
    _patch(path, operator) for path, operator in PASSES.items())


@contextmanager
def skipped_when_absent() -> Iterator[None]:
    """Inside the block, each pass skips its patterns on a graph without its operator."""
    for patch in PATCHES.values():
        try:
            patch.install()
        except (ImportError, AttributeError):  # no XNNPACK backend here: nothing to patch
            continue
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def uninstall() -> None:
    """Puts ExecuTorch's methods back (a binding someone made after fastlower's stays)."""
    for patch in PATCHES.values():
        patch.uninstall()
