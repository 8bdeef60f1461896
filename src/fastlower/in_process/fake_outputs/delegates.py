"""A delegate's outputs read off its own program, not re-run on fake tensors, while
fastlower lowers.

ExecuTorch's ``ExportPass`` re-runs every node of a program on fake tensors to rebuild
its ``meta["val"]``; for a ``executorch_call_delegate`` node that means running the
delegate's whole original program (``lowered_module.original_module.module()``) again:
62% of ``to_executorch`` in ``export_llm``'s pipeline (``benchmarks/README.md``), as
``SpecPropPass`` and the other passes each do it for every delegate.

That run gives what the original program's own graph already records, when its inputs
are those the graph was traced with. So inside a ``fake_outputs.known_outputs`` block,
``ExportPass.call_delegate`` first compares the call's fake inputs with the original
program's user-input placeholders (``meta["val"]``: shapes and strides as symbolic
expressions, storage offset, dtype, device, layout, ``requires_grad``, the same fake
mode). When they agree it emits the node with the program's recorded user outputs, in
its output structure (``call_spec.out_spec``) and as the operator's autograd kernel
returns them (none requiring grad, or, when an input requires grad, detached aliases
that do), instead of running it. It runs ExecuTorch's code when they do not agree, or
when the run could differ from the record: a program whose graph holds a data-dependent
(unbacked) symbol (a run would make a new one), outputs other than user outputs or not
computed by the program, or a value that is not a fake tensor or a symbolic/plain int
(a real tensor input, for one), or when a recorded output carries a memo a later
operator left on it (torch gives an ``item()`` of the same fake tensor the same symbol,
of a run's new one a new symbol).

The patch on ``ExportPass.call_delegate`` (:data:`PATCH`) is bound by the first block
and kept until it is uninstalled; outside a block it runs ExecuTorch's method.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..scoped_patch import ScopedMethodPatch
from .compare import (FakeOutputsVerificationError, carried_state_in, difference, is_value,
                      outputs_difference)
from .emit import emit, runs_export_pass_fx
from .scope import Scope, current

__all__ = ["PATCH"]


# --- what a delegate's original program records ------------------------------------------

class _Record:
    """The fake values of an original program's user inputs and user outputs, and its
    output structure."""

    def __init__(self, inputs: List[Any], outputs: List[Any], out_spec: Any) -> None:
        self.inputs = inputs
        self.outputs = outputs
        self.out_spec = out_spec


def _has_unbacked(graph: Any) -> bool:
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    return any(free_unbacked_symbols(node.meta.get("val")) for node in graph.nodes)


def _record(lowered_module: Any) -> Optional[_Record]:
    """What ``lowered_module``'s original program records, or None when a fake run of it
    could give anything else (see the module)."""
    from torch.export.graph_signature import InputKind, OutputKind

    program = getattr(lowered_module, "original_module", None)
    out_spec = getattr(getattr(program, "call_spec", None), "out_spec", None)
    if program is None or out_spec is None:
        return None
    signature = program.graph_signature
    if any(spec.kind != OutputKind.USER_OUTPUT for spec in signature.output_specs):
        return None
    graph = program.graph
    if _has_unbacked(graph):
        return None
    by_name = {node.name: node for node in graph.nodes if node.op == "placeholder"}
    names = [spec.arg.name for spec in signature.input_specs
             if spec.kind == InputKind.USER_INPUT]
    if any(name not in by_name for name in names):
        return None
    inputs = [by_name[name].meta.get("val") for name in names]
    output = graph.output_node()
    returned = output.args[0] if output.args else ()
    if not isinstance(returned, (tuple, list)) or not all(
            getattr(item, "op", None) == "call_function" for item in returned):
        return None  # an input or constant returned as it is: the run returns that object
    outputs = [item.meta.get("val") for item in returned]
    if not all(is_value(value) for value in inputs + outputs):
        return None
    return _Record(inputs, outputs, out_spec)


def _known(scope: Scope, lowered_module: Any, args: Tuple[Any, ...]) -> Optional[Any]:
    """The call's outputs as the original program records them, or None: run it."""
    import torch
    import torch.utils._pytree as pytree
    from executorch.exir.pass_base import ProxyValue

    record = scope.by_object(scope.records, lowered_module, _record)
    if record is None or len(args) != len(record.inputs):
        return None
    given = [arg.data if isinstance(arg, ProxyValue) else arg for arg in args]
    for value, recorded in zip(given, record.inputs):
        if not is_value(value) or difference(recorded, value) is not None:
            return None
    if carried_state_in(record.outputs) is not None:
        return None  # a later item() of an output left its memo: a run gives new ones
    outputs = pytree.tree_unflatten(list(record.outputs), record.out_spec)
    graded = any(isinstance(value, torch.Tensor) and value.requires_grad for value in given)
    return _as_autograd_gives(outputs, graded)


def _as_autograd_gives(outputs: Any, graded: bool) -> Any:
    """The recorded outputs as the operator's autograd kernel returns them
    (``torch/_higher_order_ops/executorch_call_delegate.py``, ``call_delegate_autograd``):
    the program runs with autograd excluded, so none requires grad; when an input
    does (``graded``), each is a detached alias, floating and complex ones requiring
    grad."""
    import torch
    import torch.utils._pytree as pytree

    def as_run(var: Any) -> Any:
        if graded:
            var = var.detach()
            if torch.is_floating_point(var) or torch.is_complex(var):
                var.requires_grad = True
        elif var.requires_grad:  # recorded by a trace with autograd on
            var = var.detach()
        return var

    with torch._C._ExcludeDispatchKeyGuard(
            torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradCPU)):
        return pytree.tree_map_only(torch.Tensor, as_run, outputs)


def _reusing_call_delegate(original: Callable[..., Any]) -> Callable[..., Any]:
    def call_delegate(self: Any, lowered_module: Any, args: Tuple[Any, ...],
                      kwargs: Dict[str, Any], meta: Any) -> Any:
        scope = current()
        if scope is None:
            return original(self, lowered_module, args, kwargs, meta)
        known = None
        if not kwargs and runs_export_pass_fx(self):
            known = _known(scope, lowered_module, args)
        if known is None:
            scope.delegates_run += 1
            return original(self, lowered_module, args, kwargs, meta)
        scope.delegates_reused += 1
        if scope.mode == "verify":
            import torch.utils._pytree as pytree

            result = original(self, lowered_module, args, kwargs, meta)
            carried = carried_state_in(pytree.tree_leaves(known))
            found = outputs_difference(known, result.data) or (
                None if carried is None else f"the recorded outputs carry {carried}")
            if found is not None:
                raise FakeOutputsVerificationError(result.proxy.node.name, found)
            return result
        from executorch.exir.delegate import executorch_call_delegate

        return emit(self, "call_function", executorch_call_delegate,
                    (lowered_module,) + tuple(args), kwargs, meta, known)

    return functools.wraps(original)(call_delegate)


def _owner() -> Any:
    from executorch.exir.pass_base import ExportPass

    return ExportPass


PATCH = ScopedMethodPatch(_owner, "call_delegate", _reusing_call_delegate)
