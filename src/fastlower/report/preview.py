"""The report of a partitioner's tagging alone: what *would* be delegated, with no
backend ``preprocess`` (as Torch-TensorRT's dryrun and TFLite's
``PreviewDelegatePartitioning`` do).

``build_report(result)`` reads a ``PartitionResult`` (or a tagged program and its
``partition_tags``). ``preview(edge_program, partitioner)`` runs the partitioner on
a copy and reads its result. ``preview_export(aten_program, partitioner)`` goes
through ``to_edge_transform_and_lower`` up to its ``to_backend`` call, so the
partitioner sees exactly the Edge program it would see there, then stops.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Mapping, Optional

from . import collect, registry
from .model import LoweringReport


def build_report(source: Any, partition_tags: Optional[Mapping[str, Any]] = None) -> LoweringReport:
    """The preview report of a partitioner's result.

    ``source`` is a ``PartitionResult``, a dict of them per method, or a tagged
    ``ExportedProgram`` together with its ``partition_tags``.
    """
    report = LoweringReport(preview=True)
    if isinstance(source, dict):
        programs = {m: r.tagged_exported_program for m, r in source.items()}
        tags = {m: r.partition_tags or {} for m, r in source.items()}
    elif hasattr(source, "tagged_exported_program"):
        programs = {"forward": source.tagged_exported_program}
        tags = {"forward": source.partition_tags or {}}
    else:
        if partition_tags is None:
            raise TypeError("build_report(program) needs the partition_tags that go with it")
        programs, tags = {"forward": source}, {"forward": partition_tags}
    collect.from_tagged(report, programs, tags)
    return report


def preview(program: Any, partitioner: Any, method: str = "forward") -> LoweringReport:
    """Run ``partitioner`` on a copy of the Edge ``program`` and report its tagging.

    The caller's program is not touched; no backend runs.
    """
    return _preview_methods({method: program}, {method: partitioner})


def _preview_methods(programs: Mapping[str, Any],
                     partitioners: Mapping[str, Any]) -> LoweringReport:
    from ..lowering import make_fake_program

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

    from ..patch import routed

    try:
        # this thread's to_backend call only: other threads keep their own
        with routed({"to_backend": _preview_to_backend}):
            to_edge_transform_and_lower(aten_program, partitioner=[partitioner], **kwargs)
    except _PartitionedOnly as done:
        from ..loading.notes import describe_replacements

        done.report.notes.extend(describe_replacements(aten_program))
        registry.publish(done.report, None)
        return done.report
    raise RuntimeError("to_edge_transform_and_lower did not call to_backend")
