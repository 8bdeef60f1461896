"""Where a finished report is found: the calling thread's last one, and by its result.

* ``last_report()`` is per thread (``threading.local``): two threads lowering at
  once each see their own report.
* ``report_for(result)`` maps a lowering's result (the ``ExportedProgram``, each
  program of a multi-method result, or an ``EdgeProgramManager`` whose
  programs came out of a lowering) to its report through weak references: the
  report lives as long as the result does and no longer.
* ``collecting()`` is the hook for "a lowering finished": a block that gathers
  every report finished inside it, in order (the calling thread's, or every
  thread's with ``all_threads=True``), e.g. for code that runs someone else's
  script and wants each of its lowerings' reports (``fastlower run``).
"""

from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .document import LoweringReport

_LOCAL = threading.local()
_BY_RESULT: "weakref.WeakKeyDictionary[Any, LoweringReport]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
# collecting() blocks in progress: token -> (their list, thread ident or None for every thread)
_COLLECTORS: Dict[object, Tuple[List[LoweringReport], Optional[int]]] = {}


def publish(report: LoweringReport, result: Any) -> None:
    """Make ``report`` this thread's last report and the report of ``result``, and hand
    it to every ``collecting()`` block that listens to this thread."""
    _LOCAL.report = report
    programs = result.values() if isinstance(result, dict) else [result]
    thread = threading.get_ident()
    with _LOCK:
        for reports, listens_to in _COLLECTORS.values():
            if listens_to is None or listens_to == thread:
                reports.append(report)
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


@contextmanager
def collecting(*, all_threads: bool = False) -> Iterator[List[LoweringReport]]:
    """A list that receives every report finished inside the block, in order.

    .. code-block:: python

        with fastlower.report.collecting() as reports:
            run_someone_elses_export()          # calls to_backend three times
        for report in reports:                  # three reports, in call order
            print(report.summary())

    Only the calling thread's lowerings are collected, unless ``all_threads`` (then
    every thread's, while the block is open). Previews (``preview_export``) publish
    reports too and are collected as well. Blocks nest: each gets every report made
    inside it. The list is the caller's; fastlower stops appending when the block ends.
    """
    reports: List[LoweringReport] = []
    token = object()
    with _LOCK:
        _COLLECTORS[token] = (reports, None if all_threads else threading.get_ident())
    try:
        yield reports
    finally:
        with _LOCK:
            del _COLLECTORS[token]
