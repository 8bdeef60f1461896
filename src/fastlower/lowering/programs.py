"""``ExportedProgram`` construction without a verifier run per program.

``ExportedProgram.__init__`` ends with ``validate()``; for an Edge program that
runs every op on fake tensors (ExecuTorch's arg-dtype check), about a
millisecond per node. The reference pays it for the partitioner's copy, for
every partition and for the whole graph after every partition. fastlower
validates the input once (as the reference does first) and the result once;
the programs in between are made of nodes of the validated input, so their
verifier run could not fail where the input's passed.

``FASTLOWER_VALIDATE_ALL=1`` restores the verifier run on every program
(tests use it to check that claim).

Programs are assembled as ``ExportedProgram.__init__`` assembles them (see
``_construct``), so fastlower can give the lazy ``GraphModule`` without swapping
torch's module-level factory, which another thread's ``torch.export`` would see.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List, Optional

import torch
from torch._export.verifier import Verifier
from torch.export import ExportedProgram
from torch.export.exported_program import (
    _common_getitem_elimination_pass, _convert_guards_to_code, _create_graph_module_for_export,
)
from torch.fx import GraphModule
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.fx.graph_module import _get_attr

from .. import settings

VALIDATE_ALL_ENV = settings.VALIDATE_ALL


def validate_all() -> bool:
    """Whether every program built runs its verifier (``FASTLOWER_VALIDATE_ALL``)."""
    return settings.validate_all()


def _construct(make_module: Callable[[Any, torch.fx.Graph], GraphModule], validate: bool, *,
               root: Any, graph: torch.fx.Graph, graph_signature: Any, state_dict: Dict[str, Any],
               range_constraints: Any, module_call_graph: List[Any],
               example_inputs: Any = None, constants: Optional[Dict[str, Any]] = None,
               verifiers: Optional[List[type]] = None) -> ExportedProgram:
    """``ExportedProgram.__init__`` (torch 2.13) step by step, its module made by
    ``make_module`` and its verifier run only if ``validate``.

    Nothing of torch's is swapped: a ``torch.export`` running in another thread
    meanwhile builds its program exactly as it would alone.
    ``tests/test_programs.py`` checks that the result has the attributes, types and
    code of a program made by the constructor itself.
    """
    graph._codegen = torch.fx.graph.CodeGen()  # as __init__: a flat graph, no pytree codegen
    module = make_module(root, graph)
    if isinstance(root, torch.fx.GraphModule):
        module.meta.update(root.meta)
    _common_getitem_elimination_pass(module, graph_signature, module_call_graph)
    if module_call_graph is None:
        raise ValueError("module_call_graph must not be None")
    verifiers = verifiers or [Verifier]
    if not all(isinstance(v, type) and issubclass(v, Verifier) for v in verifiers):
        raise TypeError(f"all verifiers must be subclasses of Verifier, got {verifiers}")
    program = ExportedProgram.__new__(ExportedProgram)
    program._graph_module = module
    program._graph_signature = graph_signature
    program._state_dict = state_dict
    program._range_constraints = range_constraints
    program._module_call_graph = module_call_graph
    program._example_inputs = example_inputs
    program._constants = constants or {}
    program._verifiers = verifiers
    if validate:
        program.validate()
    program._guards_code = _convert_guards_to_code(module)
    return program


def unvalidated_program(*, lazy: bool = False, **kwargs: Any) -> ExportedProgram:
    """``ExportedProgram(**kwargs)`` minus the verifier run (unless ``FASTLOWER_VALIDATE_ALL``).

    The result is a plain ``ExportedProgram`` (``_validate()`` works on it as on any
    other).

    ``lazy``: the program's ``GraphModule`` generates its Python code on first
    use (``torch.fx``'s ``_LazyGraphModule``, as ``torch.compile`` uses), not at
    construction; most partition programs are only read by their backend.
    Copies made with ``copy.deepcopy`` stay lazy.
    """
    make_module = _LazyGraphModule if lazy else _create_graph_module_for_export
    return _construct(make_module, validate_all(), **kwargs)


def lazy_module_copy(gm: GraphModule) -> GraphModule:
    """What ``copy.deepcopy(gm)`` hands an ``ExportedProgram``, without generating code.

    A deep copy of the graph (node meta dicts copied one level, as
    ``Graph.__deepcopy__`` does), of every attribute the graph reads (nested
    control-flow bodies, lowered modules), of ``meta`` and ``training``: the
    parts ``ExportedProgram.__init__`` takes from its root.
    """
    memo: Dict[int, Any] = {}
    graph = copy.deepcopy(gm.graph, memo)
    attrs = {n.target: copy.deepcopy(_get_attr(gm, n.target), memo) for n in graph.nodes
             if n.op in ("get_attr", "call_module")}
    copied = _LazyGraphModule(attrs, graph)
    copied.meta = copy.deepcopy(gm.meta, memo)
    copied.training = gm.training
    return copied
