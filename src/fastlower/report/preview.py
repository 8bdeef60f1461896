"""The report of a partitioner's tagging alone: what *would* be delegated, with no
backend ``preprocess`` (as Torch-TensorRT's dryrun and TFLite's
``PreviewDelegatePartitioning`` do).

``build_report(result)`` reads a ``PartitionResult`` (or a tagged program and its
``partition_tags``). ``preview(program, partitioner)`` runs the partitioner on a
copy and reads its result. ``previewing()`` makes ExecuTorch's own entry points
(``to_edge_transform_and_lower``, ``EdgeProgramManager.to_backend``) run the
partitioners only: the programs come back untagged and undelegated, and
``last_report()`` is the preview.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Dict, Generator, Mapping, Optional

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


def _preview_methods(programs: Mapping[str, Any], partitioners: Mapping[str, Any]) -> LoweringReport:
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


def _preview_to_backend(spec: Any, *args: Any) -> Any:
    """Stands in for ``to_backend(MethodProgramsPartitionerSpec)``: report, do not lower."""
    if args or not hasattr(spec, "method_to_edge_program"):
        raise TypeError("the preview stands in for to_backend(MethodProgramsPartitionerSpec) only")
    programs = spec.method_to_edge_program
    report = _preview_methods(programs, spec.method_to_partitioner)
    registry.publish(report, None)
    return dict(programs)


@contextmanager
def previewing() -> Generator[None, None, None]:
    """Within the block ExecuTorch's ``to_backend`` runs the partitioners only."""
    from ..patch import installed

    with installed(_preview_to_backend):
        yield
