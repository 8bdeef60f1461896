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
"""

from __future__ import annotations

import copy
import os
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from torch.export import ExportedProgram
import torch.export.exported_program as _exported_program
from torch.fx import GraphModule
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.fx.graph_module import _get_attr

VALIDATE_ALL_ENV = "FASTLOWER_VALIDATE_ALL"


def validate_all() -> bool:
    return os.environ.get(VALIDATE_ALL_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def _skip_validation() -> None:
    return None


_FACTORY_LOCK = threading.RLock()


@contextmanager
def _lazy_program_modules(lazy: bool) -> Iterator[None]:
    """Inside the block ``ExportedProgram.__init__`` makes a ``_LazyGraphModule``.

    The constructor calls the module-level ``_create_graph_module_for_export``;
    it is swapped for the block only, under a lock so concurrent lowerings
    cannot restore each other's swap.
    """
    if not lazy:
        yield
        return
    with _FACTORY_LOCK:
        eager = _exported_program._create_graph_module_for_export
        _exported_program._create_graph_module_for_export = _LazyGraphModule
        try:
            yield
        finally:
            _exported_program._create_graph_module_for_export = eager


def unvalidated_program(*, lazy: bool = False, **kwargs: Any) -> ExportedProgram:
    """``ExportedProgram(**kwargs)`` built by its own constructor, minus the verifier run.

    The instance attribute ``validate`` shadows the method for the duration of
    ``__init__`` only, so the object is a plain ``ExportedProgram`` afterwards
    (``_validate()`` works on it as on any other).

    ``lazy``: the program's ``GraphModule`` generates its Python code on first
    use (``torch.fx``'s ``_LazyGraphModule``, as ``torch.compile`` uses), not at
    construction; most partition programs are only read by their backend.
    Copies made with ``copy.deepcopy`` stay lazy.
    """
    with _lazy_program_modules(lazy):
        if validate_all():
            return ExportedProgram(**kwargs)
        program = ExportedProgram.__new__(ExportedProgram)
        program.validate = _skip_validation
        try:
            ExportedProgram.__init__(program, **kwargs)
        finally:
            del program.validate
        return program


def lazy_module_copy(gm: GraphModule) -> GraphModule:
    """What ``copy.deepcopy(gm)`` hands an ``ExportedProgram``, without generating code.

    A deep copy of the graph (node meta dicts copied one level, as
    ``Graph.__deepcopy__`` does), of every attribute the graph reads (nested
    control-flow bodies, lowered modules), of ``meta`` and ``training``: the
    parts ``ExportedProgram.__init__`` takes from its root.
    """
    memo: dict = {}
    graph = copy.deepcopy(gm.graph, memo)
    attrs = {n.target: copy.deepcopy(_get_attr(gm, n.target), memo) for n in graph.nodes
             if n.op in ("get_attr", "call_module")}
    copied = _LazyGraphModule(attrs, graph)
    copied.meta = copy.deepcopy(gm.meta, memo)
    copied.training = gm.training
    return copied
