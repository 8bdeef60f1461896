"""Generic partitioners the models use: by target (``TargetsPartitioner``, also inside
control-flow bodies), the whole graph, and ``_FnPartitioner`` (tags with any function;
the hand-tagged cases of ``tagging``, ``orders`` and ``control_flow``).
"""

from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch._export.utils import is_buffer, is_lifted_tensor_constant, is_param
from torch.export import ExportedProgram
from torch.fx.passes.operator_support import OperatorSupportBase

from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
from executorch.exir.backend.canonical_partitioners.pattern_op_partitioner import (
    generate_pattern_op_partitions,
)
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import (
    DelegationSpec,
    Partitioner,
    PartitionResult,
)
from executorch.exir.backend.test.backend_with_compiler_demo import (
    BackendWithCompilerDemo,
)
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.graph_module import get_control_flow_submodules


# --------------------------------------------------------------------------- #
# Generic partitioners
# --------------------------------------------------------------------------- #
def _is_const(ep: ExportedProgram, node: torch.fx.Node) -> bool:
    return node.op == "placeholder" and (
        is_param(ep, node) or is_buffer(ep, node) or is_lifted_tensor_constant(ep, node)
    )


class _TargetSupport(OperatorSupportBase):
    def __init__(self, targets):
        super().__init__()
        self.targets = set(targets)

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        return node.op == "call_function" and node.target in self.targets


class TargetsPartitioner(Partitioner):
    """Tags maximal groups of nodes whose target is in ``targets`` (via
    ``generate_pattern_op_partitions``), recursing into control-flow
    submodules.  With ``tag_constants`` the constant placeholders that feed a
    tagged node (directly, or also through list arguments when
    ``through_lists``) get the tag of the LAST partition using them (like
    ``AddAttributePartitionerDemo``), which is what triggers the reference's
    constant duplication when the constant is shared."""

    def __init__(
        self,
        targets,
        backend_id: str,
        compile_specs: Optional[List[CompileSpec]] = None,
        *,
        tag_constants: bool = False,
        through_lists: bool = False,
        prefix: str = "tag",
    ) -> None:
        super().__init__()
        self.targets = list(targets)
        self.delegation_spec_ = DelegationSpec(backend_id, list(compile_specs or []))
        self.tag_constants = tag_constants
        self.through_lists = through_lists
        self.prefix = prefix

    def _tag(self, ep, gm, counter) -> Dict[str, DelegationSpec]:
        tags: Dict[str, DelegationSpec] = {}
        parts = generate_pattern_op_partitions(
            gm, op_support=_TargetSupport(self.targets)
        )
        for part in parts:
            tag = f"{self.prefix}{counter[0]}"
            counter[0] += 1
            tags[tag] = self.delegation_spec_
            for node in part.nodes:
                node.meta["delegation_tag"] = tag
                if not self.tag_constants or gm is not ep.graph_module:
                    continue
                args = list(node.args)
                if self.through_lists:
                    args = []
                    torch.fx.node.map_arg(node.args, args.append)
                for a in args:
                    if isinstance(a, torch.fx.Node) and _is_const(ep, a):
                        a.meta["delegation_tag"] = tag
        for _, sub, _ in get_control_flow_submodules(gm):
            tags.update(self._tag(ep, sub, counter))
        return tags

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        tags = self._tag(exported_program, exported_program.graph_module, [0])
        return PartitionResult(
            tagged_exported_program=exported_program, partition_tags=tags
        )


class XnnpackControlFlowPartitioner(TargetsPartitioner):
    """add/sub/mul/mm -> XnnpackBackend, also inside cond/map submodules."""

    def __init__(self) -> None:
        super().__init__(
            [
                exir_ops.edge.aten.add.Tensor,
                exir_ops.edge.aten.sub.Tensor,
                exir_ops.edge.aten.mul.Tensor,
                exir_ops.edge.aten.mm.default,
            ],
            XnnpackBackend.__name__,
            prefix="xnn_tag",
        )


class WholeGraphPartitioner(Partitioner):
    """Everything (all call_function nodes and all constant placeholders) in
    one partition for ``backend_id``."""

    def __init__(self, backend_id: str, compile_specs=None) -> None:
        super().__init__()
        self.delegation_spec_ = DelegationSpec(backend_id, list(compile_specs or []))

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        for node in exported_program.graph.nodes:
            if node.op == "call_function" or _is_const(exported_program, node):
                node.meta["delegation_tag"] = "whole"
        return PartitionResult(
            tagged_exported_program=exported_program,
            partition_tags={"whole": self.delegation_spec_},
        )


_DEMO = BackendWithCompilerDemo.__name__
_XNN = XnnpackBackend.__name__


class _FnPartitioner(Partitioner):
    """Tags the program with ``fn``. Its repr, ``<tests.models.partitioners._FnPartitioner
    object at 0x…>``, is part of messages in ``registry.ERROR_CASES``: moving the class
    changes them."""

    def __init__(self, fn, tags) -> None:
        super().__init__()
        self.fn = fn
        self.tags = tags

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        self.fn(exported_program)
        return PartitionResult(
            tagged_exported_program=exported_program, partition_tags=self.tags
        )


def _spec(backend=_DEMO):
    return DelegationSpec(backend, [])
