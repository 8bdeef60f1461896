"""Objects kept as the name or settings that make them again, not pickled as they are:
operators (ATen, Edge, backend, higher-order, the edge stage's ``EDGE_DO_NOT_DECOMP``
twins) by qualified name, ExecuTorch's Edge verifier classes (made per call) by the
settings they were made with, and ExecuTorch's ``_ViewSpec`` with its guards (lambdas)
by guard name."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch

from ..errors import DamagedEntry, Uncacheable

def op_name(op: Any) -> Optional[Tuple[str, str]]:
    """``(kind, qualified name)`` of an operator; ``None`` for anything else."""
    from executorch.exir.dialects.backend._ops import BackendOpOverload
    from executorch.exir.dialects.edge._ops import EdgeOpOverload, EdgeOpOverloadPacket

    if isinstance(op, BackendOpOverload):  # (a subclass of EdgeOpOverload)
        return "backend", op.__name__
    if isinstance(op, EdgeOpOverload):
        return "edge", op.__name__
    if isinstance(op, EdgeOpOverloadPacket):
        return "edge_packet", op.__name__
    if isinstance(op, torch._ops.OpOverload):
        if op.namespace == _NO_DECOMP:
            return "no_decomp", str(_no_decomp_original(op))
        return "aten", str(op)
    if isinstance(op, torch._ops.OpOverloadPacket):
        return "packet", op._qualified_op_name.replace("::", ".")
    if isinstance(op, torch._ops.HigherOrderOperator):
        return "hop", op.name()
    return None


def find_op(kind: str, name: str) -> Any:
    """The operator :func:`op_name` named; :class:`DamagedEntry` when this process has none."""
    from executorch.exir.dialects._ops import ops as exir_ops

    root = {"edge": exir_ops.edge, "edge_packet": exir_ops.edge, "backend": exir_ops.backend,
            "aten": torch.ops, "packet": torch.ops}.get(kind)
    if kind == "hop":
        return getattr(torch.ops.higher_order, name)
    if kind == "no_decomp":
        return _no_decomp_twin(find_op("aten", name))
    if root is None:
        raise DamagedEntry(f"unknown operator kind {kind!r}")
    obj = root
    try:
        for part in name.split("."):
            obj = getattr(obj, part)
    except (AttributeError, RuntimeError) as exc:
        raise DamagedEntry(f"operator {name} ({kind}) is not defined in this process: "
                           f"{exc}") from exc
    return obj


_NO_DECOMP = "EDGE_DO_NOT_DECOMP"


def _no_decomp_original(op: Any) -> Any:
    """The ATen (or torchao ...) op whose ``EDGE_DO_NOT_DECOMP`` twin ``op`` is."""
    from executorch.exir.program import _program

    original = _program.transform_op_to_aten_op.get(str(op))
    if original is None:
        raise Uncacheable(f"operator {op} of the edge stage's no-decomposition namespace has "
                          "no known original")
    return original


def _no_decomp_twin(original: Any) -> Any:
    """The edge stage defines ``EDGE_DO_NOT_DECOMP::<op>`` twins of the ops it keeps (their
    schema and kernel); node ``meta`` may name one. A process that reads the entry never
    ran the edge stage: define the twin the same way."""
    from executorch.exir.program import _program

    _program._register_no_decomp_op(original)
    return _program.aten_op_to_transform_op[original]


def verifier_settings(cls: type) -> Tuple[bool, bool, List[Any], List[Any]]:
    """What an ``EXIREdgeDialectVerifier`` class was made with (see :func:`edge_verifier`)."""
    instance = cls()
    return (bool(instance.enable), bool(instance.use_dim_order),
            list(instance._core_aten_ops_exception_list), list(instance._preserve_ops))


def edge_verifier(enable: bool, use_dim_order: bool, exceptions: List[Any],
                   preserve: List[Any]) -> type:
    """An Edge verifier class made again from :func:`verifier_settings`."""
    from executorch.exir import EdgeCompileConfig
    from executorch.exir.verification.verifier import EXIREdgeDialectVerifier

    config = EdgeCompileConfig(_check_ir_validity=enable, _skip_dim_order=not use_dim_order)
    return EXIREdgeDialectVerifier(config, class_only=True,
                                   core_aten_ops_exception_list=list(exceptions),
                                   preserve_ops=list(preserve))


VIEW_SPEC_MODULE = "executorch.exir.passes.replace_view_copy_with_view_pass"
# ExecuTorch's _ViewSpec guards (lambdas made in its __init__), by name: what each reads
VIEW_GUARDS = {
    "is_sparse": lambda view: view.is_sparse,
    "layout": lambda view: view.layout,
    "shape_dynamism_init": lambda view: view.shape_dynamism,
    "shape_dynamism_eq_base": lambda view: view.shape_dynamism == view._base.shape_dynamism,
    "dtype": lambda view: view.dtype,
    "rank": lambda view: len(view.shape),
}


def view_spec(base: Any, state: Dict[str, Any], guards: List[Tuple[str, Any]]) -> Any:
    """ExecuTorch's ``_ViewSpec`` (a view's tensor spec sharing its base's memory fields),
    its fields as they were and its guards (lambdas in the original) made again."""
    from executorch.exir.passes.replace_view_copy_with_view_pass import _Guard, _ViewSpec

    spec = _ViewSpec.__new__(_ViewSpec)
    object.__setattr__(spec, "_base", base)
    for name, value in state.items():
        object.__setattr__(spec, name, value)
    object.__setattr__(spec, "_guards", [_Guard(name, VIEW_GUARDS[name], expected)
                                         for name, expected in guards])
    return spec
