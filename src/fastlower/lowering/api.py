"""The public API: ``to_backend`` with the reference's three overloads."""

from __future__ import annotations

from functools import singledispatch
from typing import Any, Callable, Dict, List, Tuple, TypeVar

from executorch.exir.backend.backend_api import MethodProgramsPartitionerSpec as _RefSpec
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import Partitioner
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch.export import ExportedProgram

from ..base import phases
from ..preprocess.backends import lower_one
from ..base.compat import check_versions
from . import lower_methods, lower_program
from ..report.document import LoweringReport
from ..report.registry import last_report
from .spec import MethodProgramsPartitionerSpec
from ..in_process.while_lowering import lowering_step
from ..in_process.stack_room import with_stack_room

T = TypeVar("T")


@singledispatch
def to_backend(args):
    """Delegate parts of an Edge program to backends; dispatches on the first argument.

    The partitioner overloads, and every backend ``preprocess`` of all three, run with
    room on the frame stack (:mod:`fastlower.in_process.stack_room`): their loops never cross a
    stack chunk, whatever the caller's depth.

    * ``to_backend(backend_id: str, program, compile_specs) -> LoweredBackendModule``
    * ``to_backend(program: ExportedProgram, partitioner) -> ExportedProgram``
    * ``to_backend(MethodProgramsPartitionerSpec) -> Dict[str, ExportedProgram]``
    """
    raise TypeError(f"to_backend() has no overload for {type(args).__name__}")


@to_backend.register
def _(backend_id: str, edge_program: ExportedProgram,
      compile_specs: List[CompileSpec]) -> LoweredBackendModule:
    if not isinstance(edge_program, ExportedProgram):
        raise TypeError(f"to_backend({backend_id!r}, ...) needs an ExportedProgram, "
                        f"got {type(edge_program).__name__}")
    check_versions()
    return lower_one(backend_id, edge_program, compile_specs)


@to_backend.register
def _(edge_program: ExportedProgram, partitioner_instance: Partitioner) -> ExportedProgram:
    return _partitioned(lower_program, edge_program, partitioner_instance)


def _lower_spec(spec) -> Dict[str, ExportedProgram]:
    return _partitioned(lower_methods, spec.method_to_edge_program, spec.method_to_partitioner)


def _partitioned(lower: Callable[..., T], *args: Any) -> T:
    """A partitioner overload's lowering: the versions checked, the edge stage (if any)
    ended and ``to_backend`` announced (:mod:`.phases`), run with room on the stack."""
    check_versions()
    phases.edge_stage_done()
    with phases.phase("to_backend"), lowering_step():
        return with_stack_room(lower, *args)


to_backend.register(MethodProgramsPartitionerSpec, _lower_spec)
to_backend.register(_RefSpec, _lower_spec)


def lower_with_report(*args: Any) -> Tuple[Any, LoweringReport]:
    """``to_backend(*args)`` and the report of that very call, as ``(result, report)``.

    Not for the ``to_backend(backend_id, program, compile_specs)`` overload, which
    makes no report.
    """
    if args and isinstance(args[0], str):
        raise TypeError("lower_with_report() takes the partitioner overloads of to_backend")
    result = to_backend(*args)
    report = last_report()
    if report is None:  # every partitioner overload publishes one
        raise RuntimeError("to_backend published no report for this lowering")
    return result, report
