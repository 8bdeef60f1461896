"""Where a finished report is found: the calling thread's last one, and by its result.

* ``last_report()`` is per thread (``threading.local``): two threads lowering at
  once each see their own report.
* ``report_for(result)`` maps a lowering's result (the ``ExportedProgram``, each
  program of a multi-method result, or an ``EdgeProgramManager`` whose
  programs came out of a lowering) to its report through weak references: the
  report lives as long as the result does and no longer.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Optional

from .model import LoweringReport

_LOCAL = threading.local()
_BY_RESULT: "weakref.WeakKeyDictionary[Any, LoweringReport]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def publish(report: LoweringReport, result: Any) -> None:
    """Make ``report`` this thread's last report and the report of ``result``."""
    _LOCAL.report = report
    programs = result.values() if isinstance(result, dict) else [result]
    with _LOCK:
        for program in programs:
            if program is None:
                continue
            try:
                _BY_RESULT[program] = report
            except TypeError:  # not weak-referenceable: only last_report() finds it
                pass


def last_report() -> Optional[LoweringReport]:
    """The report of the most recent ``to_backend`` call in the calling thread."""
    return getattr(_LOCAL, "report", None)


def report_for(result: Any) -> Optional[LoweringReport]:
    """The report of the lowering that produced ``result``, or None.

    ``result`` is what ``to_backend`` returned (an ``ExportedProgram`` or the dict of
    them), or an ``EdgeProgramManager`` from ``to_backend``/``to_edge_transform_and_lower``.
    """
    if isinstance(result, dict):
        candidates = list(result.values())
    elif hasattr(result, "methods") and hasattr(result, "exported_program"):
        candidates = [result.exported_program(m) for m in result.methods]
    else:
        candidates = [result]
    with _LOCK:
        for program in candidates:
            try:
                found = _BY_RESULT.get(program)
            except TypeError:
                found = None
            if found is not None:
                return found
    return None
