"""One partition's preprocess: what it needs and the call itself, wherever it runs."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import List, Sequence, Tuple, Type

from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from torch.export import ExportedProgram

from ..in_process.stack_room import with_stack_room


def overrides_preprocess_multimethod(cls: Type[BackendDetails]) -> bool:
    """Whether the backend replaces ``BackendDetails.preprocess_multimethod``.

    Such a backend may share state between its partitions, so its partitions are
    never run in parallel or cached.
    """
    mine = getattr(cls, "preprocess_multimethod", None)
    base = BackendDetails.preprocess_multimethod
    return getattr(mine, "__func__", mine) is not getattr(base, "__func__", base)


@dataclass
class PreprocessJob:
    """One partition to preprocess.

    ``backend_copy_hook`` is the reference's choice of copy: ``True`` on the
    multi-method path (the backend's ``copy_exported_program_for_preprocess``),
    ``False`` on the single-program path (a plain copy).
    """

    index: int
    backend_id: str
    backend: Type[BackendDetails]
    program: ExportedProgram
    compile_specs: List[CompileSpec]
    tag: str
    method: str
    backend_copy_hook: bool
    partition: object = None  # the lowering's own record of this partition (for the report)

    @property
    def parallel_ok(self) -> bool:
        return not overrides_preprocess_multimethod(self.backend)

    def describe(self) -> str:
        return f"partition '{self.tag}' of method '{self.method}' (backend {self.backend_id})"


def estimated_cost(job: PreprocessJob) -> Tuple[int, int]:
    """How long the job's preprocess will take, roughly, as a sortable pair: the
    partition's node count, then the bytes of its constants.

    Nodes come first because they are what a backend's passes walk: in
    ``export_llm``'s stories110M export (``benchmarks/README.md``) XNNPACK took 3.5-4.3 s
    on each 21-node partition (three quantized linears) and ~1 s on each 7-node one,
    the 27 MiB output projection included.
    """
    program = job.program
    constant_bytes = 0
    for value in (*program.state_dict.values(), *program.constants.values()):
        nbytes = getattr(value, "nbytes", None)
        if isinstance(nbytes, int):
            constant_bytes += nbytes
    return len(program.graph.nodes), constant_bytes


def longest_first(jobs: Sequence[PreprocessJob]) -> List[int]:
    """Positions of ``jobs`` in the order a pool should start them: the costliest first.

    A pool takes jobs in the order they are submitted; started costliest first, the
    last jobs to run are short ones and the workers finish close together (longest
    processing time first). Ties keep graph order. Results are still handed back by
    position.
    """
    costs = [estimated_cost(job) for job in jobs]
    return sorted(range(len(jobs)), key=lambda position: (-costs[position][0],
                                                          -costs[position][1], position))


def private_copy(job: PreprocessJob, program: ExportedProgram) -> ExportedProgram:
    """The copy the backend may mutate, made as the reference makes it on this path."""
    from .backends import copy_for_backend, copy_for_preprocess

    if job.backend_copy_hook:
        return copy_for_backend(job.backend, program, job.compile_specs)
    return copy_for_preprocess(program)


def call_preprocess(job: PreprocessJob) -> Tuple[PreprocessResult, float]:
    """``preprocess`` on a private copy of the job's program; the result and its seconds.

    Used in this process and in forked workers alike: a forked worker runs many
    partitions one after another, so it copies too, or a backend mutating a
    tensor in place would change what the worker's next partition sees.
    """
    start = time.perf_counter()
    # XNNPACK's passes loop deep in the stack: with room, no loop crosses a chunk
    result = with_stack_room(job.backend.preprocess, private_copy(job, job.program),
                             job.compile_specs)
    return result, time.perf_counter() - start
