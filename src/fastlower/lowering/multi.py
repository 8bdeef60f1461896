"""The multi-method path: ``to_backend(MethodProgramsPartitionerSpec)``.

The reference partitions one method at a time and fuses and builds every
partition of a method before it runs the next method's partitioner; then,
backend by backend (in the order first seen: methods in order, tags in order),
it preprocesses every method's partitions of that backend together
(``BackendDetails.preprocess_multimethod``) and inserts their delegates.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple, cast

from executorch.exir.backend.partitioner import Partitioner
from torch.export import ExportedProgram

from .. import errors
from .apply import GraphBuilder, Partition
from ..preprocess.backends import copy_for_backend, find_backend, make_lowered_module
from ..core.schema import DELEGATES_AFTER_FUSING
from ..core.plan import GraphPlan, insert_delegates, iter_partitions
from ..preprocess.jobs import PreprocessJob, overrides_preprocess_multimethod
from ..preprocess.partitions import preprocess_partitions
from ..report.collect import finish_report
from ..report.document import LoweringReport
from .steps import (
    LoweringPath, MethodLowering, add_fused_module, add_lowered_module, method_record,
)

# backend id -> method name -> that method's partitions of the backend, in graph order
ByBackend = Dict[str, Dict[str, List[Partition]]]


class _DefaultPreprocessBatch:
    """Partitions of consecutive backends that keep the default ``preprocess_multimethod``
    (``preprocess`` per partition): preprocessed together, in parallel or from the cache."""

    def __init__(self, report: LoweringReport) -> None:
        self.report = report
        self.jobs: List[PreprocessJob] = []
        self.runs = 0

    def add(self, backend_id: str, cls, method: str, parts: List[Partition],
            specs: List[list]) -> None:
        for part, compile_specs in zip(parts, specs):
            self.jobs.append(PreprocessJob(len(self.jobs), backend_id, cls, part.program,
                                           compile_specs, part.tag, method,
                                           backend_copy_hook=True, partition=part))

    def run(self) -> None:
        """Preprocess the batch's partitions and give each its lowered module."""
        self.runs += 1
        with self.report.external_time("backend"):
            results = preprocess_partitions(self.jobs, self.report)
        for job, result in zip(self.jobs, results):
            cast(Partition, job.partition).lowered = make_lowered_module(
                job.program, job.backend_id, result, job.compile_specs)
        self.jobs = []

    def close(self) -> None:
        """Run what is left; an empty lowering still runs one (empty) batch, which
        records the runner in the report."""
        if self.jobs or not self.runs:
            self.run()


class MultiMethodLowering(LoweringPath):
    """Several methods, a partitioner each; preprocess grouped by backend across methods."""

    # every partition is fused before any delegate is inserted
    delegate_insertion = DELEGATES_AFTER_FUSING

    def attach_modules(self, builder: GraphBuilder, parts: List[Partition]) -> None:
        # every fused module first, then the lowered ones in the order of their names
        if builder.plan.is_submodule:
            for part in parts:
                add_fused_module(builder, part)
        for part in sorted(parts, key=lambda p: builder.graph.partitions[p.pid].lowered_index):
            add_lowered_module(builder, part)

    # -- the four phases after every method is built --------------------------------
    @staticmethod
    def group_by_backend(lowerings: List[MethodLowering]) -> ByBackend:
        """Backends in the order first seen (methods in order, each method's graphs top
        first, tags in order); each method's partitions of a backend in graph order."""
        by_backend: ByBackend = {}
        for lowering in lowerings:
            for part in lowering.partitions:  # per graph (top, nested), in tag order
                by_backend.setdefault(lowering.backend_id(part), {})
            by_key = {(id(p.builder.plan), p.pid): p for p in lowering.partitions}
            for graph, pid in iter_partitions(lowering.plan):
                part = by_key[(id(graph), pid)]
                by_backend[lowering.backend_id(part)].setdefault(lowering.name, []).append(part)
        return by_backend

    @staticmethod
    def insert_stop(lowerings: List[MethodLowering],
                    by_backend: ByBackend) -> Tuple[Optional[BaseException], ByBackend]:
        """The first method's owned buffer update read outside its delegate, and the
        backends preprocessed before it is met: the reference meets it inserting that
        delegate, after its backend's preprocess and before the next backend's."""
        for lowering in lowerings:
            part = lowering.order.insert_stop_partition(lowering.partitions)
            stop = lowering.order.insert_stop
            if part is not None and stop is not None:  # a partition only when there is a stop
                backends = list(by_backend)
                last = backends.index(lowering.backend_id(part))
                return stop.error, {b: by_backend[b] for b in backends[:last + 1]}
        return None, by_backend

    def preprocess(self, lowerings: List[MethodLowering], by_backend: ByBackend) -> None:
        """Each backend's partitions through its ``preprocess_multimethod``, in order.

        Consecutive backends that keep the default become one batch of jobs; an
        override is called once per backend, in the reference's order, after the batch
        before it (so the first backend's error is the one raised).
        """
        specs_of = {lowering.name: lowering.result.partition_tags for lowering in lowerings}
        batch = _DefaultPreprocessBatch(self.report)
        for backend_id, per_method in by_backend.items():
            cls = find_backend(backend_id)
            specs = {m: [specs_of[m][p.tag].compile_specs for p in parts]
                     for m, parts in per_method.items()}
            if not overrides_preprocess_multimethod(cls):
                for m, parts in per_method.items():
                    batch.add(backend_id, cls, m, parts, specs[m])
                continue
            if batch.jobs:
                batch.run()
            self._preprocess_multimethod(cls, backend_id, per_method, specs)
        batch.close()

    def _preprocess_multimethod(self, cls, backend_id: str, per_method: Dict[str, List[Partition]],
                                specs: Dict[str, List[list]]) -> None:
        """One call of a backend's own ``preprocess_multimethod`` with all its partitions."""
        programs = {m: [copy_for_backend(cls, p.program, s) for p, s in zip(parts, specs[m])]
                    for m, parts in per_method.items()}
        with self.report.preprocess_time([p for parts in per_method.values() for p in parts]):
            results = cls.preprocess_multimethod(programs, specs)
        for m, method_results in results.items():
            for part, result, compile_specs in zip(per_method[m], method_results, specs[m]):
                part.lowered = make_lowered_module(part.program, backend_id, result, compile_specs)

    @staticmethod
    def insert_delegates(lowerings: List[MethodLowering], by_backend: ByBackend) -> None:
        """Insert every delegate into the planned graphs: each method's in the reference's
        order (backend by backend, each backend's partitions in graph order)."""
        schedules: Dict[str, List[Tuple[GraphPlan, int]]] = {}
        for per_method in by_backend.values():
            for method, parts in per_method.items():
                schedules.setdefault(method, []).extend(
                    (part.builder.plan, part.pid) for part in parts)
        for lowering in lowerings:
            insert_delegates(lowering.plan, schedules.get(lowering.name, []))

    def run(self, programs: Mapping[str, ExportedProgram],
            partitioners: Mapping[str, Partitioner]) -> Dict[str, ExportedProgram]:
        """Partition, plan and build each method in turn, preprocess by backend, insert,
        then the lowered programs (a method without a partitioner is returned as is)."""
        lowerings: List[MethodLowering] = []
        for name, partitioner in partitioners.items():
            if name not in programs:
                raise errors.MethodWithoutProgramError(name, list(programs))
            programs[name]._validate()
            lowering = self.partition(name, programs[name], partitioner)
            # the reference fuses and builds every partition of a method before it runs
            # the next method's partitioner; preprocess comes after all methods
            self.build_partitions(lowering)
            lowering.order.raise_pending()
            lowerings.append(lowering)
        self.report.mark("partition+plan")
        by_backend = self.group_by_backend(lowerings)
        insert_error, by_backend = self.insert_stop(lowerings, by_backend)
        self.preprocess(lowerings, by_backend)
        if insert_error is not None:
            raise insert_error
        self.insert_delegates(lowerings, by_backend)
        self.report.mark("preprocess")
        done = {lowering.name: self.finish(lowering) for lowering in lowerings}
        result = {name: done.get(name, programs[name]) for name in programs}
        finish_report(self.report, result, lowerings, method_record)
        return result


def lower_methods(programs: Mapping[str, ExportedProgram],
                  partitioners: Mapping[str, Partitioner]) -> Dict[str, ExportedProgram]:
    """``to_backend(MethodProgramsPartitionerSpec)``: lower several methods together."""
    return MultiMethodLowering(LoweringReport.start()).run(programs, partitioners)
