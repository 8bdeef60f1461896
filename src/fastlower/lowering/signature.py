"""The owning program's signature around constant duplication and delegation."""

from __future__ import annotations

from typing import Dict, List, Tuple

from torch.export import ExportedProgram
from torch.export.exported_program import (
    ExportGraphSignature, InputKind, InputSpec, OutputSpec, TensorArgument,
)

from ..core.schema import OP_PLACEHOLDER, PlannedGraph
from .apply import GraphBuilder


def input_specs_after_duplication(top: GraphBuilder,
                                  signature: ExportGraphSignature) -> List[InputSpec]:
    """``signature``'s input specs with each constant copy's spec right before its
    original's (``top``: the builder of the top-level graph)."""
    planned = top.graph
    copies_of: Dict[int, List[int]] = {}
    for k in planned.copies:
        copies_of.setdefault(planned.origin[k], []).append(k)
    index_by_name = {n.name: i for i, n in enumerate(top.enc.nodes) if n.op == "placeholder"}
    specs: List[InputSpec] = []
    for spec in signature.input_specs:
        name = getattr(spec.arg, "name", None)
        c = -1 if name is None else index_by_name.get(name, -1)
        for k in copies_of.get(c, ()):
            specs.append(InputSpec(kind=spec.kind, arg=TensorArgument(name=planned.copy_target[k]),
                                   target=spec.target, persistent=spec.persistent))
        specs.append(spec)
    return specs


def final_signature(planned: PlannedGraph, tagged: ExportedProgram, original: ExportedProgram,
                    specs: List[InputSpec]) -> Tuple[ExportGraphSignature, dict, dict]:
    """The lowered program's signature, state dict and constants.

    ``planned`` is the top-level graph as planned, ``specs`` the input specs after
    constant duplication (:func:`input_specs_after_duplication`). Inputs a delegate
    owns leave the signature (and their values, unless another input
    still reads them); outputs name the final graph's nodes.
    """
    sig = tagged.graph_signature
    owned = set()
    for p in planned.partitions:
        for m in p.nodes:
            if planned.op[m] == OP_PLACEHOLDER:
                owned.add(planned.names[m])
    real_state = original.state_dict
    state_dict = {k: real_state.get(k, v) for k, v in tagged.state_dict.items()}
    constants = dict(original.constants)
    spec_by_name = {getattr(s.arg, "name", None): s for s in specs}
    for k in planned.copies:  # in the order the copies were made, as the reference
        # the reference stores each copy under its own key (a deep copy of the
        # tensor); fastlower shares the original's storage under that key
        name = planned.copy_target[k]
        spec = spec_by_name[name]
        value = real_state.get(spec.target, constants.get(spec.target))
        if spec.kind == InputKind.CONSTANT_TENSOR or (
                spec.kind == InputKind.BUFFER and spec.persistent is False):
            constants[name] = value
        else:
            state_dict[name] = value
    input_specs: List[InputSpec] = []
    removed: List[InputSpec] = []
    for spec in specs:
        arg_name = getattr(spec.arg, "name", None)
        (removed if arg_name in owned else input_specs).append(spec)
    used = {s.target for s in input_specs if s.target is not None}
    for spec in removed:
        if spec.target in used:
            continue
        if spec.kind == InputKind.PARAMETER or (spec.kind == InputKind.BUFFER and spec.persistent):
            state_dict.pop(spec.target, None)
        else:
            constants.pop(spec.target, None)
    output_specs: List[OutputSpec] = []
    for spec_index, node in zip(planned.out_specs, planned.out_args):
        out = sig.output_specs[spec_index]
        if isinstance(out.arg, TensorArgument) and node >= 0:
            out = OutputSpec(kind=out.kind, arg=TensorArgument(name=planned.names[node]),
                             target=out.target)
        output_specs.append(out)
    return ExportGraphSignature(input_specs=input_specs, output_specs=output_specs), \
        state_dict, constants
