"""Which operators' fake dispatch the memo takes: those whose kernel is one of torchao's
quantization operators.

That is torchao's operators themselves (:func:`..fake_outputs.quant_ops.remembered`) and
ExecuTorch's ``EDGE_DO_NOT_DECOMP`` stand-ins for them: before a partitioner's second
retrace, ``_replace_aten_ops_with_transformed_ops`` points the nodes of operators it must
not decompose at ``EDGE_DO_NOT_DECOMP::<name>``, an operator ``_register_no_decomp_op``
defines with the original's schema and the original itself as its only kernel
(``CompositeExplicitAutograd``), and records in ``transform_op_to_aten_op``. Outside
torch's namespaces, torch's fake-tensor cache never answers them ("non-builtin"); their
fake dispatch runs that kernel, i.e. torchao's decomposition, on meta tensors: the same
function of the inputs' metadata and the shape environment as the original's, so the
same premise. Taken only while that is so: the stand-in has no kernel of its own for
fake tensors (no ``Meta`` kernel, no registered fake kernel) that would run instead.
Any other ``EDGE_DO_NOT_DECOMP`` operator (``linear``...) is not taken.
"""

from __future__ import annotations

import sys
from typing import Any

from ..fake_outputs.quant_ops import remembered

__all__ = ["runs_torchao_quant_op"]

NO_DECOMP_NAMESPACE = "EDGE_DO_NOT_DECOMP"


def _stands_for(target: Any) -> Any:
    """The operator an ``EDGE_DO_NOT_DECOMP`` operator stands for (ExecuTorch's own
    record of what it registered as its kernel), or None."""
    if getattr(target, "namespace", None) != NO_DECOMP_NAMESPACE:
        return None
    program = sys.modules.get("executorch.exir.program._program")
    if program is None:  # nothing registered one yet
        return None
    table = getattr(program, "transform_op_to_aten_op", None)
    return table.get(str(target)) if isinstance(table, dict) else None


def _runs_its_composite_kernel(target: Any) -> bool:
    """Whether fake dispatch of ``target`` reaches its ``CompositeExplicitAutograd``
    kernel (no ``Meta`` kernel and no registered fake kernel before it). torch's private
    registries are read: where they are not as this torch has them, not taken."""
    import torch

    try:
        name = target.name()
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        return bool(has(name, torch._C.DispatchKey.CompositeExplicitAutograd)
                    and not has(name, torch._C.DispatchKey.Meta)
                    and torch._library.simple_registry.singleton.find(name).fake_impl.kernel
                    is None)
    except (AttributeError, RuntimeError, TypeError):
        return False


def runs_torchao_quant_op(target: Any) -> bool:
    """Whether ``target``'s fake dispatch is torchao's quantization operator's: it is
    one, or ExecuTorch's ``EDGE_DO_NOT_DECOMP`` stand-in for one."""
    if remembered(target):
        return True
    original = _stands_for(target)
    return (original is not None and original is not target and remembered(original)
            and _runs_its_composite_kernel(target))
