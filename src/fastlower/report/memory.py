"""The process's peak memory, for the report: ``ru_maxrss`` of this process and of its
children, in bytes.

``getrusage`` gives the high-water mark of the resident set since the process
started: of this process (``RUSAGE_SELF``), and of the largest child it has
waited for (``RUSAGE_CHILDREN``: the fork pool's preprocess workers once their pool
has shut down, a cache store's child once reaped). Linux and BSD count it in KiB,
macOS in bytes; both are turned into bytes here. Where ``resource`` does not exist
(Windows) both are 0.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from .model import ReportData

try:
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

# ru_maxrss's unit: bytes on macOS, KiB elsewhere
_UNIT = 1 if sys.platform == "darwin" else 1024


def peak_rss() -> Tuple[int, int]:
    """``(this process's peak RSS, its largest waited-for child's peak RSS)`` in bytes."""
    if resource is None:  # pragma: no cover - Windows
        return 0, 0
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return own * _UNIT, children * _UNIT


def record_peak(report: "ReportData") -> None:
    """Record the process's peak memory so far in ``report`` (``peak_rss_bytes`` and
    ``children_peak_rss_bytes``)."""
    report.peak_rss_bytes, report.children_peak_rss_bytes = peak_rss()
