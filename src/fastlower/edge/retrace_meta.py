"""The node ``meta`` a retrace that changes no operator still rewrites, rewritten the same
way, so a skipped retrace leaves what the retrace would have left.

``make_fx`` (under ``run_decompositions``) records, for each ``call_function`` node it
traces:

* ``original_aten``: the operator overload it dispatched first for that node, which for
  an operator that is not decomposed is the node's own target (``DontPartitionTarget``
  and other operator-support checks read it, so it can change a partitioning);
* ``eager_input_vals``: the arguments' fake values, only for operators whose layout
  constraint is ``needs_exact_strides`` (and dropped for the others, since it is not
  one of the fields a retrace copies from the old node).

Nodes whose target is a plain callable (``getitem``, size arithmetic) keep the old
node's ``original_aten``, as the retrace copies it. A lifted parameter, buffer or
constant takes ``original_aten`` and ``torch_fn`` from its first reader as that node
was *before* the retrace (the node being replayed when the retrace reads the input;
measured: no other field of a lifted input changes); user inputs and unread
placeholders keep theirs. Not reproduced: ``seq_nr`` (autograd's
per-thread counter, different between two runs of the reference itself) and
``from_node``'s extra link per retrace (its oldest ancestor, the one debug handles are
derived from, is the same; see :mod:`.decompose`).
"""

from __future__ import annotations

import copy
from typing import Any, Set

import torch
from torch.fx import GraphModule

from .noop_retrace import graph_modules


_FROM_FIRST_READER = ("original_aten", "torch_fn")


def _eager_input_vals(node: torch.fx.Node) -> Any:
    from torch.fx.experimental.proxy_tensor import extract_val
    from torch._subclasses.fake_tensor import FakeTensor

    def value(arg: Any) -> Any:
        if not isinstance(arg, torch.fx.Node) or "val" not in arg.meta:
            return None
        val = arg.meta["val"]
        if isinstance(val, torch.Tensor) and not isinstance(val, FakeTensor):
            return None
        return extract_val(val)

    return torch.fx.node.map_aggregate((node.args, node.kwargs), value)


def _lifted_inputs_as_retraced(root: GraphModule, lifted: Set[str]) -> None:
    order = {node: index for index, node in enumerate(root.graph.nodes)}
    for node in root.graph.nodes:
        if node.op != "placeholder" or node.name not in lifted or not node.users:
            continue
        reader = min(node.users, key=order.__getitem__).meta
        for field in _FROM_FIRST_READER:
            if field in reader:
                node.meta[field] = copy.copy(reader[field])


def rewrite_as_retraced(root: GraphModule, lifted: Set[str]) -> None:
    """Sets each traced node's ``original_aten`` and ``eager_input_vals`` as a retrace of
    the unchanged program would; ``lifted``: the names of the placeholders that are
    parameters, buffers or constants (not user inputs)."""
    from torch.fx.experimental.proxy_tensor import _should_save_eager_input_vals

    _lifted_inputs_as_retraced(root, lifted)
    for module in graph_modules(root):
        for node in module.graph.nodes:
            if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                continue
            node.meta["original_aten"] = node.target
            if _should_save_eager_input_vals(node.target, (node.args, node.kwargs)):
                node.meta["eager_input_vals"] = _eager_input_vals(node)
            else:
                node.meta.pop("eager_input_vals", None)
