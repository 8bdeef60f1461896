"""Whether ``ExportedProgram.run_decompositions(table)`` provably changes nothing.

A retrace of a program that a previous ``run_decompositions`` already produced (so
functional, dead-code free, with canonical names) gives the same program back when
none of its operators would be decomposed. That holds when, in the root graph and
every control-flow subgraph, every ``call_function`` target is

* an ``OpOverload`` not in ``table`` (an Edge op counts as the ATen op it wraps, the
  key decomposition tables use; ExecuTorch's own ``contains_any_call_fn_target_op``
  skip reads it the same way), and not a CompositeImplicitAutograd op that
  ``torch.export`` would decompose whatever the table (one it cannot preserve), or
* a plain Python callable of the graph's own arithmetic (``operator.getitem``,
  ``operator.mul`` ... on sizes), which a retrace records as it is.

A retrace also remakes each node's ``meta``: a traced node keeps the fields the tracer
copies (``torch.fx.proxy._COPY_META_FIELDS``, ``stack_trace``) and gets ``val``,
``tensor_meta``, ``seq_nr``, ``original_aten`` and ``eager_input_vals`` anew; a
``getitem`` is made while its producer is replayed and copies the *producer's* fields.
So a node holding another key (the retrace drops it), or a ``getitem`` whose copied
fields are not its producer's (the retrace overwrites them), is not proven either;
:mod:`.retrace_meta` rewrites the rest as the retrace does.

Anything else (a higher-order operator, an ``OpOverloadPacket``, an unknown callable)
is not proven, and the retrace runs; so is a program with symbolic sizes (dynamic
shapes; data-dependent ones make new symbols and runtime asserts on every retrace):
measured, a second default-table retrace of ExecuTorch's Llama with a dynamic sequence
length renamed ``mul_285`` to ``mul_315``. (Measured: a retrace
of export_llm's program, which has both, its KV-cache update an
``auto_functionalized_v2`` and its cache position an ``item()``, renames nodes,
``mul_181`` becoming ``mul_205``: not a no-op.) An empty table is never skipped: it is the
functionalizing retrace. Nor is a program that mutates a user input in place (a static
KV cache passed as an input and updated): a retrace changes the order of its copies
back to the input, and the ``.pte`` bytes with it.
"""

from __future__ import annotations

import operator
from typing import Any, Collection, Iterator, Optional

import torch
from torch.fx import GraphModule
from torch.fx.proxy import _COPY_META_FIELDS

_PLAIN_CALLABLES = frozenset(
    value for value in vars(operator).values() if callable(value)) | frozenset(
    (torch.sym_int, torch.sym_float, torch.sym_max, torch.sym_min, torch.sym_not,
     torch.sym_ite, torch.sym_sum))


# in the table as CompositeImplicitAutograd ops, but a retrace records a symbolic size it
# reads as the same call again: their "decomposition" is the node itself
SELF_RETRACING = frozenset((torch.ops.aten.sym_size.int, torch.ops.aten.sym_stride.int,
                            torch.ops.aten.sym_numel.default,
                            torch.ops.aten.sym_storage_offset.default))


def graph_modules(root: GraphModule) -> Iterator[GraphModule]:
    from executorch.exir.graph_module import get_control_flow_submodules

    queue = [root]
    while queue:
        module = queue.pop(0)
        yield module
        queue.extend(sub for _, sub, _ in get_control_flow_submodules(module))


# the meta keys a traced node can hold after a retrace (see the docstring)
TRACED_KEYS = frozenset(_COPY_META_FIELDS) | {"stack_trace", "seq_nr", "val", "tensor_meta",
                                               "eager_input_vals"}
# the fields a getitem takes from its producer's meta in a retrace (from_node and
# original_aten are rewritten by .retrace_meta)
_COPIED_FROM_PRODUCER = tuple(field for field in _COPY_META_FIELDS
                              if field not in ("from_node", "original_aten")) + ("stack_trace",)


def producer(node: torch.fx.Node) -> torch.fx.Node:
    """The node whose replay makes ``node``: itself, or for a ``getitem`` (of a
    ``getitem`` ...) the operator it unpacks."""
    while node.target is operator.getitem and node.args and \
            isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
    return node


_ABSENT = object()


def aten_op(target: Any) -> Any:
    """An Edge op's ATen op; any other target as it is."""
    if isinstance(target, torch._ops.OpOverload):
        return target
    return getattr(target, "_op", target)


def _meta_not_as_retraced(node: torch.fx.Node) -> Optional[str]:
    """Why a retrace would leave ``node``'s meta otherwise than a skip does, or None."""
    extra = sorted(set(node.meta) - TRACED_KEYS)
    if extra:
        return f"{node.name} holds meta {extra[0]!r}, which a retrace drops"
    if node.target is not operator.getitem:
        return None
    source = producer(node)
    if source is node or source.op != "call_function" or not isinstance(
            aten_op(source.target), torch._ops.OpOverload):
        return f"{node.name} unpacks {source.name}, which is not an operator's node"
    if "original_aten" not in node.meta:
        return f"{node.name} has no original_aten, which a retrace gives it"
    for field in _COPIED_FROM_PRODUCER:
        if node.meta.get(field, _ABSENT) != source.meta.get(field, _ABSENT):
            return (f"{node.name}'s meta {field!r} is not its producer {source.name}'s, "
                    "which a retrace copies")
    return None


def _always_decomposed(op: torch._ops.OpOverload) -> bool:
    """A CompositeImplicitAutograd op that a retrace decomposes even outside the table:
    one ``torch.export`` cannot preserve (``run_decompositions`` preserves every other
    CIA op of a loaded namespace that the table leaves out)."""
    from torch._export.utils import _check_valid_to_preserve, _is_cia_op

    return _is_cia_op(op) and not _check_valid_to_preserve(op)


def _mutated_user_inputs(program: Any) -> list:
    """The user inputs the program writes to: a retrace re-orders their copies back (a
    measured difference in the ``.pte``'s bytes), so it is not skipped."""
    signature = getattr(program, "graph_signature", None)
    return sorted(getattr(signature, "user_inputs_to_mutate", {}).values())


def why_not_skipped(program: Any, table: Collection[Any]) -> Optional[str]:
    """None when ``program.run_decompositions(table)`` provably returns the same program;
    else why that is not proven (the retrace must run)."""
    if not table:
        return "an empty table: the functionalizing retrace"
    mutated = _mutated_user_inputs(program)
    if mutated:
        return f"user inputs are mutated in place ({', '.join(mutated[:3])})"
    from torch.fx.experimental.symbolic_shapes import free_symbols, free_unbacked_symbols

    for module in graph_modules(program.graph_module):
        for node in module.graph.nodes:
            if free_unbacked_symbols(node.meta.get("val")):
                return f"{node.name} has a data-dependent (unbacked) size"
            if free_symbols(node.meta.get("val")):
                return f"{node.name} has a symbolic (dynamic) size"
            if node.op != "call_function":
                continue
            why = _meta_not_as_retraced(node)
            if why is not None:
                return why
            target = aten_op(node.target)
            if isinstance(target, torch._ops.OpOverload):
                if target in table and target not in SELF_RETRACING:
                    return f"{node.name} ({target}) is in the table"
                if _always_decomposed(target):
                    return f"{node.name} ({target}) is decomposed whatever the table"
            elif target not in _PLAIN_CALLABLES:
                return f"{node.name}: target {target!r} is not an operator overload"
    return None
