"""Make ExecuTorch's own entry points (``to_edge_transform_and_lower``,
``EdgeProgramManager.to_backend``) use fastlower."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Generator, List, Tuple

from executorch.exir.backend import backend_api

from . import state
from .api import to_backend

_NAMES = ("to_backend", "validation_disabled", "disable_validation")


def _bindings(to_backend_impl=None) -> List[Tuple[object, str, object]]:
    ref = {name: getattr(backend_api, name) for name in _NAMES}
    ours = {"to_backend": to_backend_impl or to_backend,
            "validation_disabled": state.validation_disabled,
            "disable_validation": state.disable_validation}
    found = []
    for module in list(sys.modules.values()):
        if module is None or getattr(module, "__name__", "").startswith("fastlower"):
            continue
        for name in _NAMES:
            try:
                if module.__dict__.get(name) is ref[name]:
                    found.append((module, name, ours[name]))
            except Exception:  # exotic modules without a plain __dict__
                continue
    return found


@contextmanager
def installed(to_backend_impl=None) -> Generator[None, None, None]:
    """Within the block every imported binding of the reference's ``to_backend`` is fastlower's
    (or ``to_backend_impl``, e.g. the partitioner-only preview of ``fastlower.report.preview``)."""
    swaps = _bindings(to_backend_impl)
    saved = [(m, n, m.__dict__[n]) for m, n, _ in swaps]
    try:
        for module, name, value in swaps:
            setattr(module, name, value)
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def install() -> None:
    """Permanently route ExecuTorch's ``to_backend`` bindings to fastlower."""
    for module, name, value in _bindings():
        setattr(module, name, value)
