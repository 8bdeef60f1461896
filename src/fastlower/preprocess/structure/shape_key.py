"""The structure key of a partition: its preprocess key with every constant value left out.

Two partitions with one structure key are the same program up to names, constant values
and debug handles: node by node the same ops, arguments (nodes by position), shapes,
dtypes and metadata; the same signature by position; constants of the same shape, dtype,
stride and storage size; the same backend, its source, the versions and compile specs.
Left out, besides constant values: node and placeholder names, and the metadata that
names or numbers a node in its program (``debug_handle``, ``stack_trace``,
``nn_module_stack``, ``source_fn_stack``, ``torch_fn``, ``delegation_tag``,
``desc`` (a placeholder's fully qualified name), ``from_node``, ``seq_nr``). Whether
a backend's output depends on any of those is not assumed: a structural class is used
only after a real preprocess of a second member matched what was derived for it
(:mod:`.classes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from ..jobs import PreprocessJob
from ..keys import _ADDRESS, Canonical, write_backend

NAMING_META = frozenset({"from_node", "seq_nr", "debug_handle", "stack_trace", "nn_module_stack",
                         "source_fn_stack", "torch_fn", "delegation_tag", "desc"})
_CONSTANT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


@dataclass
class PartitionShape:
    """What a derivation reads from one partition: its structure key, its constants in
    placeholder order and its nodes' debug handles in graph order."""

    key: str
    constants: List[torch.Tensor]
    handles: List[Any]


class _StructureCanonical(Canonical):
    """:class:`~fastlower.preprocess.keys.Canonical` without names, handles or values."""

    def __init__(self) -> None:
        super().__init__()
        self.position: Dict[torch.fx.Node, int] = {}

    def value(self, v: Any) -> str:
        if isinstance(v, torch.fx.Node):
            return f"%{self.position.get(v, -1)}"
        return super().value(v)

    def node(self, gm: torch.fx.GraphModule, node: torch.fx.Node) -> None:
        self.position[node] = len(self.position)
        target = "" if node.op in ("placeholder", "output") else (
            node.target if isinstance(node.target, str) else self.value(node.target))
        self.write(f"{node.op}|{target}|{self.value(node.args)}|{self.value(node.kwargs)}")
        for key in sorted(node.meta):
            if key not in NAMING_META:
                self.write(f"meta:{key}={self.meta_value(node.meta[key])}")
        if node.op == "get_attr":
            self.write("get_attr")  # a lowered module or submodule: not derived

    def layout(self, tensor: torch.Tensor) -> str:
        storage = tensor.untyped_storage().nbytes() if tensor.layout == torch.strided else -1
        offset = tensor.storage_offset() if tensor.layout == torch.strided else -1
        return f"{self.tensor(tensor, with_data=False)}|storage={storage}@{offset}"


def partition_shape(job: PreprocessJob) -> PartitionShape:
    """The partition's structure key, constants and debug handles."""
    canonical = _StructureCanonical()
    write_backend(canonical, job)
    program = job.program
    canonical.graph(program.graph_module)
    constants, handles = constants_of(program), []
    for node in program.graph.nodes:
        handles.append(node.meta.get("debug_handle"))
    canonical.write(f"signature:{_signature(program)}")
    canonical.write(f"ranges:{_ADDRESS.sub('', str(program.range_constraints))}")
    canonical.write(f"calls:{len(program.module_call_graph)}")
    for tensor in constants:
        canonical.write(f"constant:{canonical.layout(tensor)}")
    return PartitionShape(canonical.hasher.hexdigest(), constants, handles)


def _signature(program: ExportedProgram) -> Tuple:
    inputs = tuple((spec.kind.name, getattr(spec, "persistent", None))
                   for spec in program.graph_signature.input_specs)
    outputs = tuple(spec.kind.name for spec in program.graph_signature.output_specs)
    return inputs, outputs


def constants_of(program: ExportedProgram) -> List[torch.Tensor]:
    """The tensors behind the program's constant inputs, in placeholder order; a
    non-tensor constant (a script object) raises :class:`TypeError`."""
    found = []
    for spec in program.graph_signature.input_specs:
        if spec.kind not in _CONSTANT_KINDS:
            continue
        value = (program.state_dict.get(spec.target) if spec.target in program.state_dict
                 else program.constants.get(spec.target))
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"constant input {spec.target!r} is a {type(value).__name__}")
        found.append(value)
    return found
