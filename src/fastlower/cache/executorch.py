"""``EdgeProgramManager.to_executorch`` behind the cache: the second half of the lowering window.

On a warm re-export ``to_executorch`` (ExecuTorch's memory planning, emission and
flatbuffer serialization) is most of what is left once
``to_edge_transform_and_lower`` hits: ~10% of the reference's window at the tiny
``export_llm`` config, more at larger ones. :func:`to_executorch` has the
reference method's signature and docstring (bind it on ``EdgeProgramManager``).

**The key** is content, whatever made the manager (a cache hit or not): the
manager's programs in the lowering cache's canonical form (:mod:`.compare`: every
node, ``meta``, delegate and tensor by content), its ``constant_methods``,
``compile_config`` and named data, the ``ExecutorchBackendConfig`` in canonical
form (its passes, memory planning pass and its settings, alignments ...), and
the versions. Paths in node ``meta`` are keyed relative to base directories as in
the lowering key (:mod:`.paths`), unless the config's ``emit_stacktrace`` puts the
stack traces in the ``.pte``. A manager whose programs a pass rewrote in place
since it was made simply has another key.

**A hit** returns an ``ExecutorchProgramManager`` built from the entry: the same
``.pte`` bytes (``buffer``, ``write_to_file``, ``save``), the same ``.ptd`` data
(``write_tensor_data_to_file``, ``data_files``), the emitter's output
(``executorch_program``, ``debug_handle_map``, ``delegate_map``,
``instruction_id_to_num_outs_map``, ``export_llm``'s
``_emitter_output.program.execution_plan[0].non_const_buffer_sizes``). The
execution programs (``exported_program()``) are not stored: they are made again
when first read (:mod:`.execution`). What a hit does not do, unlike the
reference: it leaves the ``EdgeProgramManager``'s programs as they were (the
reference rewrites them in place), and it does not run the config's memory
planning pass object (its ``run_multimethod`` state, its
``enable_non_cpu_memory_planning`` attribute are not touched) until the execution
programs are read. A manager with an ETRecord, or a config holding a callable that
has no canonical form, is not cached.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, Optional

from executorch.exir._serialize._cord import Cord
from executorch.exir.capture._config import ExecutorchBackendConfig
from executorch.exir.program._program import EdgeProgramManager, ExecutorchProgramManager

from ..preprocess.keys import process_settings, versions
from . import access, pte_pieces
from .errors import Uncacheable
from .execution import LazyExecutionPrograms
from .key import ENTRY_FORMAT, ProgramCanonical, fastlower_source, operators_text
from .paths import PathMap, current
from .configuration import LoweringCacheSettings, resolve
from .store import LoweringStore

from ..in_process import dispatch as patch
from ..base import phases
from ..in_process.while_lowering import lowering_step
from ..in_process.stack_room import stack_room

log = logging.getLogger("fastlower.cache")



def reference() -> Any:
    """The reference ``EdgeProgramManager.to_executorch`` (as imported before any patching),
    run with room on the stack (``stack_room``: its passes and emitter loop deep in it)."""
    return stack_room(patch.reference_of("to_executorch"))


def executorch_key(manager: EdgeProgramManager, config: Optional[ExecutorchBackendConfig]) -> str:
    """The key of ``manager.to_executorch(config)``; :class:`Uncacheable` if it has none."""
    if getattr(manager, "_etrecord", None) is not None:
        raise Uncacheable("the manager carries an ETRecord, which to_executorch extends")
    config = config or ExecutorchBackendConfig()
    # meta paths relative to the bases (.paths), unless the .pte is to hold stack traces
    canonical = ProgramCanonical(paths=None if config.emit_stacktrace else PathMap(current()))
    canonical.write(f"fastlower-executorch-cache:{ENTRY_FORMAT}")
    canonical.write(f"versions:{versions()};fastlower-source={fastlower_source()};"
                    f"{process_settings()}")
    canonical.write(f"methods:{list(manager._edge_programs)}")
    for name, program in manager._edge_programs.items():
        canonical.where = f"method {name}"
        canonical.write(f"method:{name}")
        canonical.program(program)
    canonical.where = ""
    canonical.write(f"operators:{operators_text(manager._edge_programs.values())}")
    objects = canonical.objects
    canonical.write(f"config_methods:{objects.text(manager._config_methods, 'constant_methods')}")
    canonical.write(f"compile_config:{objects.text(manager.compile_config, 'compile_config')}")
    canonical.write("named_data:" + canonical.value(
        manager._named_data_store.get_named_data_store_output()))
    planners = config.memory_planning_pass
    for planner in planners.values() if isinstance(planners, dict) else [planners]:
        if hasattr(planner, "enable_non_cpu_memory_planning"):
            # to_executorch sets it from the config before the pass runs
            objects.overrides[id(planner)] = {
                "enable_non_cpu_memory_planning": config.enable_non_cpu_memory_planning}
    canonical.write(f"config:{objects.text(config, 'config')}")
    return "executorch:" + canonical.hasher.hexdigest()


def _reference(manager: EdgeProgramManager, config: Optional[ExecutorchBackendConfig]) -> Any:
    """ExecuTorch's own ``to_executorch``, announced as a phase (:mod:`fastlower.base.phases`)."""
    with phases.phase("to_executorch"), lowering_step():
        return reference()(manager, config)


def to_executorch(  # noqa (FLAKE8) C901
    self: EdgeProgramManager,
    config: Optional[ExecutorchBackendConfig] = None,
) -> "ExecutorchProgramManager":
    """
    Transforms the program to the ExecuTorch backend.

    Args:
        config: An optional argument used to provide greater control over
            the transformation to the ExecuTorch backend.

    Returns:
        ExecutorchProgramManager: A manager representing the state of the EdgeProgramManager
        after it has been transformed to the ExecuTorch backend.
    """
    settings = resolve()
    if settings.directory is None:
        return _reference(self, config)
    start = time.perf_counter()
    try:
        key = executorch_key(self, config)
    except Uncacheable as why:
        log.debug("to_executorch not cached: %s", why)
        return _reference(self, config)
    key_seconds = time.perf_counter() - start
    store = access.open_store(settings)
    if store is None:
        return _reference(self, config)
    try:
        found = access.lookup(store, key)
        if found is not None and not settings.verify:
            result = _manager(self, config, found[1], key)
            log.debug("to_executorch served from the cache (key %.3fs, load %.3fs)", key_seconds,
                      time.perf_counter() - start - key_seconds)
            return result
        result = _reference(self, config)
        if found is not None:
            difference = _difference(_payload(result), found[1])
            if difference is not None:
                from .errors import LoweringCacheVerificationError

                raise LoweringCacheVerificationError(difference, key, str(settings.directory))
            return result
        if not store.read_only:
            _store_soon(store, settings, key, result)
        return result
    finally:
        store.close()


def _store_soon(store: LoweringStore, settings: LoweringCacheSettings, key: str,
                result: ExecutorchProgramManager) -> None:
    """Stores ``result``'s payload under ``key``, in a forked child when it is large
    (:mod:`.detached`). The payload (the ``.pte``'s pieces, :mod:`.pte_pieces`) is made by whoever
    stores it: a child's copy never adds to the caller's memory."""
    size = len(result._pte_data) + sum(len(data) for data in (result._tensor_data or {}).values())

    def write(target: LoweringStore) -> None:
        payload = _payload(result)
        access.store_checked(target, key, {"created": time.time()}, payload,
                             lambda back: _difference(payload, back))

    access.store_soon(store, settings, key, size, write)


def _payload(result: ExecutorchProgramManager) -> Dict[str, Any]:
    # the execution programs are made again when read (see .execution)
    # the .pte as its pieces: the emitter's constants among them, each kept once (.pte_pieces)
    return {"pte": pte_pieces.pieces(result._pte_data),
            "tensor_data": {name: bytes(cord)
                            for name, cord in (result._tensor_data or {}).items()},
            "emitter": result._emitter_output}


def _difference(a: Dict[str, Any], b: Dict[str, Any]) -> Optional[str]:
    if not pte_pieces.same(a["pte"], b["pte"]):
        return (f"in the .pte bytes ({pte_pieces.size(a['pte'])} vs {pte_pieces.size(b['pte'])} "
                "bytes)")
    if a["tensor_data"] != b["tensor_data"]:
        return "in the .ptd data"
    if ProgramCanonical().value(a["emitter"]) != ProgramCanonical().value(b["emitter"]):
        return "in the emitter's output (the program before serialization, its debug maps)"
    return None


def _manager(edge: EdgeProgramManager, config: Optional[ExecutorchBackendConfig],
             payload: Dict[str, Any], key: str) -> ExecutorchProgramManager:
    """The ``ExecutorchProgramManager`` the reference's constructor would have made."""
    from executorch.extension.flat_tensor.serialize.serialize import (
        FlatTensorConfig, FlatTensorSerializer,
    )

    manager = ExecutorchProgramManager.__new__(ExecutorchProgramManager)
    manager._execution_programs = LazyExecutionPrograms(
        edge, config, key, payload["pte"], executorch_key, reference())
    config = config or ExecutorchBackendConfig()
    manager._config_methods = edge._config_methods
    manager._named_data = edge._named_data_store.get_named_data_store_output()
    manager._emitter_output = payload["emitter"]
    manager._data_serializer = FlatTensorSerializer(
        FlatTensorConfig(segment_alignment=config.segment_alignment))
    manager._pte_data = pte_pieces.cord(payload["pte"])
    manager._tensor_data = {name: Cord(data) for name, data in payload["tensor_data"].items()}
    manager._buffer = None
    manager._etrecord = None
    return manager
