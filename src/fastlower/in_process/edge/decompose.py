"""ExecuTorch's ``_gen_edge_manager_for_partitioners`` with the retraces that change
nothing skipped.

The reference (``executorch/exir/program/_program.py``, ExecuTorch 1.5.1) retraces the
whole program up to ``1 + 2 * partitioners`` times: ``run_decompositions({})`` to
functionalize, then, for each partitioner whose ``ops_to_not_decompose`` returns a
check function (XNNPACK's do), ``run_decompositions(table)`` and, around the
``EDGE_DO_NOT_DECOMP`` swap, ``run_decompositions(default table)``. On a program
already decomposed most of them change nothing. This is the same function, step for
step (the reference's helpers, called in its order, so partitioners see the same
calls), except that each of those retraces first asks :mod:`.noop_retrace` whether it
provably changes nothing, then :mod:`.repeated_retrace` whether it repeats an earlier
retrace of the stage that did, and is skipped when one of them says so; when neither
proves it, it runs, as in the reference. The functionalizing retrace always runs.

:data:`SKIPPED` counts skipped and run retraces per thread, for reports and tests.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import defaultdict
from typing import Any, Dict, List, Optional

from torch.export import ExportedProgram

from ..heap_freeze import full_collections_paused
from ..shape_env_state import shape_env_state, state_difference
from .noop_retrace import graph_modules, why_not_skipped
from .repeated_retrace import Repeat, RetraceMemory, shape_env_of
from .retrace_meta import lifted_names, rewrite_as_retraced
from .verify import EdgeStageVerificationError, program_difference

log = logging.getLogger("fastlower.in_process.edge")


class RetraceCounts(threading.local):
    """Retraces skipped and run by this thread's last edge stage."""

    def __init__(self) -> None:
        self.skipped = 0
        self.repeats = 0  # of the skipped, those that repeat an earlier retrace
        self.run = 0
        self.reasons: List[str] = []  # why each retrace that ran was not skipped


SKIPPED = RetraceCounts()


def _copy_keeping_names(program: ExportedProgram) -> ExportedProgram:
    """``copy.deepcopy(program)`` with the original's node names and order of users.
    Copying a graph names its nodes anew, and a name that shadows a Python builtin comes
    back changed: an ``nn.Sequential``'s argument ``input`` as ``input_1``, which the
    retrace keeps; and it lists a node's users in graph order, where the original lists
    them as they were made (a runtime-assert pass puts a size read it makes late first)."""
    copied = copy.deepcopy(program)
    for module, original in zip(graph_modules(copied.graph_module),
                                graph_modules(program.graph_module)):
        mapping = dict(zip(original.graph.nodes, module.graph.nodes))
        for before, node in mapping.items():
            node.name = before.name
            users = {mapping[user]: None for user in before.users}
            node.users.clear()
            node.users.update(users)
    return copied


def _retrace(program: ExportedProgram, table: Dict[Any, Any], verify: bool,
             memory: RetraceMemory) -> ExportedProgram:
    """``program.run_decompositions(table)``, skipped when it provably changes nothing
    (:mod:`.noop_retrace`) or repeats an earlier retrace of this stage
    (:mod:`.repeated_retrace`); with ``verify`` it runs anyway and is compared with the
    skip (the retrace's result goes on, so the reference's path is followed exactly)."""
    why = why_not_skipped(program, table)
    repeat = memory.repeat_of(program, table) if why is not None else None
    if why is not None and repeat is None:
        log.debug("edge stage retrace runs: %s", why)
        SKIPPED.run += 1
        SKIPPED.reasons.append(why)
        return memory.run(program, table)
    SKIPPED.skipped += 1
    SKIPPED.repeats += repeat is not None
    if not verify:
        _as_retraced(program, repeat)
        return program
    skipped = _copy_keeping_names(program)  # before the retrace, which may touch its input
    env = shape_env_of(program)
    before = shape_env_state(env) if env is not None else None
    retraced = program.run_decompositions(table)
    _as_retraced(skipped, None if repeat is None else Repeat(repeat.record, None))
    difference = program_difference(retraced, skipped)
    if difference is None and repeat is not None and before is not None:
        wrong = state_difference(repeat.expected_state(before), shape_env_state(env))
        if wrong:
            difference = f"in the shape environment's {', '.join(sorted(wrong))}"
    if difference is not None:
        raise EdgeStageVerificationError(difference)
    return retraced


def _as_retraced(program: ExportedProgram, repeat: Optional[Repeat]) -> None:
    """What the skipped retrace would still have written."""
    if repeat is None:
        rewrite_as_retraced(program.graph_module, lifted_names(program))
        return
    repeat.write(program)
    repeat.replay()


def _decompose_for(name: str, program: ExportedProgram, partitioners: List[Any],
                   config: Any, verify: bool) -> tuple:
    """The reference's loop body for one method: the decomposed program and the ops kept."""
    from executorch.exir.program import _program as et

    final_ops_to_preserve: set = set()
    memory = RetraceMemory()
    if not partitioners:
        table = et._default_decomposition_table()
        for op in config.preserve_ops:
            table.pop(op, None)
        program = program.run_decompositions(table)
    for partitioner in partitioners:
        no_decomp, _ = partitioner.ops_to_not_decompose(program)
        if et._can_skip_using_EDGE_DO_NOT_DECOMP(partitioner, program):
            table = et._default_decomposition_table()
            needing_preservation = [op for op in no_decomp if table.pop(op, None) is not None]
            if et.contains_any_call_fn_target_op(program.graph_module, table):
                program = program.run_decompositions(table)
            final_ops_to_preserve.update(needing_preservation)
            continue
        no_decomp = et._remove_invalid_ops_for_not_decompose(no_decomp)
        table = et._default_decomposition_table()
        for op in no_decomp:
            table.pop(op, None)
        program = _retrace(program, table, verify, memory)
        preserved = et._replace_aten_ops_with_transformed_ops(
            name, program, {name: [partitioner]}) or []
        final_ops_to_preserve.update(preserved)
        program = _retrace(program, et._default_decomposition_table(), verify, memory)
        et._restore_transformed_ops_to_aten_ops(program)
    return program, final_ops_to_preserve


def gen_edge_manager_for_partitioners(
    partitioner: Dict[str, List[Any]],
    aten_programs: Dict[str, ExportedProgram],
    config: Any,
    constant_methods: Optional[Dict[str, Any]],
    generate_etrecord: Optional[bool] = False,
    verify: bool = False,
) -> Any:
    """The reference's ``_gen_edge_manager_for_partitioners`` (same arguments, same
    result), with the retraces that provably change nothing skipped (``verify``: run
    and compared with the skip, see :func:`_retrace`)."""
    from executorch.exir.program import _program as et

    SKIPPED.skipped = SKIPPED.repeats = SKIPPED.run = 0
    SKIPPED.reasons = []
    with full_collections_paused():
        manager = _edge_manager(partitioner, aten_programs, config, constant_methods, verify)
    if generate_etrecord:
        etrecord = et._create_empty_etrecord()
        etrecord.add_exported_program(aten_programs)
        etrecord.add_edge_dialect_program(copy.deepcopy(manager))
        manager._etrecord = etrecord
    return manager


def _edge_manager(partitioner: Dict[str, List[Any]], aten_programs: Dict[str, ExportedProgram],
                  config: Any, constant_methods: Optional[Dict[str, Any]],
                  verify: bool) -> Any:
    """The reference's steps up to its ``EdgeProgramManager`` (ETRecord left out)."""
    from executorch.exir.program import _program as et

    kept_by_program: Dict[str, list] = defaultdict(list)
    edge_programs: Dict[str, ExportedProgram] = {}
    for name, program in aten_programs.items():
        partitioners = partitioner.get(name, [])
        program = et._apply_pre_decomposition_transforms(program, partitioners)
        program = program.run_decompositions({})  # functionalize: always
        if partitioner is not None:
            program, kept = _decompose_for(name, program, partitioners, config, verify)
            kept_by_program[name].extend(kept)
        edge_programs[name] = et._generate_edge_program(
            config, program, preserve_ops=kept_by_program.get(name, []))
    all_kept = list(set().union(*kept_by_program.values()))
    config._core_aten_ops_exception_list = list(
        set(config._core_aten_ops_exception_list) | set(all_kept))
    return et.EdgeProgramManager(edge_programs, constant_methods, config, all_kept)
