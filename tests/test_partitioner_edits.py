"""Edits a partitioner makes that the reference's structure check does not see.

The differential suite compares the outcome with the reference (ModelCase
``edited_add_alpha``, ErrorCase ``edited_cat_dim``); these tests check what
fastlower adds: the warning, ``strict_partitioners()``, and which edits count.
"""

import logging
import warnings

import pytest
import torch
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.error import InternalError

import fastlower
import fastlower.base.state
from fastlower.lowering.edits import find_edits
from tests.models.partitioners import _spec
from tests.models.tagging import _bad, _edit_add_alpha, _tag_first_add, build_edited_cat_dim


def _lower(build, strict=False):
    built = build()
    program = built.epm.exported_program()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if strict:
            with fastlower.strict_partitioners():
                return program, fastlower.to_backend(program, built.partitioner)
        return program, fastlower.to_backend(program, built.partitioner)


def test_a_valid_edit_is_lowered_with_one_warning_naming_it(caplog):
    with caplog.at_level(logging.WARNING, logger="fastlower"):
        _, lowered = _lower(_bad(_edit_add_alpha, {"tag0": _spec()}))
    edits = [r for r in caplog.records if "changed node arguments" in r.getMessage()]
    assert len(edits) == 1
    assert "node 'aten_add_tensor' argument 'alpha' from None to 5.0" in edits[0].getMessage()
    assert any(n.target is torch.ops.higher_order.executorch_call_delegate
               for n in lowered.graph.nodes)


def test_strict_partitioners_refuses_the_edit_and_names_it():
    with pytest.raises(fastlower.PartitionerEditError) as info:
        _lower(_bad(_edit_add_alpha, {"tag0": _spec()}), strict=True)
    err = info.value
    assert isinstance(err, AssertionError) and isinstance(err, fastlower.GraphModifiedError)
    assert err.node == "aten_add_tensor"
    assert [(e.node, e.argument, e.old, e.new) for e in err.edits] == [
        ("aten_add_tensor", "alpha", None, 5.0)]
    assert "from None to 5.0" in str(err)


def test_strict_partitioners_is_per_context():
    """The switch is a context variable: another thread does not see it."""
    import threading

    seen = []
    with fastlower.strict_partitioners():
        t = threading.Thread(target=lambda: seen.append(
            fastlower.base.state.strict_partitioners_enabled()))
        t.start()
        t.join()
        assert fastlower.base.state.strict_partitioners_enabled()
    assert seen == [False] and not fastlower.base.state.strict_partitioners_enabled()


def test_an_invalid_edit_fails_in_the_partition_verifier_and_leaves_the_input():
    built = build_edited_cat_dim()
    program = built.epm.exported_program()
    code, cat_args = program.graph_module.code, [
        n.args for n in program.graph.nodes if n.target == exir_ops.edge.aten.cat.default]
    with pytest.raises(InternalError, match="Dimension out of range"):
        fastlower.to_backend(program, built.partitioner)
    assert program.graph_module.code == code
    assert [n.args[1] for n in program.graph.nodes
            if n.target == exir_ops.edge.aten.cat.default] == [a[1] for a in cat_args] == [1]


def _tag_and(edit):
    def fn(ep):
        _tag_first_add(ep)
        edit(ep)
    return fn


def test_metadata_is_not_an_edit():
    def touch_meta(ep):
        for n in ep.graph.nodes:
            n.meta["my_partitioner_note"] = 1
            n.meta["no_copy"] = False

    built = _bad(_tag_and(touch_meta), {"tag0": _spec()})()
    program = built.epm.exported_program()
    tagged = built.partitioner(program).tagged_exported_program
    assert not find_edits(tagged.graph_module, build_original(), structure_checked=True)


def build_original():
    return _bad(_tag_first_add, {"tag0": _spec()})().epm.exported_program().graph_module


def test_replacing_a_node_input_is_a_structure_edit():
    def edit(ep):
        for n in ep.graph.nodes:
            if n.name == "aten_mul_tensor":
                n.args = (n.args[0], 3.0)  # a node argument replaced by a number
            if n.name == "aten_sub_tensor":
                n.kwargs = {"alpha": 2}

    built = _bad(_tag_and(edit), {"tag0": _spec()})()
    tagged = built.partitioner(built.epm.exported_program()).tagged_exported_program
    found = find_edits(tagged.graph_module, build_original(), structure_checked=False)
    # the mul's input list changed: a structure edit, not an argument edit
    assert found.unknown and not found.args


def test_kwarg_edits_and_their_order():
    def alpha_two(ep):
        for n in ep.graph.nodes:
            if n.name == "aten_sub_tensor":
                n.kwargs = {"alpha": 2}

    built = _bad(_tag_and(alpha_two), {"tag0": _spec()})()
    tagged = built.partitioner(built.epm.exported_program()).tagged_exported_program
    found = find_edits(tagged.graph_module, build_original(), structure_checked=True)
    assert [(e.node, e.argument, e.old, e.new) for e in found.args] == [
        ("aten_sub_tensor", "alpha", None, 2)]
    assert found.touches(tagged.graph_module, [e.edited_node for e in found.args])
    assert not found.touches(tagged.graph_module, [])


def test_validation_disabled_with_a_structure_edit_verifies_every_partition():
    def add_relu(ep):
        _tag_first_add(ep)
        out = ep.graph.output_node()
        with ep.graph.inserting_before(out):
            ep.graph.call_function(exir_ops.edge.aten.relu.default, (out.args[0][0],))

    built = _bad(add_relu, {"tag0": _spec()})()
    tagged = built.partitioner(built.epm.exported_program()).tagged_exported_program
    found = find_edits(tagged.graph_module, build_original(), structure_checked=False)
    assert found.unknown and found.touches(tagged.graph_module, [])


def test_the_order_of_kwargs_is_not_an_edit():
    def with_kwargs(order):
        def fn(ep):
            _tag_first_add(ep)
            for n in ep.graph.nodes:
                if n.name == "aten_sub_tensor":
                    n.kwargs = dict(order)
        return fn

    a = _bad(with_kwargs([("alpha", 2), ("out_hint", None)]), {"tag0": _spec()})()
    b = _bad(with_kwargs([("out_hint", None), ("alpha", 2)]), {"tag0": _spec()})()
    ta = a.partitioner(a.epm.exported_program()).tagged_exported_program
    tb = b.partitioner(b.epm.exported_program()).tagged_exported_program
    assert not find_edits(ta.graph_module, tb.graph_module, structure_checked=True)
    assert find_edits(ta.graph_module, build_original(), structure_checked=True)
