"""Locate the native extension ``fastlower._core``.

``load_core()`` returns the imported extension module, or ``None`` when the
pure-Python planner twin must be used instead:

* ``FASTLOWER_FORCE_PYTHON=1`` in the environment -> ``None``, silently
  (tests use it to exercise the Python twin).
* the extension cannot be imported -> ``None`` and a single
  ``RuntimeWarning`` per process.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType
from typing import Optional

__all__ = ["load_core", "FORCE_PYTHON_ENV"]

FORCE_PYTHON_ENV = "FASTLOWER_FORCE_PYTHON"

_warned = False


def _force_python() -> bool:
    return os.environ.get(FORCE_PYTHON_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def load_core() -> Optional[ModuleType]:
    """Return ``fastlower._core`` or ``None`` (pure-Python fallback)."""
    global _warned
    if _force_python():
        return None
    try:
        return importlib.import_module("fastlower._core")
    except ImportError as exc:
        if not _warned:
            _warned = True
            warnings.warn(
                "fastlower native extension (fastlower._core) is unavailable "
                f"({exc}); using the pure-Python planner twin, which is slower. "
                "Reinstall with `pip install .` to build it.",
                RuntimeWarning,
                stacklevel=2,
            )
        return None
