"""Backend lookup and the one-partition lowering (``to_backend(backend_id, ...)``)."""

from __future__ import annotations

import copy
from contextlib import nullcontext
from typing import ContextManager, Dict, List, Optional, Type

from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch.export import ExportedProgram

from ..errors import BackendNotFoundError
from ..in_process.stack_room import with_stack_room


def known_backends() -> Dict[str, Type[BackendDetails]]:
    """Every ``BackendDetails`` subclass by name, over the whole subclass tree."""
    found: Dict[str, Type[BackendDetails]] = {}
    stack = list(BackendDetails.__subclasses__())
    while stack:
        cls = stack.pop(0)
        found.setdefault(cls.__name__, cls)
        stack.extend(cls.__subclasses__())
    return found


def find_backend(backend_id: str) -> Type[BackendDetails]:
    # direct subclasses first, as the reference does
    for cls in BackendDetails.__subclasses__():
        if cls.__name__ == backend_id:
            return cls
    backends = known_backends()
    if backend_id not in backends:
        raise BackendNotFoundError(backend_id, list(backends))
    return backends[backend_id]


def copy_for_preprocess(program: ExportedProgram) -> ExportedProgram:
    """A copy a backend may mutate, tensors included, as the reference's ``deepcopy``.

    Backends transform weights (packing, folding, quantising); one that does it in
    place (``add_``, ``copy_``, ``.data = ...``, ``set_``) must not reach the caller's
    program or another partition's tensors. The copy holds one partition's tensors
    and is dropped when its ``preprocess`` returns. (A forked worker gets the same
    isolation from copy-on-write pages.)
    """
    return copy.deepcopy(program)


def copy_for_backend(cls: Type[BackendDetails], program: ExportedProgram,
                     compile_specs: List[CompileSpec]) -> ExportedProgram:
    """The backend's own copy hook when it overrides it, else the storage-sharing copy."""
    hook = getattr(cls, "copy_exported_program_for_preprocess", None)
    base = getattr(BackendDetails, "copy_exported_program_for_preprocess", None)
    if hook is not None and getattr(hook, "__func__", hook) is not getattr(base, "__func__", base):
        return hook(program, compile_specs)
    return copy_for_preprocess(program)


def make_lowered_module(program: ExportedProgram, backend_id: str, result: PreprocessResult,
                        compile_specs: List[CompileSpec]) -> LoweredBackendModule:
    lowered = LoweredBackendModule(
        edge_program=program, backend_id=backend_id, processed_bytes=result.processed_bytes,
        compile_specs=compile_specs, named_data_store_output=result.data_store_output,
    )
    lowered.meta = {"debug_handle_map": result.debug_handle_map}
    if result._delegate_info_meta is not None:
        lowered.meta["_delegate_info_meta"] = result._delegate_info_meta
    return lowered


def lower_one(backend_id: str, program: ExportedProgram, compile_specs: List[CompileSpec],
              backend_timer: Optional[ContextManager] = None) -> LoweredBackendModule:
    """Preprocess a whole program with one backend (``backend_timer`` wraps ``preprocess``)."""
    cls = find_backend(backend_id)
    copied = copy_for_preprocess(program)
    with backend_timer or nullcontext():
        result = with_stack_room(cls.preprocess, copied, compile_specs)
    return make_lowered_module(program, backend_id, result, compile_specs)
