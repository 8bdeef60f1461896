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

Symbolic-size reads (``sym_size.int`` ...) are remade by the retrace's runtime-assert
pass as the previous retrace made them, and keep their meta. A ``getitem`` is made while
its producer is replayed and copies the producer's fields, ``original_aten`` (the
producer's operator) included: after a retrace that decomposed ``split.Tensor`` into
``split_with_sizes``, the next gives the ``getitem`` s ``split_with_sizes``, not
``split.Tensor`` (its other copied fields must already be the producer's, or the retrace
is not skipped: :mod:`.noop_retrace`).

A parameter or buffer placeholder takes, as ``run_decompositions`` writes them
(``torch._export.utils``: ``_collect_param_buffer_metadata``, then
``_populate_param_buffer_metadata_to_new_gm``), the fields of ``torch.fx.proxy``'s
``_COPY_META_FIELDS`` (``original_aten``, ``torch_fn``, ``source_fn_stack``,
``from_node`` ...; not ``custom``, ``nn_module_stack``, ``stack_trace``) from its
readers in graph order, the last one winning (root ``call_function`` nodes that are not
higher-order operators), as they were *before* the retrace. Other placeholders keep
theirs.

``from_node`` gets the links a retrace adds (:mod:`.retrace_history`). Not reproduced:
``seq_nr`` (autograd's per-thread counter, different between two runs of the reference
itself).
"""

from __future__ import annotations

import operator
from typing import Any, List, Set

import torch
from torch.fx import GraphModule

from .noop_retrace import SELF_RETRACING, graph_modules, producer
from .retrace_history import add_retrace_links, relifted, unlifted

_NOT_FROM_READER = ("custom", "nn_module_stack", "stack_trace")


def lifted_names(program: Any) -> Set[str]:
    """The names of an ``ExportedProgram``'s placeholders that are parameters or buffers."""
    from torch.export.graph_signature import InputKind

    return {spec.arg.name for spec in program.graph_signature.input_specs
            if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER)}


def copied_fields() -> List[str]:
    """The fields a parameter or buffer placeholder takes from its readers."""
    from torch.fx.proxy import _COPY_META_FIELDS

    return [field for field in _COPY_META_FIELDS
            if field not in _NOT_FROM_READER and field != "from_node"]


def parameters_as_retraced(root: GraphModule, lifted: Set[str]) -> None:
    """A parameter's or buffer's copied fields and ``from_node`` from its readers, as they
    are before the retrace (so: before anything else is rewritten)."""
    fields = copied_fields()
    for node in root.graph.nodes:  # what a parameter no operator reads gets
        if node.op == "placeholder" and node.name in lifted:
            node.meta["from_node"] = relifted(node)
    for node in root.graph.nodes:  # graph order: a later reader overwrites
        if node.op != "call_function" or isinstance(node.target,
                                                     torch._ops.HigherOrderOperator):
            continue
        for arg in node._input_nodes:
            if arg.op == "placeholder" and arg.name in lifted:
                for field in fields:
                    if field in node.meta:
                        arg.meta[field] = node.meta[field]
                arg.meta["from_node"] = unlifted(node)


def eager_input_vals(node: torch.fx.Node) -> Any:
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx.experimental.proxy_tensor import extract_val

    def value(arg: Any) -> Any:
        if not isinstance(arg, torch.fx.Node) or "val" not in arg.meta:
            return None
        val = arg.meta["val"]
        if isinstance(val, torch.Tensor) and not isinstance(val, FakeTensor):
            return None
        return extract_val(val)

    return torch.fx.node.map_aggregate((node.args, node.kwargs), value)


def _eager_input_vals_before_val(meta: dict) -> None:
    """Key order as a retrace makes it: ``eager_input_vals`` is set when the node is
    created, before ``val`` (the lowering cache compares key order too)."""
    if "eager_input_vals" not in meta or "val" not in meta:
        return
    items = list(meta.items())
    meta.clear()
    for key, value in items:
        if key == "val":
            meta["eager_input_vals"] = dict(items)["eager_input_vals"]
        if key != "eager_input_vals":
            meta[key] = value


def rewrite_as_retraced(root: GraphModule, lifted: Set[str]) -> None:
    """Sets the meta a retrace of the unchanged program would set; ``lifted``: the names
    of the placeholders that are parameters or buffers."""
    from torch.fx.experimental.proxy_tensor import _should_save_eager_input_vals

    parameters_as_retraced(root, lifted)  # first: it reads the readers' old meta
    add_retrace_links(root)
    for module in graph_modules(root):
        for node in module.graph.nodes:
            if node.op != "call_function":
                continue
            if isinstance(node.target, torch._ops.OpOverload) and \
                    node.target not in SELF_RETRACING:  # those are remade as they were
                node.meta["original_aten"] = node.target
                if _should_save_eager_input_vals(node.target, (node.args, node.kwargs)):
                    node.meta["eager_input_vals"] = eager_input_vals(node)
                else:
                    node.meta.pop("eager_input_vals", None)
            elif node.target is operator.getitem:  # its producer, earlier, is rewritten
                source = producer(node)
                if "original_aten" in source.meta:
                    node.meta["original_aten"] = source.meta["original_aten"]
            _eager_input_vals_before_val(node.meta)
