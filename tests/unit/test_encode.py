"""``fastlower.core.encode``: FX graphs and exported programs to the planner's flat arrays.

Small graphs built by hand (``torch.fx.Graph``) or exported from tiny modules; every
test asserts the concrete arrays the planner receives.
"""

from __future__ import annotations

import operator

import torch
from torch import nn
from torch.export import export

from fastlower.core.schema import (
    OP_CALL_FUNCTION, OP_CALL_METHOD, OP_CALL_MODULE, OP_GET_ATTR, OP_OUTPUT, OP_PLACEHOLDER,
    OUT_BUFFER_MUTATION, OUT_USER, ROLE_BUFFER, ROLE_CONSTANT, ROLE_OTHER, ROLE_PARAMETER,
    ROLE_USER_INPUT,
)
from fastlower.core.encode import (
    UNKNOWN_TAG, Interner, TargetKeys, encode_graph, structure_arrays, taken_lowered_indices,
)
from fastlower.core.plan import structure_difference


class _Stateful(nn.Module):
    """A parameter, a mutated buffer, a lifted constant and one user input."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(2))
        self.register_buffer("b", torch.zeros(2))
        self.c = torch.tensor([1.0, 2.0])  # lifted tensor constant

    def forward(self, x):
        self.b.add_(x)
        y = x + self.w
        return y * self.c, y.sin()


def _stateful_program():
    # run_decompositions functionalises the buffer update into a BUFFER_MUTATION output
    return export(_Stateful(), (torch.ones(2),)).run_decompositions({})


def test_exported_program_arrays():
    ep = _stateful_program()
    names = [n.name for n in ep.graph.nodes]
    assert names == ["p_w", "b_b", "c_c", "x", "add", "add_1", "mul", "sin", "output"]
    for n in ep.graph.nodes:
        if n.name in ("add_1", "mul"):
            n.meta["delegation_tag"] = "t1"
        if n.name == "sin":
            n.meta["delegation_tag"] = "stray"  # not among the partition tags
    enc = encode_graph(ep.graph_module, {"t0": 0, "t1": 1}, ep, Interner())
    a = enc.arrays
    assert a.names == names
    ph, fn = OP_PLACEHOLDER, OP_CALL_FUNCTION
    assert a.op == [ph, ph, ph, ph, fn, fn, fn, fn, OP_OUTPUT]
    assert a.prioritized == [0] * 9
    # node.all_input_nodes order, and node.users in dict order
    assert a.inputs == [[], [], [], [], [1, 3], [3, 0], [5, 2], [5], [4, 6, 7]]
    assert a.users == [[5], [4], [6], [4, 5], [8], [6, 7], [8], [8], []]
    assert a.tags == [-1, -1, -1, -1, -1, 1, 1, UNKNOWN_TAG, -1]
    assert enc.unknown_tags == {7: "stray"}
    assert a.roles == ([ROLE_PARAMETER, ROLE_BUFFER, ROLE_CONSTANT, ROLE_USER_INPUT]
                       + [ROLE_OTHER] * 5)
    # input-spec targets, interned in signature order (the output's "b" reuses id 1)
    assert enc.targets.values == ["w", "b", "c"]
    assert a.targets == [0, 1, 2, -1, -1, -1, -1, -1, -1]
    assert a.out_args == [4, 6, 7]
    assert a.out_kinds == [OUT_BUFFER_MUTATION, OUT_USER, OUT_USER]
    assert a.out_targets == [1, -1, -1]
    assert a.fake_vals == [1] * 8 + [0]  # every node but the output has a FakeTensor val
    assert a.debug_handles == [0] * 9
    assert enc.no_copy == [0] * 9
    assert enc.nested == {}
    assert enc.index == {n: i for i, n in enumerate(ep.graph.nodes)}
    assert enc.nodes == list(ep.graph.nodes)
    assert enc.taken_lowered == []


def _hand_graph():
    """Every op kind, a prioritised op, duplicate inputs, kwargs, a non-node output."""
    root = nn.Module()
    root.lin = nn.Linear(2, 2)
    root.register_buffer("k", torch.ones(2))
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.placeholder("y")
    k = g.get_attr("k")
    s = g.call_function(operator.add, (x, y))  # prioritised by legalize_graph
    m = g.call_module("lin", (s,))
    t = g.call_function(torch.mul, (m, m), {"out": None})
    v = g.call_method("view", (t, -1))
    w = g.call_function(torch.add, (x,), {"other": k, "alpha": 2})
    g.output((v, w, None))
    return torch.fx.GraphModule(root, g)


def test_hand_built_graph_without_program():
    gm = _hand_graph()
    nodes = list(gm.graph.nodes)
    nodes[0].meta["no_copy"] = True
    nodes[3].meta["debug_handle"] = 7
    nodes[4].meta["debug_handle"] = "not an int"
    nodes[5].meta["delegation_tag"] = "b"
    nodes[6].meta["delegation_tag"] = "a"
    nodes[3].args = tuple(nodes[3].args)  # re-assigned args: add moves last in x's users
    enc = encode_graph(gm, {"a": 0, "b": 1}, None, Interner())
    a = enc.arrays
    assert a.names == ["x", "y", "k", "add", "lin", "mul", "view", "add_1", "output"]
    assert a.op == [OP_PLACEHOLDER, OP_PLACEHOLDER, OP_GET_ATTR, OP_CALL_FUNCTION, OP_CALL_MODULE,
                    OP_CALL_FUNCTION, OP_CALL_METHOD, OP_CALL_FUNCTION, OP_OUTPUT]
    assert a.prioritized == [0, 0, 0, 1, 0, 0, 0, 0, 0]
    # a node read twice is one input; kwargs' nodes come after args'
    assert a.inputs == [[], [], [], [0, 1], [3], [4], [5], [0, 2], [6, 7]]
    assert a.users == [[7, 3], [3], [7], [4], [5], [6], [8], [8], []]  # users' dict order
    assert a.tags == [-1, -1, -1, -1, -1, 1, 0, -1, -1]
    # without a program every placeholder is a user input and every output a user output
    assert a.roles == [ROLE_USER_INPUT, ROLE_USER_INPUT] + [ROLE_OTHER] * 7
    assert a.targets == [-1] * 9
    assert a.out_args == [6, 7, -1]
    assert a.out_kinds == [OUT_USER] * 3
    assert a.out_targets == [-1] * 3
    assert a.debug_handles == [0, 0, 0, 7, 0, 0, 0, 0, 0]
    assert a.fake_vals == [0] * 9
    assert enc.no_copy == [1, 0, 0, 0, 0, 0, 0, 0, 0]
    assert enc.unknown_tags == {}
    assert enc.targets.values == []


def test_single_output_node_is_one_output():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_function(torch.neg, (x,)))
    enc = encode_graph(torch.fx.GraphModule(nn.Module(), g), {}, None, Interner())
    assert enc.arrays.out_args == [1]
    assert enc.arrays.out_kinds == [OUT_USER]


def test_interner_shares_ids_and_maps_none_to_minus_one():
    intern = Interner()
    assert [intern("a"), intern("b"), intern("a"), intern(None)] == [0, 1, 0, -1]
    assert intern.values == ["a", "b"]


class _Cond(nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,)) + 1


def test_control_flow_bodies_are_encoded_as_nested_graphs():
    ep = export(_Cond(), (torch.ones(2),))
    gm = ep.graph_module
    nodes = list(gm.graph.nodes)
    cond = next(i for i, n in enumerate(nodes) if n.target is torch.ops.higher_order.cond)
    intern = Interner()
    enc = encode_graph(gm, {}, ep, intern)
    assert list(enc.nested) == [cond]
    (t_attr, t_enc), (f_attr, f_enc) = enc.nested[cond]
    assert (t_attr, f_attr) == ("true_graph_0", "false_graph_0")
    assert t_enc.graph_module is gm.true_graph_0
    assert t_enc.arrays.op == [OP_PLACEHOLDER, OP_CALL_FUNCTION, OP_OUTPUT]
    assert t_enc.arrays.roles[0] == ROLE_USER_INPUT
    assert t_enc.arrays.inputs == [[], [0], [1]]
    assert t_enc.arrays.out_args == [1]
    assert t_enc.arrays.out_kinds == [OUT_USER]
    assert [n.target for n in f_enc.nodes][1] is torch.ops.aten.cos.default
    assert t_enc.targets is intern and f_enc.targets is intern  # one interner for the tree
    assert t_enc.nested == {} and f_enc.nested == {}


def test_taken_lowered_indices():
    m = nn.Module()
    m.lowered_module_3 = nn.Module()
    m.register_buffer("lowered_module_0", torch.ones(1))
    m.lowered_module_01 = 1  # not a name the reference would allocate
    m.lowered_module_x = 1
    other = nn.Module()
    other.lowered_module_12 = nn.Module()
    assert taken_lowered_indices(m) == [0, 3]
    assert taken_lowered_indices(m, other) == [0, 3, 12]
    gm = _hand_graph()
    gm.lowered_module_2 = nn.Module()
    assert encode_graph(gm, {}, None, Interner()).taken_lowered == [2]


def test_target_keys_by_value_for_strings_by_identity_otherwise():
    keys = TargetKeys()
    f, g = (lambda: 0), (lambda: 0)
    assert [keys("a"), keys(f), keys("a"), keys(g), keys(f)] == [0, 1, 0, 2, 1]


def test_structure_arrays_and_difference():
    gm = _hand_graph()
    keys = TargetKeys()
    op, target, offsets, flat = structure_arrays(gm, keys)
    assert op == [OP_PLACEHOLDER, OP_PLACEHOLDER, OP_GET_ATTR, OP_CALL_FUNCTION, OP_CALL_MODULE,
                  OP_CALL_FUNCTION, OP_CALL_METHOD, OP_CALL_FUNCTION, OP_OUTPUT]
    assert target == [0, 1, 2, 3, 4, 5, 6, 7, 8]  # all distinct
    assert offsets == [0, 0, 0, 0, 2, 3, 4, 5, 7, 9]
    assert flat == [0, 1, 3, 4, 5, 0, 2, 6, 7]
    assert structure_difference(gm, _hand_graph()) == -1
    changed = _hand_graph()
    list(changed.graph.nodes)[5].target = torch.sub
    assert structure_difference(gm, changed) == 5
    rewired = _hand_graph()
    nodes = list(rewired.graph.nodes)
    nodes[7].args = (nodes[1],)  # add_1 reads y instead of x
    assert structure_difference(gm, rewired) == 7
    shorter = _hand_graph()
    out = shorter.graph.output_node()
    out.args = ((list(shorter.graph.nodes)[6], None, None),)
    shorter.graph.erase_node(list(shorter.graph.nodes)[7])
    assert structure_difference(gm, shorter) == 7
