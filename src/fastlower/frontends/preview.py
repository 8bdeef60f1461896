"""What a partitioner *would* delegate, with no backend ``preprocess`` (as Torch-TensorRT's
dryrun and TFLite's ``PreviewDelegatePartitioning`` do).

``preview(edge_program, partitioner)`` runs the partitioner on a copy and reports its
tagging. ``preview_export(aten_program, partitioner)`` goes through ExecuTorch's
``to_edge_transform_and_lower`` up to its ``to_backend`` call, so the partitioner sees
exactly the Edge program it would see there, then stops. Both run a partitioner and
the second drives ExecuTorch, so this module sits above the lowering, beside ``patch``
and the CLI; the report it makes comes from ``fastlower.report.build_report``
(``fastlower.report`` does not import this module: it is below the lowering).
"""

from __future__ import annotations

import time
from typing import Any, Dict, Mapping

from ..base.loading.notes import describe_replacements
from ..lowering import make_fake_program
from ..patch import routed
from ..report import registry
from ..report.collect import build_report
from ..report.document import LoweringReport

__all__ = ["preview", "preview_export"]


def preview(program: Any, partitioner: Any, method: str = "forward") -> LoweringReport:
    """Run ``partitioner`` on a copy of the Edge ``program`` and report its tagging.

    The caller's program is not touched; no backend runs.
    """
    return _preview_methods({method: program}, {method: partitioner})


def _preview_methods(programs: Mapping[str, Any],
                     partitioners: Mapping[str, Any]) -> LoweringReport:
    start = time.perf_counter()
    results: Dict[str, Any] = {}
    for name, partitioner in partitioners.items():
        if name in programs:
            results[name] = partitioner(make_fake_program(programs[name]))
    elapsed = time.perf_counter() - start
    report = build_report(results)
    report.phases = {"partition": elapsed}
    report.external = {"partitioner": elapsed}
    report.seconds = elapsed
    return report


class _PartitionedOnly(Exception):
    """Carries the preview out of ``to_edge_transform_and_lower`` once the partitioners ran."""

    def __init__(self, report: LoweringReport) -> None:
        super().__init__("preview done")
        self.report = report


def _preview_to_backend(spec: Any, *args: Any) -> Any:
    """Stands in for ``to_backend(MethodProgramsPartitionerSpec)``: report, then stop."""
    if args or not hasattr(spec, "method_to_edge_program"):
        raise TypeError("the preview stands in for to_backend(MethodProgramsPartitionerSpec) only")
    raise _PartitionedOnly(_preview_methods(spec.method_to_edge_program,
                                            spec.method_to_partitioner))


def preview_export(aten_program: Any, partitioner: Any, **kwargs: Any) -> LoweringReport:
    """What ``to_edge_transform_and_lower(aten_program, partitioner=[partitioner], **kwargs)``
    would delegate: the same Edge program (ops the partitioner keeps undecomposed stay
    so), the partitioner run on it, and no backend. Also this thread's ``last_report()``.
    """
    from executorch.exir import to_edge_transform_and_lower

    try:
        # this thread's to_backend call only: other threads keep their own
        with routed({"to_backend": _preview_to_backend}):
            to_edge_transform_and_lower(aten_program, partitioner=[partitioner], **kwargs)
    except _PartitionedOnly as done:
        done.report.notes.extend(describe_replacements(aten_program))
        registry.publish(done.report, None)
        return done.report
    raise RuntimeError("to_edge_transform_and_lower did not call to_backend")
