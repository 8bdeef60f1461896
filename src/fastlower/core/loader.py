"""Locate the native extension ``fastlower._core``.

``load_core()`` returns the imported extension module, or ``None`` when the
pure-Python planner twin must be used instead:

* ``FASTLOWER_FORCE_PYTHON=1`` in the environment -> ``None``, silently
  (tests use it to exercise the Python twin).
* the extension cannot be imported, or was built for another binding
  interface (``_core.INTERFACE`` differs from :data:`CORE_INTERFACE`: a
  stale build) -> ``None`` and a single ``RuntimeWarning`` per process.

Before it returns the extension, ``load_core()`` hands it the rules it cannot know
by itself (:func:`hand_over_rules`): the core never imports a Python module. Code that
imports ``fastlower._core`` directly (tests) calls :func:`hand_over_rules` itself; the
core's name functions raise ``RuntimeError`` until then.
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType
from typing import Optional

from ..settings import FORCE_PYTHON as FORCE_PYTHON_ENV, force_python as _force_python

__all__ = ["load_core", "hand_over_rules", "FORCE_PYTHON_ENV", "CORE_INTERFACE"]

# must equal FASTLOWER_CORE_INTERFACE in csrc/bind_info.cpp; bump both together
CORE_INTERFACE = 12

_warned = False
_handed_over: Optional[ModuleType] = None  # the core that last got the rules


def load_core() -> Optional[ModuleType]:
    """Return ``fastlower._core`` or ``None`` (pure-Python fallback)."""
    if _force_python():
        return None
    try:
        core = importlib.import_module("fastlower._core")
    except ImportError as exc:
        _warn_once(f"is unavailable ({exc})")
        return None
    built_for = getattr(core, "INTERFACE", None)
    if built_for != CORE_INTERFACE:
        _warn_once(f"at {core.__file__} was built for binding interface {built_for}, "
                   f"these sources need {CORE_INTERFACE} (a stale build)")
        return None
    if core is not _handed_over:
        hand_over_rules(core)
    return core


def hand_over_rules(core: ModuleType) -> None:
    """Give ``core`` what it cannot know by itself: the run-time rules of
    :mod:`fastlower.core.name_rules` (torch.fx's illegal node names) and the plain dataclass of
    :mod:`fastlower.core.schema` its fine-grained simulator's partitions are made of.
    Idempotent and thread-safe: the core ignores the same set again."""
    global _handed_over
    from .name_rules import ILLEGAL_NAMES
    from .schema import PartitionPlan

    core.set_name_rules(ILLEGAL_NAMES)
    core.register_types(PartitionPlan)
    _handed_over = core


def _warn_once(problem: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            f"fastlower native extension (fastlower._core) {problem}; using the "
            "pure-Python planner twin, which is slower. Reinstall with `pip install .` "
            "to build it.",
            RuntimeWarning,
            stacklevel=3,
        )
