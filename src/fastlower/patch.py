"""Make ExecuTorch's own entry points (``to_edge_transform_and_lower``,
``EdgeProgramManager.to_backend``, ``backend_api.to_backend``) use fastlower.

How it works. For each entry point of :data:`ENTRY_POINTS` (ExecuTorch's
``to_backend``, and ``to_edge_transform_and_lower`` / ``EdgeProgramManager.to_executorch``
behind the lowering cache of :mod:`fastlower.cache`) fastlower makes, once, a
*dispatcher*: a function that looks like the reference (``functools.wraps``: same name,
docstring and attributes, ``__wrapped__`` is the reference) and, at each call, runs

* the implementation the calling thread or asyncio task asked for with
  :func:`installed` (a context variable: other threads and tasks do not see it);
* else fastlower's, if :func:`install` asked for it process-wide;
* else the reference.

While anything asks for fastlower (an open :func:`installed` block in any thread, or
:func:`install`), the dispatcher is bound in place of the reference in every module
whose attribute of that name *is* the reference object: the reference's own module
(``executorch.exir.backend.backend_api``, so a module imported later gets the
dispatcher from it) and those that imported it (``executorch.exir.program._program``,
a user's script...). When nothing asks for fastlower any more, every binding is the
reference again. A thread that never asked runs the reference, whatever other threads
do; the dispatcher adds one context-variable read per call.
"""

from __future__ import annotations

import importlib
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator

# the machinery and the public names that need no implementation live in dispatch
# (which fastlower.cache uses without importing this module, which names it)
from .in_process.dispatch import (  # noqa: F401
    ENTRY_POINTS, EntryPoint, Routes, implementation, is_installed, reference, reference_of,
    routed, set_process_routes,
)

__all__ = ["ENTRY_POINTS", "EntryPoint", "IMPLEMENTATIONS", "fastlower_implementation",
           "implementation", "install", "installed", "is_installed", "reference",
           "reference_of", "routed", "uninstall"]

# fastlower's implementation of each entry point of ENTRY_POINTS, as "module:attribute"
# (imported on first use)
IMPLEMENTATIONS: Dict[str, str] = {
    "to_backend": "fastlower.lowering.api:to_backend",
    "to_edge_transform_and_lower": "fastlower.cache:to_edge_transform_and_lower",
    "to_executorch": "fastlower.cache:to_executorch",
    "_gen_edge_manager_for_partitioners":
        "fastlower.in_process.edge.stage:gen_edge_manager_for_partitioners",
    "_choose_qparams_and_quantize_scale_only_hqq": "fastlower.cache.quantized:choose_qparams_hqq",
    "export": "fastlower.in_process.torch_export:export",
    "run_decompositions": "fastlower.in_process.torch_export:run_decompositions",
    "transform": "fastlower.in_process.edge_transform:transform",
}


def fastlower_implementation(name: str) -> Callable[..., Any]:
    """fastlower's implementation of entry point ``name``."""
    module, _, attribute = IMPLEMENTATIONS[name].partition(":")
    return getattr(importlib.import_module(module), attribute)  # type: ignore[no-any-return]


def _fastlower_routes() -> Dict[str, Callable[..., Any]]:
    return {entry.name: fastlower_implementation(entry.name) for entry in ENTRY_POINTS}


@contextmanager
def installed() -> Iterator[None]:
    """Within the block, ExecuTorch's entry points called by this thread (or asyncio
    task) run fastlower.

    Other threads and tasks keep what they asked for (the reference, unless
    :func:`install` is in force). Threads started inside the block do not inherit it
    (run them with ``contextvars.copy_context().run``, or use :func:`install`);
    asyncio tasks created inside it do. Blocks nest.
    """
    with routed(_fastlower_routes()):
        yield


def install() -> None:
    """Make ExecuTorch's entry points run fastlower in every thread that does not ask
    otherwise, until :func:`uninstall`. Calling it again changes nothing."""
    set_process_routes(_fastlower_routes())


def uninstall() -> None:
    """Undo :func:`install`. Once no :func:`installed` block is open either, every
    binding is ExecuTorch's own function again. Calling it again changes nothing."""
    set_process_routes({})
