"""The single-program path: ``to_backend(program, partitioner)``.

The reference lowers one partition at a time: fuse it, build its program,
``preprocess`` it, insert its delegate, then the next partition. fastlower
plans every partition first (with each delegate inserted right after its
fusion, as the reference's graph is then), builds the partition programs up to
the first error the reference would meet, preprocesses them together
(in parallel or from the cache), and raises that error only then.
"""

from __future__ import annotations

from typing import List, cast

from executorch.exir.backend.partitioner import Partitioner
from torch.export import ExportedProgram

from .. import errors
from .apply import GraphBuilder, Partition
from ..preprocess.backends import find_backend, make_lowered_module
from ..core.schema import DELEGATES_WHILE_FUSING
from ..preprocess.jobs import PreprocessJob
from ..preprocess.partitions import preprocess_partitions
from ..report.collect import finish_report
from ..report.document import LoweringReport
from .steps import (
    LoweringPath, MethodLowering, add_fused_module, add_lowered_module, method_record,
)


class SingleProgramLowering(LoweringPath):
    """One program, one partitioner; each partition lowered before the next is fused."""

    # each delegate is inserted right after its partition is fused (and lowered); the
    # partition program then keeps the owning graph's output meta
    delegate_insertion = DELEGATES_WHILE_FUSING

    def attach_modules(self, builder: GraphBuilder, parts: List[Partition]) -> None:
        # each partition is fused, then lowered, before the next
        for part in parts:
            if builder.plan.is_submodule:
                add_fused_module(builder, part)
            add_lowered_module(builder, part)

    def preprocess(self, lowering: MethodLowering) -> None:
        """Every built partition through its backend's ``preprocess`` (parallel or cached),
        then the method's pending error: of the partitions before the stop, an earlier
        one's preprocess error comes first (``preprocess_partitions`` raises it)."""
        jobs: List[PreprocessJob] = []
        for part in lowering.partitions:
            spec = lowering.result.partition_tags[part.tag]
            try:
                backend = find_backend(spec.backend_id)
            except errors.BackendNotFoundError as exc:
                lowering.order.backend_missing(exc, part)
                break
            jobs.append(PreprocessJob(len(jobs), spec.backend_id, backend, part.program,
                                      spec.compile_specs, part.tag, lowering.name,
                                      backend_copy_hook=False, partition=part))
        with self.report.external_time("backend"):
            results = preprocess_partitions(jobs, self.report)
        lowering.order.raise_pending()
        for job, result in zip(jobs, results):
            cast(Partition, job.partition).lowered = make_lowered_module(
                job.program, job.backend_id, result, job.compile_specs)

    def run(self, program: ExportedProgram, partitioner: Partitioner) -> ExportedProgram:
        """Validate, partition and plan, build, preprocess, then the lowered program."""
        program._validate()
        lowering = self.partition("forward", program, partitioner)
        self.report.mark("partition+plan")
        self.build_partitions(lowering)
        self.preprocess(lowering)
        self.report.mark("preprocess")
        result = self.finish(lowering)
        finish_report(self.report, result, [lowering], method_record)
        return result


def lower_program(program: ExportedProgram, partitioner: Partitioner) -> ExportedProgram:
    """``to_backend(program, partitioner)``: the reference's single-program path."""
    return SingleProgramLowering(LoweringReport.start()).run(program, partitioner)
