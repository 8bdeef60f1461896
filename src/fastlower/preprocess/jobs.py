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


# constant bytes that cost XNNPACK about what one node costs: ~40 ms a node for its passes
# and serialization, ~3.3 ms a MB to pack and hash weights (Llama 3.2 1B's shape, 2 workers:
# a 7-node linear of 4 MB 0.29 s, the 7-node 128256 x 2048 output projection 1.12 s)
BYTES_PER_NODE = 8 << 20


def estimated_cost(job: PreprocessJob) -> Tuple[float, int, int]:
    """How long the job's preprocess will take, roughly, as a sortable triple: node-
    equivalents (nodes, plus constant bytes at :data:`BYTES_PER_NODE`), then nodes, then
    the bytes of its constants.

    Nodes are what a backend's passes walk: in ``export_llm``'s stories110M export
    (``benchmarks/README.md``) XNNPACK took 3.5-4.3 s on each 21-node partition (three
    quantized linears) and ~1 s on each 7-node one, its 27 MiB output projection included.
    At Llama 3.2 1B's width the bytes weigh as much: its 128256 x 2048 output projection
    is the longest partition, and started last it left one worker running alone.
    """
    program = job.program
    constant_bytes = 0
    for value in (*program.state_dict.values(), *program.constants.values()):
        nbytes = getattr(value, "nbytes", None)
        if isinstance(nbytes, int):
            constant_bytes += nbytes
    nodes = len(program.graph.nodes)
    return nodes + constant_bytes / BYTES_PER_NODE, nodes, constant_bytes


def longest_first(jobs: Sequence[PreprocessJob]) -> List[int]:
    """Positions of ``jobs`` in the order a pool should start them: the costliest first.

    A pool takes jobs in the order they are submitted; started costliest first, the
    last jobs to run are short ones and the workers finish close together (longest
    processing time first). Ties keep graph order. Results are still handed back by
    position.
    """
    costs = [estimated_cost(job) for job in jobs]
    return sorted(range(len(jobs)), key=lambda position: (
        tuple(-part for part in costs[position]), position))


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
