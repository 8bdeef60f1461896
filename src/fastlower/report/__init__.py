"""What a lowering delegated, what it left out and where the time went.

Finding a report (see ``registry``):

* ``fastlower.last_report()``: the calling thread's most recent ``to_backend``;
* ``fastlower.report_for(result)``: the report of the lowering that produced
  ``result`` (weakly mapped: lives as long as the result);
* ``fastlower.lower_with_report(...)``: ``to_backend``'s arguments in,
  ``(result, report)`` out;
* ``fastlower.report.collecting()``: a block that gathers every report finished
  inside it, in order (the "a lowering finished" hook);
* ``build_report(partition_result)`` / ``preview(program, partitioner)``: the same
  report from the partitioner's tagging alone, no backend run (``preview``).

Reading one: ``LoweringReport`` (``model``) fields and ``coverage``;
``text.summary`` (tables for logs), ``json.write`` (versioned schema,
``schema.json``), ``html.write`` (self-contained page), ``explorer.write``
(Model Explorer node-data overlay).
"""

from .model import (
    Coverage, LoweringReport, NodeRecord, OperatorRecord, PartitionRecord, UndelegatedNode,
)
from .preview import build_report, preview, preview_export
from .registry import collecting, last_report, report_for

__all__ = [
    "LoweringReport", "Coverage", "NodeRecord", "OperatorRecord", "PartitionRecord",
    "UndelegatedNode", "last_report", "report_for", "collecting", "build_report", "preview",
    "preview_export",
]
