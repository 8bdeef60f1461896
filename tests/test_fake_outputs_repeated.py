"""fastlower.in_process.fake_outputs.repeated: inside a lowering step, an ``ExportPass`` call
that torch's fake-tensor cache cannot tell apart from an earlier pass's gets that call's
output objects instead of a new run. Each test runs the same passes on two exports of the
same program, inside the block and outside it (ExecuTorch's way), and compares every
node's value (metadata, and which values are the same object or a view of which), so a
reuse the premise does not cover shows as a difference: a duplicate node, an in-place
write, a data-dependent size, a view of a value run again, grad mode, a corrupted memo
in verify mode, torch's own pass base beside ExecuTorch's."""

from __future__ import annotations

import pytest
import torch
from executorch.exir.pass_base import ExportPass

from fastlower.in_process import fake_outputs
from fastlower.in_process.fake_outputs import repeated
from fastlower.in_process.fake_outputs.compare import FakeOutputsVerificationError


@pytest.fixture(autouse=True)
def _settings(monkeypatch):
    monkeypatch.delenv("FASTLOWER_FAKE_OUTPUTS", raising=False)


class _Constant(ExportPass):
    """Adds a real constant tensor (as ExecuTorch's ScalarToTensorPass makes one): torch's
    cache does not take the call, so it runs in every pass and its output is new."""

    def call_operator(self, op, args, kwargs, meta):
        if op == torch.ops.aten.add.Tensor and not isinstance(args[1], torch.Tensor):
            with torch.utils._python_dispatch._disable_current_modes():
                constant = torch.zeros(())
            return super().call_operator(op, (args[0], constant), kwargs, meta)
        return super().call_operator(op, args, kwargs, meta)


class _CloneAfterSin(ExportPass):
    """Adds a clone after each sin, a node of its own (empty metadata): torch.fx gives it
    autograd's sequence number as it stands."""

    def call_operator(self, op, args, kwargs, meta):
        from executorch.exir.pass_base import NodeMetadata

        out = super().call_operator(op, args, kwargs, meta)
        if op == torch.ops.aten.sin.default:
            return super().call_operator(torch.ops.aten.clone.default, (out,), {},
                                         NodeMetadata({}))
        return out


def _graph(module: torch.nn.Module, *inputs, dynamic=None) -> torch.fx.GraphModule:
    torch.manual_seed(0)
    return torch.export.export(module, inputs, dynamic_shapes=dynamic,
                               strict=False).graph_module


def _run(graph: torch.fx.GraphModule, passes, inside: bool, grad=None):
    """``passes`` over ``graph``; ``grad``: per pass, grad mode on or off."""
    grad = grad or [False] * len(passes)
    block = fake_outputs.known_outputs() if inside else _nothing()
    with block:
        for each, enabled in zip(passes, grad):
            with torch.set_grad_enabled(enabled):
                graph = each(graph).graph_module
    return graph


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _described(graph: torch.fx.GraphModule) -> list:
    """Per node: its name, target and value's metadata, and which earlier node's value it
    is (the same object) or views."""
    import torch.utils._pytree as pytree

    nodes = list(graph.graph.nodes)
    owners = {}
    out = []
    for index, node in enumerate(nodes):
        leaves = pytree.tree_leaves(node.meta.get("val"))
        facts = []
        for leaf in leaves:
            same = owners.get(id(leaf))
            base = owners.get(id(getattr(leaf, "_base", None))) if hasattr(leaf, "_base") else None
            text = str(leaf) if not isinstance(leaf, torch.Tensor) else (
                [str(s) for s in leaf.shape], [str(s) for s in leaf.stride()],
                str(leaf.storage_offset()), leaf.dtype, leaf.requires_grad, leaf.is_leaf)
            facts.append((text, same, base, getattr(leaf, "_base", None) is not None))
        for leaf in leaves:
            owners.setdefault(id(leaf), index)
        out.append((node.name, str(node.target), facts,
                    str(node.meta.get("unbacked_bindings")), node.meta.get("seq_nr")))
    # autograd's sequence numbers differ between two runs by a constant: compare the steps
    numbers = [entry[4] for entry in out if entry[4] is not None]
    first = min(numbers, default=0)
    return [(*entry[:4], None if entry[4] is None else entry[4] - first) for entry in out]


def _same_both_ways(make, passes, grad=None) -> int:
    reference = _described(_run(make(), passes, inside=False, grad=grad))
    fake_outputs.LAST.repeats_reused = 0
    inside = _described(_run(make(), passes, inside=True, grad=grad))
    assert inside == reference
    return fake_outputs.LAST.repeats_reused


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = torch.relu(self.linear(x))
        return (y * 2 + x).sum(-1, keepdim=True), y.t()


def test_passes_that_change_nothing_reuse_and_match():
    reused = _same_both_ways(lambda: _graph(_Block(), torch.randn(4, 8)),
                             [ExportPass(), ExportPass(), ExportPass()])
    assert reused >= 8  # the later passes took the first's outputs (the view t runs)


def test_a_symbolic_program_matches():
    reused = _same_both_ways(
        lambda: _graph(_Block(), torch.randn(4, 8), dynamic=({0: torch.export.Dim("b")},)),
        [ExportPass(), ExportPass()])
    assert reused >= 4


class _Twice(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + torch.relu(x)


def test_duplicate_calls_get_outputs_of_their_own():
    """Two relu nodes on one input: each keeps an object of its own, as in ExecuTorch."""
    reused = _same_both_ways(lambda: _graph(_Twice(), torch.randn(3)),
                             [ExportPass(), ExportPass(), ExportPass()])
    assert reused >= 4


def _in_place_graph() -> torch.fx.GraphModule:
    """clone, then unsqueeze_ on the clone (a write that changes its metadata), then mul."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    mode = FakeTensorMode()
    x.meta["val"] = mode.from_tensor(torch.randn(3, 4))
    clone = graph.call_function(torch.ops.aten.clone.default, (x,))
    grown = graph.call_function(torch.ops.aten.unsqueeze_.default, (clone, 0))
    product = graph.call_function(torch.ops.aten.mul.Tensor, (grown, grown))
    graph.output((product,))
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    with mode:
        for node in (clone, grown, product):
            node.meta["val"] = node.target(*[a.meta["val"] if isinstance(a, torch.fx.Node)
                                             else a for a in node.args])
    return module


def test_an_output_written_in_place_is_not_given_again():
    """ExecuTorch's second pass clones anew; giving the first pass's clone (already grown
    by unsqueeze_) would grow it twice."""
    _same_both_ways(_in_place_graph, [ExportPass(), ExportPass(), ExportPass()])


class _DataDependent(torch.nn.Module):
    def forward(self, x, n):
        count = n.item()
        torch._check(count >= 0)
        torch._check(count <= 8)
        return x.new_zeros(count) + 1


def test_a_data_dependent_size_is_made_anew_in_each_pass():
    """Each pass makes a new unbacked symbol for ``item()``; what depends on it follows."""
    _same_both_ways(lambda: _graph(_DataDependent(), torch.randn(3), torch.tensor(2)),
                    [ExportPass(), ExportPass(), ExportPass()])


class _ViewOfAdd(torch.nn.Module):
    def forward(self, x):
        return (x + 1).view(-1) * 2


def test_a_view_of_a_value_run_again_views_the_new_value():
    """The add runs in every pass (a real constant); the view of it must view the new
    output, not the last pass's."""
    reused = _same_both_ways(lambda: _graph(_ViewOfAdd(), torch.randn(2, 3)),
                             [_Constant(), _Constant(), _Constant()])
    assert reused > 0  # the multiplication after the view was taken


class _Param(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4))

    def forward(self, x):
        return torch.sin(x * self.weight)


@pytest.mark.parametrize("grad", [[False, False, True], [True, True, False], [True, True, True]])
def test_grad_mode_is_part_of_the_key(grad):
    """The same call under grad mode gives outputs autograd recorded; under no_grad not.
    A call answered under grad mode advances autograd's sequence number as its run would
    (torch.fx writes it into a new node's ``seq_nr``)."""
    graph = _graph(_Param(), torch.randn(4))
    if not any(getattr(node.meta.get("val"), "requires_grad", False)
               for node in graph.graph.nodes):
        pytest.skip("no placeholder requires grad in this torch's export")
    _same_both_ways(lambda: _graph(_Param(), torch.randn(4)),
                    [ExportPass(), ExportPass(), _CloneAfterSin()], grad=grad)


def test_verify_mode_raises_on_a_corrupted_memo(monkeypatch):
    monkeypatch.setenv("FASTLOWER_FAKE_OUTPUTS", "verify")
    graph = _graph(_Block(), torch.randn(4, 8))
    with fake_outputs.known_outputs() as scope:
        graph = ExportPass()(graph).graph_module
        slot = next(slots[0] for slots in scope.repeats.slots.values()
                    if isinstance(slots[0].outputs, torch.Tensor))
        with slot.outputs.fake_mode:
            slot.outputs = torch.empty(7, 7)
        with pytest.raises(FakeOutputsVerificationError, match="shape"):
            ExportPass()(graph)


def test_verify_mode_passes_and_run_mode_reuses_nothing(monkeypatch):
    monkeypatch.setenv("FASTLOWER_FAKE_OUTPUTS", "verify")
    assert _same_both_ways(lambda: _graph(_Block(), torch.randn(4, 8)),
                           [ExportPass(), ExportPass()]) > 0
    monkeypatch.setenv("FASTLOWER_FAKE_OUTPUTS", "run")
    assert _same_both_ways(lambda: _graph(_Block(), torch.randn(4, 8)),
                           [ExportPass(), ExportPass()]) == 0


def test_an_edge_operator_counts_as_its_aten_operator():
    from executorch.exir.dialects._ops import ops as exir_ops

    assert repeated._operator(exir_ops.edge.aten.mul.Tensor) == (torch.ops.aten.mul.Tensor,
                                                                 False)
    assert repeated._operator(torch.ops.aten.add_.Tensor) == (torch.ops.aten.add_.Tensor, True)
    assert repeated._operator(torch.ops.higher_order.cond)[0] is None


def _view_copies():
    from torch._export.passes.replace_view_ops_with_view_copy_ops_pass import (
        ReplaceViewOpsWithViewCopyOpsPass,
    )

    return ReplaceViewOpsWithViewCopyOpsPass()


@pytest.mark.parametrize("order", ["torch_first", "executorch_first"])
def test_torchs_pass_base_gives_and_takes_outputs(order):
    """ExecuTorch's edge stage runs torch's ``ReplaceViewOpsWithViewCopyOpsPass`` (torch's
    deprecated pass base, its own ``ProxyValue``) before its ``ExportPass``es: a call
    repeated across the two bases takes the earlier one's outputs, either way round."""
    def passes():
        first, second = (_view_copies(), ExportPass()) if order == "torch_first" else (
            ExportPass(), _view_copies())
        return [first, second]

    reused = _same_both_ways(lambda: _graph(_Block(), torch.randn(4, 8)), passes())
    assert reused >= 4  # the second pass took the first's: linear, relu, mul, add...


def test_torchs_pass_base_with_a_data_dependent_size():
    """torch's base records unbacked bindings on new nodes; each pass's ``item()`` makes a
    new symbol and what depends on it runs, the rest is taken, as ExecuTorch runs it."""
    _same_both_ways(lambda: _graph(_DataDependent(), torch.randn(3), torch.tensor(2)),
                    [_view_copies(), _view_copies(), ExportPass()])
