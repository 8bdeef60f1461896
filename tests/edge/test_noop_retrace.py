"""When a retrace is skipped, and the meta a skipped retrace rewrites."""

from __future__ import annotations

import operator

import torch

from fastlower.in_process.edge.noop_retrace import why_not_skipped
from fastlower.in_process.edge.retrace_meta import rewrite_as_retraced


class _Small(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.linear(x, x).relu() * 2


def _functional():
    program = torch.export.export(_Small(), (torch.randn(4, 4),))
    return program.run_decompositions({})


def _default_table():
    from executorch.exir.tracer import _default_decomposition_table

    return _default_decomposition_table()


def test_empty_table_is_never_skipped():
    assert "empty table" in why_not_skipped(_functional(), {})


def test_an_op_in_the_table_forces_the_retrace():
    program = _functional()  # linear is kept by {} and decomposed by the default table
    assert "linear" in why_not_skipped(program, _default_table())


def test_a_decomposed_program_is_skipped_and_equals_its_retrace():
    program = _functional().run_decompositions(_default_table())
    assert why_not_skipped(program, _default_table()) is None
    retraced = program.run_decompositions(_default_table())
    rewrite_as_retraced(program.graph_module, set())
    # the retrace stores a copy of the operator object: compared by name, as everything
    # that reads original_aten does
    assert [(n.name, str(n.target), str(n.meta.get("original_aten")))
            for n in program.graph.nodes] == \
        [(n.name, str(n.target), str(n.meta.get("original_aten")))
         for n in retraced.graph.nodes]


def test_a_higher_order_op_is_not_proven():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda y: y.relu(), lambda y: y.abs(), (x,))

    program = torch.export.export(Branchy(), (torch.randn(3),)).run_decompositions({})
    program = program.run_decompositions(_default_table())
    assert "not an operator overload" in why_not_skipped(program, _default_table())


def test_an_edge_op_counts_as_its_aten_op():
    from executorch.exir import to_edge

    edge = to_edge(torch.export.export(_Small(), (torch.randn(4, 4),))).exported_program()
    for node in edge.graph.nodes:  # a retrace drops them (another rule, tested below)
        node.meta.pop("debug_handle", None)
    table = {torch.ops.aten.relu.default: None}
    assert "relu" in why_not_skipped(edge, table)


def test_a_data_dependent_size_is_not_proven():
    class Gather(torch.nn.Module):
        def forward(self, x, n):
            count = n.item()
            torch._check(count >= 0)
            torch._check(count <= x.shape[0])
            return x[:count].relu()

    program = torch.export.export(Gather(), (torch.randn(8), torch.tensor(3)))
    program = program.run_decompositions({}).run_decompositions(_default_table())
    assert "unbacked" in why_not_skipped(program, _default_table())


def test_a_symbolic_size_is_not_proven():
    seq = torch.export.Dim("seq", min=2, max=16)
    program = torch.export.export(_Small(), (torch.randn(4, 4),),
                                  dynamic_shapes=({0: seq, 1: None},))
    program = program.run_decompositions({}).run_decompositions(_default_table())
    assert "symbolic" in why_not_skipped(program, _default_table())


class _Chunks(torch.nn.Module):
    def forward(self, x):
        return sum(part.sum() for part in torch.nn.functional.linear(x, x).chunk(2, -1))


def _as_retraced_and_retraced(program):
    retraced = program.run_decompositions(_default_table())
    rewrite_as_retraced(program.graph_module, set())
    return ([(n.name, str(n.target), str(n.meta.get("original_aten")))
             for n in program.graph.nodes],
            [(n.name, str(n.target), str(n.meta.get("original_aten")))
             for n in retraced.graph.nodes])


def test_a_getitem_takes_its_producers_original_aten():
    """A retrace that decomposed split.Tensor leaves its getitems split.Tensor; the next
    (no-op) retrace gives them split_with_sizes, the producer's operator, as the skip."""
    program = torch.export.export(_Chunks(), (torch.randn(4, 4),)).run_decompositions({})
    program = program.run_decompositions(_default_table())
    getitems = [n for n in program.graph.nodes if n.target is operator.getitem]
    assert getitems and all(str(n.meta["original_aten"]) == "aten.split.Tensor"
                            for n in getitems)  # the case holds
    assert why_not_skipped(program, _default_table()) is None
    skipped, retraced = _as_retraced_and_retraced(program)
    assert skipped == retraced
    assert ("getitem", "<built-in function getitem>", "aten.split_with_sizes.default") \
        in retraced


def test_a_meta_key_a_retrace_drops_is_not_proven():
    program = _functional().run_decompositions(_default_table())
    node = next(n for n in program.graph.nodes if n.op == "call_function")
    node.meta["set_by_a_pass"] = 1
    assert "set_by_a_pass" in why_not_skipped(program, _default_table())


def test_a_getitem_unlike_its_producer_is_not_proven():
    program = torch.export.export(_Chunks(), (torch.randn(4, 4),)).run_decompositions({})
    program = program.run_decompositions(_default_table())
    getitem = next(n for n in program.graph.nodes if n.target is operator.getitem)
    getitem.meta["nn_module_stack"] = {"elsewhere": ("elsewhere", torch.nn.Module)}
    assert "nn_module_stack" in why_not_skipped(program, _default_table())
    getitem.meta["nn_module_stack"] = getitem.args[0].meta.get("nn_module_stack")
    del getitem.meta["original_aten"]
    assert "original_aten" in why_not_skipped(program, _default_table())
