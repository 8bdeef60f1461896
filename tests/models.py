"""Differential-test models for fastlower.

Every *factory* (``ModelCase.build``) builds a FRESH model, export and Edge
program on every call: the reference ``to_backend`` mutates its input (e.g. it
adds duplicated constants to the input program's shared ``constants`` dict and
deletes lowered ones), so each implementation under comparison must get its
own program.  Partitioners are also created fresh.

Which demo backends execute in ``executorch.runtime`` (pip wheel 1.5.1)?
``Runtime.get().backend_registry.registered_backend_names`` is
``['QnnBackend', 'OpenvinoBackend', 'XnnpackBackend']``: only XNNPACK of the
backends used here.  Loading a program that delegates to
``BackendWithCompilerDemo`` (or any other demo backend shipped in
``executorch/exir/backend/test``) fails with ``RuntimeError: Failed to load
method forward, error: 0x:20`` ("Backend BackendWithCompilerDemo is not
registered").  So runtime numerics are checked only for the XNNPACK cases
(``ModelCase.runtime``).  For every case the lowered program is additionally
executed *eagerly* (``ExportedProgram.module()``; ``executorch_call_delegate``
runs the delegate's ``original_module`` on CPU), which checks numerics of the
graph surgery even for non-runnable demo backends.

Control flow with a *runtime* check: ``XnnpackControlFlowPartitioner`` tags
add/sub/mul/mm nodes at top level and inside ``torch.cond`` branches /
``torch.map`` bodies for ``XnnpackBackend``; the resulting programs (delegates
inside the branch submodules) load and run in the pip runtime.

Error cases (``ERROR_CASES``) record the exact exception the reference raises
(``ErrorCase.expected_type`` / ``expected_message``, a regex matched after
``0x…`` addresses are replaced by ``0xADDR``).  Reference 1.5.1, all three
program paths unless noted:

=======================  ===================  =====================================
case                     type                 message
=======================  ===================  =====================================
tagged_output            RuntimeError         output node output should not be tagged
tagged_user_input        RuntimeError         placeholder node for non-params,
                                              non-buffer, and non-tensor constants
                                              should not be tagged: x ␠(trailing space)
no_copy_shared_constant  RuntimeError         constant data node (b_k) is tagged
                                              with (tag0) but has user
                                              (aten_add_tensor_1) which has tag (tag1)
mutates_graph            AssertionError       The partitioner <…_FnPartitioner object
                                              at 0x…> should not modify the graph module
partition_tags_none      AssertionError       Partitioner <… object at 0x…> needs a
                                              `partition_tags` field containing a
                                              mapping of tags to delegate spec
unknown_backend          NotImplementedError  Backend NoSuchBackend was not found.
cycle                    AssertionError       Invalid partition, found dependency
                                              cycles  (torch.fx fuser_utils)
list_arg_const           RuntimeError         path dependent, see build_list_arg_const
=======================  ===================  =====================================

A tag used on nodes but missing from ``partition_tags`` is NOT an error: those
nodes are silently left undelegated (``ModelCase('missing_tag')``).  A tag in
``partition_tags`` with no nodes is skipped.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn
from torch._export.utils import is_buffer, is_lifted_tensor_constant, is_param
from torch.export import ExportedProgram, export
from torch.fx.passes.operator_support import OperatorSupportBase

# Importing these modules registers the backends (BackendDetails.__subclasses__).
from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
    XnnpackPartitioner,
)
from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend  # noqa: F401
from executorch.exir import EdgeCompileConfig, EdgeProgramManager, to_edge
from executorch.exir.backend.canonical_partitioners.pattern_op_partitioner import (
    generate_pattern_op_partitions,
)
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import (
    DelegationSpec,
    Partitioner,
    PartitionResult,
)
from executorch.exir.backend.test.backend_with_compiler_demo import (  # noqa: F401
    BackendWithCompilerDemo,
)
from executorch.exir.backend.test.demo_backend import DemoBackend
from executorch.exir.backend.test.backend_with_delegate_mapping_demo import (
    BackendWithDelegateMappingDemo,
)
from executorch.exir.backend.test.backend_with_preprocess_all_demo import (
    BackendWithPreprocessAllPartitioner,
)
from executorch.exir.backend.test.op_partitioner_demo import (
    AddAttributePartitionerDemo,
    AddMulPartitionerDemo,
)
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.error import InternalError
from torch._export.verifier import SpecViolationError
from executorch.exir.graph_module import get_control_flow_submodules

from fastlower.examples.llama import build_llama, example_inputs as llama_inputs

Inputs = Tuple[torch.Tensor, ...]
# a list is a chain: each partitioner lowers the result of the previous one
PartitionerArg = Union[Partitioner, Dict[str, Partitioner], List[Partitioner]]


# --------------------------------------------------------------------------- #
# Data model
# --------------------------------------------------------------------------- #
@dataclass
class Built:
    """One fresh instance of a test model, ready to be lowered."""

    epm: EdgeProgramManager
    partitioner: PartitionerArg
    # method name -> list of input tuples (several e.g. to take both cond branches)
    inputs: Dict[str, List[Inputs]]
    # method name -> list of eager outputs (parallel to ``inputs``)
    expected: Dict[str, List[Sequence[torch.Tensor]]]
    # ATen programs for the to_edge_transform_and_lower path (None = unsupported)
    aten: Optional[Dict[str, ExportedProgram]] = None
    # Partitioner list(s) for to_edge_transform_and_lower (fresh instances)
    etl_partitioner: Optional[Callable[[], object]] = None


@dataclass(frozen=True)
class ModelCase:
    name: str
    build: Callable[[], Built]
    runtime: bool  # all delegates executable by executorch.runtime
    paths: Tuple[str, ...] = ("direct", "spec", "manager")
    slow: bool = False
    eager_check: bool = True  # lowered_ep.module()(*inputs) numerics
    doc: str = ""


@dataclass(frozen=True)
class ErrorCase:
    name: str
    build: Callable[[], Built]
    expected_type: type
    # regex (fullmatch against the 0xADDR-normalized message), or a dict
    # path -> regex when the reference's message depends on the path
    expected_message: Union[str, Dict[str, str]]
    paths: Tuple[str, ...] = ("direct", "spec", "manager")
    doc: str = ""
    # the implementation under test must repeat the reference's message up to and
    # including this text (None: the whole message)
    message_until: Optional[str] = None

    def message_for(self, path: str) -> str:
        m = self.expected_message
        return m[path] if isinstance(m, dict) else m


def _eager(model: nn.Module, inputs: Sequence[Inputs]):
    with torch.no_grad():
        outs = []
        for inp in inputs:
            # fresh copy per input set: models may mutate buffers
            out = copy.deepcopy(model)(*copy.deepcopy(inp))
            outs.append(out if isinstance(out, (tuple, list)) else (out,))
    return outs


def _single(
    model: nn.Module,
    inputs: List[Inputs],
    partitioner: PartitionerArg,
    *,
    strict: bool = False,
    keep_aten: bool = False,
    etl_partitioner=None,
    check_ir_validity: bool = True,
    preserve_ops=(),
) -> Built:
    model = model.eval()
    expected = _eager(model, inputs)
    with torch.no_grad():
        aten = export(model, inputs[0], strict=strict)
    aten_copy = None
    if keep_aten:
        # a second, independent export for to_edge_transform_and_lower
        with torch.no_grad():
            aten_copy = {"forward": export(model, inputs[0], strict=strict)}
    epm = to_edge(
        aten,
        compile_config=EdgeCompileConfig(
            _check_ir_validity=check_ir_validity, preserve_ops=list(preserve_ops)
        ),
    )
    return Built(
        epm=epm,
        partitioner=partitioner,
        inputs={"forward": inputs},
        expected={"forward": expected},
        aten=aten_copy,
        etl_partitioner=etl_partitioner,
    )


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


# --------------------------------------------------------------------------- #
# Models
# --------------------------------------------------------------------------- #
_LINEAR = (torch.ops.aten.linear.default,)


def build_llama_case(n_layers: int, preserve_linear: bool = True) -> Built:
    """Same programs as fastlower.examples.llama.export_llama."""
    model = build_llama(n_layers)
    return _single(
        model,
        [llama_inputs(model.cfg)],
        XnnpackPartitioner(),
        keep_aten=True,
        etl_partitioner=lambda: [XnnpackPartitioner()],
        preserve_ops=_LINEAR if preserve_linear else (),
    )


def build_conv_relu_tan() -> Built:
    """``BackendWithDelegateMappingDemo`` (fuses conv+relu, decomposes tan into
    sin/cos/div) over the whole program -> ``debug_handle_map`` with
    multi-handle entries, e.g. {1: (conv, relu), 2: (...), 3..5: (tan,)}."""
    torch.manual_seed(0)
    model, inputs = BackendWithDelegateMappingDemo.get_test_model_and_inputs()
    small = (inputs[0][:1, :, :16, :16].contiguous(),)
    return _single(
        model,
        [small],
        WholeGraphPartitioner(BackendWithDelegateMappingDemo.__name__),
        strict=True,
    )


def build_conv_relu_tan_split() -> Built:
    """Same model, but only conv/relu/tan are delegated (``getitem``-free
    groups) using a pattern partitioner with compile specs, so the delegate has
    user-input + param placeholders and the owning program keeps nothing."""
    torch.manual_seed(0)
    model, inputs = BackendWithDelegateMappingDemo.get_test_model_and_inputs()
    small = (inputs[0][:1, :, :16, :16].contiguous(),)
    part = TargetsPartitioner(
        [
            exir_ops.edge.aten.convolution.default,
            exir_ops.edge.aten.relu.default,
            exir_ops.edge.aten.tan.default,
        ],
        BackendWithDelegateMappingDemo.__name__,
        [CompileSpec("mapping", b"\x01\x02")],
        tag_constants=True,
    )
    return _single(model, [small], part, strict=True)


def _cond_true(x, y):
    return torch.mm(x - y, y) + y


def _cond_false(x, y):
    return (x * y).sin() - y


class CondModel(nn.Module):
    def forward(self, x, y):
        x = x + y
        x = torch.cond(x.sum() > 0, _cond_true, _cond_false, (x, y))
        return x.cos() - y


def _map_body(x, y):
    return (x - y).sin() + y * x


class MapModel(nn.Module):
    def forward(self, xs, y):
        y = torch.mm(y, y)
        from torch._higher_order_ops.map import map as hop_map

        return hop_map(_map_body, xs, y)


class NestedControlFlow(nn.Module):
    """map( cond( cond ) ) from test_backends_lifted.test_partition_with_nested_control_flow"""

    def forward(self, xs, pred1, pred2, y):
        from functorch.experimental import control_flow

        def true_nested(y):
            y = y + y
            y = torch.mm(y, y)
            return y

        def false_nested(y):
            return torch.mm(y, y)

        def true_fn(x, pred2):
            z = control_flow.cond(pred2, true_nested, false_nested, [x])
            return x + z

        def false_fn(x, _):
            return x.cos()

        def map_fn(x, pred1, pred2, y):
            x = x.cos()
            y = control_flow.cond(pred1, true_fn, false_fn, [y, pred2])
            x = x + y
            return x.sin()

        y = torch.mm(y, y)
        return control_flow.map(map_fn, xs, pred1, pred2, y)


def _cond_inputs():
    g = torch.Generator().manual_seed(3)
    y = torch.randn(3, 3, generator=g)
    pos = (torch.rand(3, 3, generator=g) + 1.0, y.abs())  # sum > 0 -> true branch
    neg = (-torch.rand(3, 3, generator=g) - 5.0, y.abs())  # sum < 0 -> false branch
    return [pos, neg]


def build_cond(partitioner_factory) -> Callable[[], Built]:
    def build() -> Built:
        return _single(CondModel(), _cond_inputs(), partitioner_factory())

    return build


def build_map(partitioner_factory) -> Callable[[], Built]:
    def build() -> Built:
        g = torch.Generator().manual_seed(4)
        inputs = [(torch.randn(4, 3, generator=g), torch.randn(3, 3, generator=g))]
        return _single(MapModel(), inputs, partitioner_factory())

    return build


def build_nested_cf() -> Built:
    inputs = [
        (
            torch.ones(2, 2),
            torch.tensor([False]),
            torch.Tensor([False]),
            torch.ones(2, 2),
        ),
        (
            torch.ones(2, 2),
            torch.tensor([True]),
            torch.Tensor([True]),
            torch.ones(2, 2),
        ),
    ]
    return _single(NestedControlFlow(), inputs, AddMulPartitionerDemo(), strict=True)


class MethodA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("c", torch.linspace(-1, 1, 6).reshape(2, 3))

    def forward(self, x, y):
        a = (x + self.c).sin()
        b = (y - x).cos()
        return a + b, torch.sin(b - a)


class MethodB(nn.Module):
    def forward(self, x):
        return (x.cos() - x).sin() + x


def build_multimethod_preprocess_all() -> Built:
    """Two methods lowered together through FirstBackendWithPreprocessAll /
    SecondBackendWithPreprocessAll, whose ``preprocess_multimethod`` sees all
    partitions of all methods (processed bytes embed the global op count)."""
    g = torch.Generator().manual_seed(5)
    a_in = [(torch.randn(2, 3, generator=g), torch.randn(2, 3, generator=g))]
    b_in = [(torch.randn(2, 3, generator=g),)]
    ma, mb = MethodA().eval(), MethodB().eval()
    epm = to_edge(
        {
            "forward": export(ma, a_in[0], strict=True),
            "other": export(mb, b_in[0], strict=True),
        }
    )
    return Built(
        epm=epm,
        partitioner={
            "forward": BackendWithPreprocessAllPartitioner(),
            "other": BackendWithPreprocessAllPartitioner(),
        },
        inputs={"forward": a_in, "other": b_in},
        expected={"forward": _eager(ma, a_in), "other": _eager(mb, b_in)},
    )


class MlpA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(8, 16)
        self.l2 = nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.l1(x))
        h = torch.where(h > 0.5, h, torch.zeros_like(h))  # partition break
        return self.l2(h)


class MlpB(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(8, 8)

    def forward(self, x, y):
        return torch.sigmoid(self.l(x)) * y + x


def build_multimethod_xnnpack() -> Built:
    torch.manual_seed(6)
    ma, mb = MlpA().eval(), MlpB().eval()
    g = torch.Generator().manual_seed(6)
    a_in = [(torch.randn(3, 8, generator=g),)]
    b_in = [(torch.randn(3, 8, generator=g), torch.randn(3, 8, generator=g))]

    def aten():
        with torch.no_grad():
            return {
                "forward": export(ma, a_in[0], strict=False),
                "decode": export(mb, b_in[0], strict=False),
            }

    epm = to_edge(aten())
    return Built(
        epm=epm,
        partitioner=XnnpackPartitioner(),
        inputs={"forward": a_in, "decode": b_in},
        expected={"forward": _eager(ma, a_in), "decode": _eager(mb, b_in)},
        aten=aten(),
        etl_partitioner=lambda: [XnnpackPartitioner()],
    )


class SharedLinear(nn.Module):
    """One nn.Linear used twice on both sides of an XNNPACK-unsupported op:
    its weight/bias placeholders feed two XNNPACK partitions, so the reference
    duplicates them (``p_lin_weight_copy_0`` ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        h = self.lin(x)
        h = torch.where(h > 0, h, torch.zeros_like(h))  # partition break
        return self.lin(h)


def build_shared_param_xnnpack() -> Built:
    torch.manual_seed(7)
    g = torch.Generator().manual_seed(7)
    return _single(
        SharedLinear(),
        [(torch.randn(4, 8, generator=g),)],
        XnnpackPartitioner(),
        keep_aten=True,
        etl_partitioner=lambda: [XnnpackPartitioner()],
        preserve_ops=_LINEAR,
    )


class SharedConst(nn.Module):
    """Parameter ``w`` and lifted tensor constant ``c`` each used by two
    ``add`` partitions separated by an unsupported ``sin``."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0, 1, 4).reshape(2, 2))
        self.c = torch.tensor([[0.5, -0.5], [1.5, 2.0]])  # lifted tensor constant

    def forward(self, x):
        a = x + self.w + self.c
        b = a.sin()
        return b + self.w + self.c


def build_shared_const_demo() -> Built:
    g = torch.Generator().manual_seed(8)
    return _single(
        SharedConst(),
        [(torch.randn(2, 2, generator=g),)],
        AddAttributePartitionerDemo(),
        strict=True,
    )


class BufferMutation(nn.Module):
    """test_partitioner.test_buffer_mutation1: the buffer mutation moves into
    the delegate (owning program's BUFFER_MUTATION output spec is deleted)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.ones(3, 3))

    def forward(self, x):
        self.b.add_(x)
        return x + self.b


def build_buffer_mutation() -> Built:
    return _single(
        BufferMutation(),
        [(torch.ones(3, 3),)],
        AddAttributePartitionerDemo(),
        strict=True,
    )


class CatConst(nn.Module):
    """A lifted tensor constant reached ONLY through a list argument
    (``aten.cat([c, x])``), used by two partitions."""

    def __init__(self) -> None:
        super().__init__()
        self.c = torch.arange(6, dtype=torch.float32).reshape(2, 3)

    def forward(self, x, y):
        a = torch.cat([self.c, x]) + 1.0
        s = torch.cumsum(a, dim=0)  # partition break (neither XNNPACK nor cat/add)
        b = torch.cat([self.c, y]) + s
        return b


def _cat_partitioner() -> Partitioner:
    return TargetsPartitioner(
        [exir_ops.edge.aten.cat.default, exir_ops.edge.aten.add.Tensor],
        DemoBackend.__name__,
        tag_constants=True,
        through_lists=True,
    )


def build_list_arg_const() -> Built:
    """pytorch/executorch#22798 -- what the reference (1.5.1) does.

    Program: ``c_c`` (lifted tensor constant, target ``c``) is used only as
    ``cat([c_c, x])`` (partition ``tag0``) and ``cat([c_c, y])`` (``tag1``);
    the partitioner tags ``c_c`` with the LAST partition using it (``tag1``).

    1. ``_maybe_duplicate_constant_nodes(tagged_program, "tag1")`` sees that
       ``c_c`` has a user in ``tag0`` and calls ``duplicate_constant_node``,
       which inserts placeholder ``c_c_copy_0`` and stores
       ``constants["c_c_copy_0"]`` -- in the dict SHARED with the input
       program (get_fake_program shares ``constants``), so the INPUT program
       now has constants ``['c', 'c_c_copy_0']`` even though lowering fails.
       But it only rewrites *direct* args/kwargs (``arg != node`` is True for
       the list ``[c_c, x]``), so the copy has no users and stays untagged;
       ``c_c`` keeps tag ``tag1`` with a user in ``tag0``.
    2. Lowering then raises ``RuntimeError`` from
       ``_get_node_list_with_same_tag``; the text depends on the overload:

       * single program ``to_backend(ep, partitioner)``: ``tag0`` IS lowered
         first (c_c becomes a delegate input), then for ``tag1``:
         ``constant data node (c_c) is tagged with (tag1) but has user
         (executorch_call_delegate) which has tag (None)``
       * ``MethodProgramsPartitionerSpec`` / ``EdgeProgramManager.to_backend``
         (partitions are fused before lowering): ``constant data node (c_c)
         is tagged with (tag1) but has user (fused_tag0) which has tag
         (tag0)``

    No wrong numerics: it always raises.  See
    ``build_list_arg_const_untagged`` (partitioner does not tag the constant:
    lowers fine, the constant is a delegate input of both partitions) and
    ``build_list_arg_const_xnnpack`` (XNNPACK does not tag it either)."""
    g = torch.Generator().manual_seed(9)
    return _single(
        CatConst(),
        [(torch.randn(1, 3, generator=g), torch.randn(1, 3, generator=g))],
        _cat_partitioner(),
        strict=True,
    )


def build_list_arg_const_untagged() -> Built:
    g = torch.Generator().manual_seed(9)
    part = TargetsPartitioner(
        [exir_ops.edge.aten.cat.default, exir_ops.edge.aten.add.Tensor],
        DemoBackend.__name__,
        tag_constants=False,
    )
    return _single(
        CatConst(),
        [(torch.randn(1, 3, generator=g), torch.randn(1, 3, generator=g))],
        part,
        strict=True,
    )


def build_list_arg_const_xnnpack() -> Built:
    """Same model through XnnpackPartitioner (which does not tag the constant
    feeding ``cat``), for a runtime check of the list-argument path."""
    g = torch.Generator().manual_seed(9)
    return _single(
        CatConst(),
        [(torch.randn(1, 3, generator=g), torch.randn(1, 3, generator=g))],
        XnnpackPartitioner(),
        strict=True,
    )


class SplitOutput(nn.Module):
    """A partition whose only output is a list-valued node (``split``): the
    reference keeps the fused call's result itself (no ``getitem`` is added for
    a single output that is not a tensor) and the consumers outside the
    partition index into the delegate's output."""

    def forward(self, x):
        a, b = torch.split(x + 1.0, 2)
        return a * 2.0, b - 1.0


def build_split_output() -> Built:
    g = torch.Generator().manual_seed(10)
    part = TargetsPartitioner(
        [exir_ops.edge.aten.add.Tensor, exir_ops.edge.aten.split_with_sizes_copy.default],
        DemoBackend.__name__,
    )
    return _single(SplitOutput(), [(torch.randn(4, 3, generator=g),)], part, strict=True)


# --------------------------------------------------------------------------- #
# Bad-input partitioners
# --------------------------------------------------------------------------- #
class AddChain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("k", torch.full((2, 2), 3.0))

    def forward(self, x, y):
        a = x + y
        b = a * self.k
        c = b - y
        d = c + self.k
        return d


def _add_chain_inputs():
    return [(torch.ones(2, 2), torch.full((2, 2), 2.0))]


_DEMO = BackendWithCompilerDemo.__name__


class _FnPartitioner(Partitioner):
    def __init__(self, fn, tags) -> None:
        super().__init__()
        self.fn = fn
        self.tags = tags

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        self.fn(exported_program)
        return PartitionResult(
            tagged_exported_program=exported_program, partition_tags=self.tags
        )


def _tag_adds(ep, tag="tag0"):
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target == exir_ops.edge.aten.add.Tensor:
            n.meta["delegation_tag"] = tag


def _tag_first_add(ep):
    for n in ep.graph.nodes:
        if n.name == "aten_add_tensor":
            n.meta["delegation_tag"] = "tag0"


def _bad_tagged_output(ep):
    _tag_adds(ep)
    ep.graph.output_node().meta["delegation_tag"] = "tag0"


def _bad_tagged_user_input(ep):
    _tag_adds(ep)
    for n in ep.graph.nodes:
        if n.op == "placeholder" and n.name == "x":
            n.meta["delegation_tag"] = "tag0"


def _bad_no_copy(ep):
    # k is used by mul (tag0) and by the last add (tag1)
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target == exir_ops.edge.aten.mul.Tensor:
            n.meta["delegation_tag"] = "tag0"
        if n.name == "aten_add_tensor_1":
            n.meta["delegation_tag"] = "tag1"
        if n.op == "placeholder" and n.name == "b_k":
            n.meta["delegation_tag"] = "tag0"
            n.meta["no_copy"] = True


def _bad_mutates_graph(ep):
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target == exir_ops.edge.aten.add.Tensor:
            n.target = exir_ops.edge.aten.mul.Tensor


def _bad_cycle(ep):
    # first add and last add in one tag, with untagged mul/sub in between:
    # fusing {a, d} would need b, c both inside and outside -> cycle.
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target == exir_ops.edge.aten.add.Tensor:
            n.meta["delegation_tag"] = "tag0"


def _spec(backend=_DEMO):
    return DelegationSpec(backend, [])


def _bad(fn, tags) -> Callable[[], Built]:
    def build() -> Built:
        return _single(AddChain(), _add_chain_inputs(), _FnPartitioner(fn, tags))

    return build


def build_missing_tag() -> Built:
    """Tag ``tag1`` is used on nodes but missing from ``partition_tags``:
    the reference silently ignores those nodes (not lowered, tag removed).
    NOT an error -- it is a ModelCase."""

    def fn(ep):
        for n in ep.graph.nodes:
            if n.name == "aten_add_tensor":
                n.meta["delegation_tag"] = "tag0"
            if n.op == "call_function" and n.target == exir_ops.edge.aten.mul.Tensor:
                n.meta["delegation_tag"] = "tag1"

    return _single(
        AddChain(),
        _add_chain_inputs(),
        _FnPartitioner(fn, {"tag0": _spec(), "unused_tag": _spec()}),
    )


# --------------------------------------------------------------------------- #
# Partitioners that edit what the reference's is_identical_graph does not see,
# and inputs that break two rules at once (issue #13)
# --------------------------------------------------------------------------- #
def _edit_add_alpha(ep):
    """Tags the first add and sets its ``alpha`` to 5: a valid edit both lower."""
    _tag_first_add(ep)
    for n in ep.graph.nodes:
        if n.name == "aten_add_tensor":
            n.kwargs = {**n.kwargs, "alpha": 5.0}


class CatModel(nn.Module):
    def forward(self, x, y):
        return torch.cat([x + 1, y], 1) * 2


def _tag_add_and_cat(ep, tag: str) -> None:
    """Tags every add and cat (``CatModel``'s ``x + 1`` and the cat reading it)."""
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target in (exir_ops.edge.aten.cat.default,
                                                     exir_ops.edge.aten.add.Tensor):
            n.meta["delegation_tag"] = tag


def _edit_cat_dim(ep):
    """Tags cat and its input add, and sets cat's ``dim`` to 2 (out of range for 2-D)."""
    _tag_add_and_cat(ep, "tag0")
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target == exir_ops.edge.aten.cat.default:
            n.args = (n.args[0], 2)


def build_edited_cat_dim() -> Built:
    return _single(CatModel(), [(torch.ones(2, 2), torch.ones(2, 3))],
                   _FnPartitioner(_edit_cat_dim, {"tag0": _spec()}))


class OwnedUpdateRead(nn.Module):
    """A buffer update read outside the partition that owns the buffer, next to a
    non-convex partition ``u`` (sin, tan around an untagged cos)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(2, 2))

    def forward(self, x):
        self.b.add_(x)
        r = self.b * 2
        s = x.sin()
        t = s.cos().tan() + s
        return r, t


def _tag_owned_update_read(ep, cycle: bool):
    for n in ep.graph.nodes:
        if n.op == "placeholder" and n.name == "b_b" or n.name == "aten_add_tensor":
            n.meta["delegation_tag"] = "t"
        if cycle and n.op == "call_function" and n.target in (exir_ops.edge.aten.sin.default,
                                                               exir_ops.edge.aten.tan.default):
            n.meta["delegation_tag"] = "u"


def build_owned_update_read(cycle: bool) -> Callable[[], Built]:
    def build() -> Built:
        tags = {"t": _spec(), "u": _spec()} if cycle else {"t": _spec()}
        return _single(OwnedUpdateRead(), [(torch.ones(2, 2),)],
                       _FnPartitioner(lambda ep: _tag_owned_update_read(ep, cycle), tags))

    return build


def build_method_without_program() -> Built:
    """The spec names a partitioner for a method that has no program."""
    built = _bad(_tag_first_add, {"tag0": _spec()})()
    built.partitioner = {"forward": built.partitioner, "decode": _FnPartitioner(_tag_first_add, {})}
    return built


def _bad_adds_a_node(ep):
    """Adds a node: the reference's structure check sees it."""
    _tag_adds(ep)
    out = ep.graph.output_node()
    with ep.graph.inserting_before(out):
        ep.graph.call_function(exir_ops.edge.aten.relu.default, (out.args[0][0],))


class BufferReturned(nn.Module):
    """The buffer update is also the user output."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(2, 2))

    def forward(self, x):
        self.b.add_(x)
        return self.b


def _tag_buffer_and_add(ep):
    for n in ep.graph.nodes:
        if n.op == "placeholder" and n.name == "b_b" or n.name == "aten_add_tensor":
            n.meta["delegation_tag"] = "tag0"


def build_owned_update_returned() -> Built:
    return _single(BufferReturned(), [(torch.ones(2, 2),)],
                   _FnPartitioner(_tag_buffer_and_add, {"tag0": _spec()}))


# --------------------------------------------------------------------------- #
# Chained lowering: several partitioners lower the same program in turn
# (to_edge_transform_and_lower(..., partitioner=[P1, P2]), to_backend twice)
# --------------------------------------------------------------------------- #
class TwoLinearAddMul(nn.Module):
    """Issue #13's model: AddMulPartitionerDemo takes add/mul, XNNPACK the linears."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(4, 8)
        self.l2 = nn.Linear(8, 3)

    def forward(self, x, y):
        h = self.l1(x)
        h = h + y
        h = h * y
        return self.l2(h)


def _two_linear_inputs():
    g = torch.Generator().manual_seed(13)
    return [(torch.randn(2, 4, generator=g), torch.randn(2, 8, generator=g))]


_ADD = exir_ops.edge.aten.add.Tensor
_XNN = XnnpackBackend.__name__


def build_chain(*partitioner_factories, model_factory=TwoLinearAddMul,
                inputs_factory=_two_linear_inputs) -> Callable[[], Built]:
    """A case lowered by each partitioner in turn (fresh instances per build)."""

    def build() -> Built:
        torch.manual_seed(0)
        return _single(
            model_factory(), inputs_factory(), [f() for f in partitioner_factories],
            keep_aten=True, etl_partitioner=lambda: [f() for f in partitioner_factories],
        )

    return build


def _xnn_adds() -> Partitioner:
    return TargetsPartitioner([_ADD], _XNN, prefix="add_tag")


def _xnn_adds_same_tags() -> Partitioner:
    """Tags named as XnnpackControlFlowPartitioner names its own (``xnn_tag<i>``)."""
    return TargetsPartitioner([_ADD], _XNN, prefix="xnn_tag")


def _nothing() -> Partitioner:
    """Tags nothing (no div in these graphs): the next partitioner gets the whole graph."""
    return TargetsPartitioner([exir_ops.edge.aten.div.Tensor], _DEMO)


def _tag_cond_not_its_branches(ep):
    """Tags the cond call but not the get_attr nodes of its branch bodies."""
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.higher_order.cond:
            n.meta["delegation_tag"] = "tag0"


def build_cond_without_branches() -> Built:
    return _single(CondModel(), _cond_inputs(),
                   _FnPartitioner(_tag_cond_not_its_branches, {"tag0": _spec()}))


def _tag_output_with_unknown_tag(ep):
    """The output node carries a tag partition_tags does not name (fuzz finding F4)."""
    _tag_first_add(ep)
    ep.graph.output_node().meta["delegation_tag"] = "t_out"



class OutputAndOwnedLinear(nn.Module):
    """``y`` is both a program output and the input of a linear whose weight the last
    partition owns (fuzz finding F2): the reference re-assigns the output node's args
    after inserting that delegate, which puts the output node last in ``y.users``."""

    def __init__(self, through_cond: bool = False) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("scale", torch.full((4,), 0.5))
        self.through_cond = through_cond

    def forward(self, x, w):
        y = torch.relu(x) if not self.through_cond else torch.cond(
            x.sum() > 0, _cond_true, _cond_false, (x, w))
        return y, self.lin(y) * self.scale + w


def _linear_ops():
    return [exir_ops.edge.aten.permute_copy.default, exir_ops.edge.aten.addmm.default]


def _owned_state_partitioner(with_mul: bool) -> Partitioner:
    ops = _linear_ops() + ([exir_ops.edge.aten.mul.Tensor] if with_mul else [])
    return TargetsPartitioner(ops, _XNN, tag_constants=True)


def build_output_and_owned(through_cond: bool, with_mul: bool) -> Callable[[], Built]:
    def build() -> Built:
        torch.manual_seed(0)  # both implementations lower the same weights
        inputs = [(torch.randn(4, 4), torch.randn(4, 4)), (-torch.ones(4, 4), torch.randn(4, 4))]
        return _single(OutputAndOwnedLinear(through_cond), inputs,
                       _owned_state_partitioner(with_mul))
    return build


# --------------------------------------------------------------------------- #
# Two broken rules in different partitions: the error raised is the one the
# reference meets first in its order of work (fuzz case 118), which differs
# between the single-program path (fuse, build, preprocess, insert: partition by
# partition) and the multi-method path (fuse and build every partition of a
# method, then preprocess all, then insert all).
# --------------------------------------------------------------------------- #
class ModelsFailingBackend(BackendDetails):
    """A backend whose ``preprocess`` always raises ``ValueError``."""

    @staticmethod
    def preprocess(edge_program: ExportedProgram,
                   compile_specs: List[CompileSpec]) -> PreprocessResult:
        raise ValueError("ModelsFailingBackend cannot compile this partition")


class ModelsFailingMultimethodBackend(BackendDetails):
    """A backend with its own ``preprocess_multimethod``; it and ``preprocess`` raise
    ``RuntimeError``."""

    @staticmethod
    def preprocess(edge_program: ExportedProgram,
                   compile_specs: List[CompileSpec]) -> PreprocessResult:
        raise RuntimeError("ModelsFailingMultimethodBackend cannot compile this partition")

    @classmethod
    def preprocess_multimethod(cls, edge_programs, compile_specs):
        raise RuntimeError("ModelsFailingMultimethodBackend cannot compile these partitions")


class CatThenSinCosTan(nn.Module):
    def forward(self, x, y):
        s = (torch.cat([x + 1, y], 1) * 2).sin()
        return s.cos().tan() * s


def _tag_sin_tan(ep, tag: str) -> None:
    """sin and tan around an untagged cos: a partition that is not convex."""
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target in (exir_ops.edge.aten.sin.default,
                                                     exir_ops.edge.aten.tan.default):
            n.meta["delegation_tag"] = tag


def _edited_cat_then_cycle(ep):
    """tag0 = {add, cat} with cat's dim edited to 2 (its program fails the verifier);
    tag1 = {sin, tan} around an untagged cos (not convex)."""
    _edit_cat_dim(ep)
    _tag_sin_tan(ep, "tag1")


def _cat_inputs():
    return [(torch.ones(2, 2), torch.ones(2, 3))]


def build_edited_then_cycle() -> Built:
    return _single(CatThenSinCosTan(), _cat_inputs(),
                   _FnPartitioner(_edited_cat_then_cycle, {"tag0": _spec(), "tag1": _spec()}))


class SharedBufferAfterCat(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("k", torch.full((2, 5), 0.5))

    def forward(self, x, y):
        s = (torch.cat([x + 1, y], 1) * 2).sin()
        return (s.cos().tan() * s + self.k) * self.k


def _cycle_shared_constant_edited_cat(ep):
    """tag0 = {sin, tan} (not convex); tag1 = {k, the add reading it}, while an untagged
    mul reads k too (so k is duplicated); the untagged cat's dim edited to 2."""
    _tag_sin_tan(ep, "tag0")
    for n in ep.graph.nodes:
        if n.name in ("b_k", "aten_add_tensor_1"):
            n.meta["delegation_tag"] = "tag1"
        if n.op == "call_function" and n.target == exir_ops.edge.aten.cat.default:
            n.args = (n.args[0], 2)


def build_cycle_shared_constant_edited() -> Built:
    return _single(SharedBufferAfterCat(), _cat_inputs(), _FnPartitioner(
        _cycle_shared_constant_edited_cat, {"tag0": _spec(), "tag1": _spec()}))


def _cycle_then_tagged_output(ep):
    """tag0 = {sin, tan} (not convex); tag1 = the output node (and the last mul)."""
    _tag_sin_tan(ep, "tag0")
    last = ep.graph.output_node()
    last.meta["delegation_tag"] = "tag1"
    last.args[0][0].meta["delegation_tag"] = "tag1"


def build_cycle_then_tagged_output() -> Built:
    return _single(CatThenSinCosTan(), _cat_inputs(), _FnPartitioner(
        _cycle_then_tagged_output, {"tag0": _spec(), "tag1": _spec()}))


def _failing_then_cycle(ep):
    """tag0 = {add, cat} for a backend that fails; tag1 not convex, as above."""
    _tag_add_and_cat(ep, "tag0")
    _tag_sin_tan(ep, "tag1")


def build_failing_then_cycle() -> Built:
    return _single(CatThenSinCosTan(), _cat_inputs(), _FnPartitioner(
        _failing_then_cycle, {"tag0": _spec(ModelsFailingBackend.__name__), "tag1": _spec()}))


def _owned_update_read_then_failing(ep):
    """t owns the buffer whose update is read outside it; f = {sin} for a backend that fails."""
    _tag_owned_update_read(ep, cycle=False)
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target == exir_ops.edge.aten.sin.default:
            n.meta["delegation_tag"] = "f"


def build_owned_update_read_and_failing(failing_first: bool) -> Callable[[], Built]:
    def build() -> Built:
        tags = {"t": _spec(), "f": _spec(ModelsFailingBackend.__name__)}
        if failing_first:
            tags = {"f": tags["f"], "t": tags["t"]}
        return _single(OwnedUpdateRead(), [(torch.ones(2, 2),)],
                       _FnPartitioner(_owned_update_read_then_failing, tags))
    return build


class TaggedInputsAndSharedBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("k", torch.full((2, 5), 0.5))

    def forward(self, x, y):
        return torch.cat([x + 1, y], 1) * self.k + self.k


def _tag_inputs_and_shared_buffer(ep, edit_cat: bool):
    """tag0 = {x, y, k, the mul}: the user inputs x and y (read by the untagged add and
    cat) and the buffer k (read by the untagged last add) are all duplication candidates
    of tag0; with ``edit_cat`` the untagged cat's dim is 2, which the verifier rejects."""
    for n in ep.graph.nodes:
        if n.name in ("x", "y", "b_k") or n.target == exir_ops.edge.aten.mul.Tensor:
            n.meta["delegation_tag"] = "tag0"
        if edit_cat and n.target == exir_ops.edge.aten.cat.default:
            n.args = (n.args[0], 2)


def build_tagged_inputs_and_shared_buffer(edit_cat: bool) -> Callable[[], Built]:
    def build() -> Built:
        return _single(TaggedInputsAndSharedBuffer(), _cat_inputs(), _FnPartitioner(
            functools.partial(_tag_inputs_and_shared_buffer, edit_cat=edit_cat), {"tag0": _spec()}))
    return build


# Errors whose identity depends on the hash seed, in the reference and in fastlower alike:
# the reference duplicates a tag's candidates in the iteration order of a set of their
# names, and meets a tagged user input (which it cannot duplicate) or, for an edited
# program, the verifier (run after the first constant it duplicates) in that order.
# tests/test_determinism.py compares both under seeds that order {b_k, x, y} differently.
SEED_DEPENDENT_ERROR_CASES: Dict[str, Callable[[], Built]] = {
    "tagged_inputs_and_shared_buffer": build_tagged_inputs_and_shared_buffer(edit_cat=False),
    "tagged_inputs_and_shared_buffer_edited": build_tagged_inputs_and_shared_buffer(edit_cat=True),
}

def _failing_default_and_override(ep):
    """tag "a" = {add, cat}, tag "b" = {cos}: each tag's backend fails in preprocess."""
    _tag_add_and_cat(ep, "a")
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target == exir_ops.edge.aten.cos.default:
            n.meta["delegation_tag"] = "b"


def build_failing_default_and_override(override_first: bool) -> Callable[[], Built]:
    """Two failing backends, one keeping the default ``preprocess_multimethod`` (run in
    fastlower's parallel batch), one overriding it: the first backend's error wins."""
    def build() -> Built:
        default, override = ModelsFailingBackend.__name__, ModelsFailingMultimethodBackend.__name__
        first, second = (override, default) if override_first else (default, override)
        return _single(CatThenSinCosTan(), _cat_inputs(), _FnPartitioner(
            _failing_default_and_override, {"a": _spec(first), "b": _spec(second)}))
    return build


ADDR = r"0xADDR"

ERROR_CASES: Dict[str, ErrorCase] = {
    c.name: c
    for c in [
        ErrorCase(
            "tagged_output",
            _bad(_bad_tagged_output, {"tag0": _spec()}),
            RuntimeError,
            r"output node output should not be tagged",
        ),
        ErrorCase(
            "tagged_user_input",
            _bad(_bad_tagged_user_input, {"tag0": _spec()}),
            RuntimeError,
            r"placeholder node for non-params, non-buffer, and non-tensor "
            r"constants should not be tagged: x ",
        ),
        ErrorCase(
            "no_copy_shared_constant",
            _bad(_bad_no_copy, {"tag0": _spec(), "tag1": _spec()}),
            RuntimeError,
            r"constant data node \(b_k\) is tagged with \(tag0\) but has user "
            r"\(aten_add_tensor_1\) which has tag \(tag1\)",
        ),
        ErrorCase(
            "mutates_graph",
            _bad(_bad_mutates_graph, {}),
            AssertionError,
            r"The partitioner <tests\.models\._FnPartitioner object at "
            + ADDR
            + r"> should not modify the graph module",
        ),
        ErrorCase(
            "partition_tags_none",
            _bad(_tag_adds, None),
            AssertionError,
            r"Partitioner <tests\.models\._FnPartitioner object at "
            + ADDR
            + r"> needs a `partition_tags` field containing a mapping of tags "
            r"to delegate spec",
        ),
        ErrorCase(
            "unknown_backend",
            _bad(_tag_first_add, {"tag0": _spec("NoSuchBackend")}),
            NotImplementedError,
            r"Backend NoSuchBackend was not found\.",
        ),
        ErrorCase(
            "cycle",
            _bad(_bad_cycle, {"tag0": _spec()}),
            AssertionError,
            r"Invalid partition, found dependency cycles",
        ),
        ErrorCase(
            "edited_cat_dim",
            build_edited_cat_dim,
            InternalError,
            r"(?s)Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\).*",
            doc="an invalid edit the reference's structure check does not see: the "
            "partition program's verifier rejects it",
        ),
        ErrorCase(
            "adds_a_node",
            _bad(_bad_adds_a_node, {"tag0": _spec()}),
            AssertionError,
            r"The partitioner <tests\.models\._FnPartitioner object at "
            + ADDR
            + r"> should not modify the graph module",
        ),
        ErrorCase(
            "method_without_program",
            build_method_without_program,
            AssertionError,
            r"Partitioner for method decode is not provided",
            paths=("spec",),
        ),
        ErrorCase(
            "owned_update_read_outside",
            build_owned_update_read(cycle=False),
            RuntimeError,
            r"Tried to erase Node getitem but it still had 1 users in the graph: "
            r"\{aten_mul_tensor: None\}!",
        ),
        ErrorCase(
            "owned_update_read_and_cycle_direct",
            build_owned_update_read(cycle=True),
            RuntimeError,
            r"Tried to erase Node getitem but it still had 1 users in the graph: "
            r"\{aten_mul_tensor: None\}!",
            paths=("direct",),
            doc="two rules broken: the single-program path lowers tag t (and fails "
            "on its buffer update) before it fuses u",
        ),
        ErrorCase(
            "owned_update_read_and_cycle_spec",
            build_owned_update_read(cycle=True),
            AssertionError,
            r"Invalid partition, found dependency cycles",
            paths=("spec", "manager"),
            doc="two rules broken: the multi-method path fuses every tag (and finds "
            "u's cycle) before it inserts t's delegate",
        ),
        ErrorCase(
            "owned_update_returned",
            build_owned_update_returned,
            AssertionError,
            r"(?s)Constant b was tagged to be consumed by the buffer, and was found to also "
            r"contain a buffer mutation\. However this buffer mutation node was found to "
            r"also be used as other types of outputs which is currently not supported\..*",
            # the rest of the reference's message is a dump of the whole program
            message_until="currently not supported.",
        ),
        ErrorCase(
            "chain_cond_same_tag_names",
            build_chain(_xnn_adds_same_tags, XnnpackControlFlowPartitioner,
                        model_factory=CondModel, inputs_factory=_cond_inputs),
            AssertionError,
            r"Invalid partition, found dependency cycles",
            paths=("direct", "manager"),
            doc="the first lowering's tags stay on the nodes of control-flow bodies (the "
            "reference drops them at top level only); a second partitioner that reuses a "
            "tag name gets those nodes in its partition, which is then not convex",
        ),
        ErrorCase(
            "cond_without_branches",
            build_cond_without_branches,
            SpecViolationError,
            r"Node\.meta submodule_0 is missing val field\.",
            doc="a partition holding a cond call but not its branch get_attrs: the "
            "partition program's verifier rejects the branch placeholders (fuzz F1)",
        ),
        ErrorCase(
            "edited_then_cycle",
            build_edited_then_cycle,
            InternalError,
            r"(?s)Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\).*",
            message_until="but got 2)",
            doc="tag0's program fails the verifier before tag1 is fused (fuzz case 118), on "
            "every path",
        ),
        ErrorCase(
            "edited_with_shared_constant_then_cycle",
            build_cycle_shared_constant_edited,
            InternalError,
            r"(?s)Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\).*",
            message_until="but got 2)",
            doc="duplicating the shared constant k validates the whole tagged program, before "
            "tag0 is fused: the untagged cat's edit fails there (the shape of fuzz case 118)",
        ),
        ErrorCase(
            "cycle_then_tagged_output",
            build_cycle_then_tagged_output,
            AssertionError,
            r"Invalid partition, found dependency cycles",
            doc="the reference checks a tag's nodes (output tagged) only at that tag's turn: "
            "tag0's cycle comes first",
        ),
        ErrorCase(
            "failing_backend_then_cycle_direct",
            build_failing_then_cycle,
            ValueError,
            r"ModelsFailingBackend cannot compile this partition",
            paths=("direct",),
            doc="the single-program path preprocesses tag0 before it fuses tag1",
        ),
        ErrorCase(
            "failing_backend_then_cycle_spec",
            build_failing_then_cycle,
            AssertionError,
            r"Invalid partition, found dependency cycles",
            paths=("spec", "manager"),
            doc="the multi-method path fuses every tag before any preprocess",
        ),
        ErrorCase(
            "failing_default_then_override",
            build_failing_default_and_override(override_first=False),
            ValueError,
            r"ModelsFailingBackend cannot compile this partition",
            doc="the backend that keeps the default preprocess_multimethod comes first: its "
            "error, on every path",
        ),
        ErrorCase(
            "failing_override_then_default",
            build_failing_default_and_override(override_first=True),
            RuntimeError,
            {"direct": r"ModelsFailingMultimethodBackend cannot compile this partition",
             "spec": r"ModelsFailingMultimethodBackend cannot compile these partitions",
             "manager": r"ModelsFailingMultimethodBackend cannot compile these partitions"},
            doc="the backend with its own preprocess_multimethod comes first: its error",
        ),
        ErrorCase(
            "owned_update_read_then_failing",
            build_owned_update_read_and_failing(failing_first=False),
            RuntimeError,
            r"Tried to erase Node getitem but it still had 1 users in the graph: "
            r"\{aten_mul_tensor: None\}!",
            doc="t's delegate is inserted (and fails) before f's backend preprocesses: on the "
            "single-program path partition by partition, on the multi-method path backend by "
            "backend (each backend's preprocess, then its delegates' insertion)",
        ),
        ErrorCase(
            "failing_then_owned_update_read",
            build_owned_update_read_and_failing(failing_first=True),
            ValueError,
            r"ModelsFailingBackend cannot compile this partition",
            doc="f's backend comes first: its preprocess fails before t's delegate is inserted",
        ),
        ErrorCase(
            "list_arg_const",
            build_list_arg_const,
            RuntimeError,
            {
                "direct": r"constant data node \(c_c\) is tagged with \(tag1\) but "
                r"has user \(executorch_call_delegate\) which has tag \(None\)",
                "spec": r"constant data node \(c_c\) is tagged with \(tag1\) but "
                r"has user \(fused_tag0\) which has tag \(tag0\)",
                "manager": r"constant data node \(c_c\) is tagged with \(tag1\) "
                r"but has user \(fused_tag0\) which has tag \(tag0\)",
            },
            doc=build_list_arg_const.__doc__ or "",
        ),
    ]
}


# --------------------------------------------------------------------------- #
# Registry
# --------------------------------------------------------------------------- #
ALL = ("direct", "spec", "manager")
# Single-method cases: "manager" already goes through the
# MethodProgramsPartitionerSpec overload, so "spec" is only run where it adds
# something (several methods) to keep the suite under 4 minutes on 2 cores.
DM = ("direct", "manager")

MODEL_CASES: Dict[str, ModelCase] = {
    c.name: c
    for c in [
        ModelCase(
            "llama1_xnnpack",
            lambda: build_llama_case(1),
            runtime=True,
            paths=("direct", "etl"),
        ),
        ModelCase(
            "llama1_xnnpack_slow",
            lambda: build_llama_case(1),
            runtime=True,
            paths=("spec", "manager"),
            slow=True,
        ),
        ModelCase(
            "llama1_xnnpack_decomposed_linear",
            lambda: build_llama_case(1, preserve_linear=False),
            runtime=True,
            paths=DM,
            slow=True,
        ),
        ModelCase(
            "llama4_xnnpack",
            lambda: build_llama_case(4),
            runtime=True,
            paths=("manager",),
        ),
        ModelCase(
            "llama4_xnnpack_slow",
            lambda: build_llama_case(4),
            runtime=True,
            paths=("direct", "spec", "etl"),
            slow=True,
        ),
        ModelCase("conv_relu_tan", build_conv_relu_tan, runtime=False, paths=DM),
        ModelCase(
            "conv_relu_tan_split", build_conv_relu_tan_split, runtime=False, paths=DM
        ),
        ModelCase(
            "cond_demo", build_cond(AddMulPartitionerDemo), runtime=False, paths=DM
        ),
        ModelCase(
            "cond_xnnpack",
            build_cond(XnnpackControlFlowPartitioner),
            runtime=True,
            paths=DM,
        ),
        ModelCase(
            "map_demo", build_map(AddMulPartitionerDemo), runtime=False, paths=DM
        ),
        ModelCase(
            "map_xnnpack",
            build_map(XnnpackControlFlowPartitioner),
            runtime=True,
            paths=DM,
        ),
        ModelCase("nested_cf_demo", build_nested_cf, runtime=False, paths=("manager",)),
        ModelCase(
            "nested_cf_demo_slow",
            build_nested_cf,
            runtime=False,
            paths=("direct", "spec"),
            slow=True,
        ),
        ModelCase(
            "multimethod_preprocess_all",
            build_multimethod_preprocess_all,
            runtime=False,
            # "direct" lowers method by method through the single-program
            # overload, which calls preprocess() (b"\x00") instead of
            # preprocess_multimethod(); still compared, just different bytes.
            paths=ALL,
        ),
        ModelCase(
            "multimethod_xnnpack",
            build_multimethod_xnnpack,
            runtime=True,
            paths=ALL,
        ),
        ModelCase(
            "multimethod_xnnpack_etl",
            build_multimethod_xnnpack,
            runtime=True,
            paths=("etl",),
            slow=True,
        ),
        ModelCase(
            "shared_param_xnnpack",
            build_shared_param_xnnpack,
            runtime=True,
            paths=DM + ("etl",),
        ),
        ModelCase("shared_const_demo", build_shared_const_demo, runtime=False, paths=DM),
        ModelCase(
            "buffer_mutation_demo", build_buffer_mutation, runtime=False, paths=DM
        ),
        ModelCase(
            "list_arg_const_untagged",
            build_list_arg_const_untagged,
            runtime=False,
            paths=DM,
        ),
        ModelCase(
            "list_arg_const_xnnpack",
            build_list_arg_const_xnnpack,
            runtime=True,
            paths=DM,
        ),
        ModelCase("missing_tag", build_missing_tag, runtime=False, paths=DM),
        ModelCase(
            "output_with_unknown_tag",
            _bad(_tag_output_with_unknown_tag, {"tag0": _spec()}),
            runtime=False,
            paths=DM,
            doc="the output node's stray tag is dropped from the result, as every top-level tag",
        ),
        ModelCase("split_output_demo", build_split_output, runtime=False, paths=DM),
        ModelCase(
            "edited_add_alpha",
            _bad(_edit_add_alpha, {"tag0": _spec()}),
            runtime=False,
            paths=DM,
            eager_check=False,  # the edit changes what the model computes, in both
            doc="a valid edit the reference does not see is lowered as the reference lowers it",
        ),
        ModelCase(
            "chain_addmul_then_xnnpack",
            build_chain(AddMulPartitionerDemo, XnnpackPartitioner),
            runtime=False,  # BackendWithCompilerDemo is not in the pip runtime
            paths=ALL + ("etl",),
            doc="issue #13: the second lowering must not replace the first one's delegates",
        ),
        ModelCase(
            "chain_xnnpack_adds_then_xnnpack",
            build_chain(_xnn_adds, XnnpackPartitioner),
            runtime=True,
            paths=ALL + ("etl",),
        ),
        ModelCase(
            "chain_xnnpack_adds_then_per_op",
            build_chain(_xnn_adds, lambda: XnnpackPartitioner(per_op_mode=True)),
            runtime=True,
            paths=("manager", "etl"),
        ),
        ModelCase(
            "chain_three_partitioners",
            build_chain(_xnn_adds, AddMulPartitionerDemo, XnnpackPartitioner),
            runtime=False,
            paths=ALL + ("etl",),
        ),
        ModelCase(
            "chain_first_leaves_nothing",
            build_chain(_nothing, XnnpackPartitioner),
            runtime=True,
            paths=("direct", "etl"),
        ),
        ModelCase(
            "output_and_owned_param",
            build_output_and_owned(through_cond=False, with_mul=False),
            runtime=True,
            paths=DM,
            doc="fuzz F2: a node read by the output and by the last delegate, which owns a "
            "parameter; its users end in the order the reference's program adjustment leaves",
        ),
        ModelCase(
            "output_and_owned_param_and_buffer",
            build_output_and_owned(through_cond=False, with_mul=True),
            runtime=True,
            paths=DM,
        ),
        ModelCase(
            "output_and_owned_param_cond",
            build_output_and_owned(through_cond=True, with_mul=False),
            runtime=True,
            paths=DM,
            doc="fuzz F2's own shape: the node is a cond's getitem",
        ),
        ModelCase(
            "chain_cond_xnnpack",
            build_chain(_xnn_adds, XnnpackControlFlowPartitioner, model_factory=CondModel,
                        inputs_factory=_cond_inputs),
            runtime=True,
            paths=DM,
            doc="delegates inside cond branches are named per branch module",
        ),
    ]
}


def normalize_message(msg: str) -> str:
    return re.sub(r"0x[0-9a-fA-F]+", ADDR, msg)
