"""Bad input: a typed error naming node, tag and rule; the caller's program unchanged."""

from __future__ import annotations

from typing import Callable, Dict, Optional

import pytest
import torch
from executorch.exir import to_edge
from executorch.exir.backend.canonical_partitioners.pattern_op_partitioner import (  # noqa: F401
    generate_partitions_from_list_of_nodes,
)
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.test.backend_with_compiler_demo import BackendWithCompilerDemo
from executorch.exir.dialects._ops import ops as exir_ops

import fastlower
from fastlower import errors

SPEC = DelegationSpec(BackendWithCompilerDemo.__name__, [])


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4))

    def forward(self, x, y):
        a = torch.mm(x, self.w)
        b = a + y
        c = torch.mm(b, self.w)
        return c + x


def edge_program():
    torch.manual_seed(0)
    ep = torch.export.export(Model(), (torch.randn(4, 4), torch.randn(4, 4)))
    return to_edge(ep).exported_program()


class TagPartitioner(Partitioner):
    """Tags nodes by a rule; optionally misbehaves afterwards."""

    def __init__(self, rule: Callable[[torch.fx.Node], Optional[str]],
                 tags: Optional[Dict[str, DelegationSpec]] = "auto",
                 after: Optional[Callable] = None):
        self.rule, self.tags, self.after = rule, tags, after

    def partition(self, program):
        used = {}
        for node in program.graph.nodes:
            tag = self.rule(node)
            if tag is not None:
                node.meta["delegation_tag"] = tag
                used[tag] = SPEC
        if self.after is not None:
            self.after(program)
        tags = used if self.tags == "auto" else self.tags
        return PartitionResult(tagged_exported_program=program, partition_tags=tags)


def _is(node, *targets):
    return node.op == "call_function" and node.target in targets


MM = exir_ops.edge.aten.mm.default
ADD = exir_ops.edge.aten.add.Tensor


def snapshot(ep):
    return (ep.graph_module.code, str(ep.graph_signature), list(ep.state_dict),
            {k: v.clone() for k, v in ep.state_dict.items()}, list(ep.constants),
            [dict(n.meta) for n in ep.graph.nodes])


def assert_unchanged(before, ep):
    after = snapshot(ep)
    assert after[:3] == before[:3]
    assert after[4] == before[4]
    for k in before[3]:
        assert torch.equal(before[3][k], after[3][k])
    assert [sorted(m) for m in before[5]] == [sorted(m) for m in after[5]]


def lower_and_expect(partitioner, exc_type, *words):
    ep = edge_program()
    before = snapshot(ep)
    with pytest.raises(exc_type) as info:
        fastlower.to_backend(ep, partitioner)
    assert isinstance(info.value, errors.FastlowerError)
    for word in words:  # the message is the reference's; fastlower's context is in notes
        assert word in errors.describe(info.value), errors.describe(info.value)
    assert_unchanged(before, ep)
    return info.value


def test_tagged_output_node():
    err = lower_and_expect(TagPartitioner(lambda n: "t0" if n.op == "output" else None),
                           errors.TaggedOutputError, "output", "t0", "tagged-output")
    assert isinstance(err, RuntimeError) and err.tag == "t0" and err.node == "output"


def test_tagged_user_input_placeholder():
    err = lower_and_expect(TagPartitioner(lambda n: "t0" if n.name == "x" else None),
                           errors.TaggedUserInputError, "'x'", "t0", "tagged-user-input")
    assert isinstance(err, RuntimeError)


def test_no_copy_constant_used_by_other_tag():
    def rule(node):
        if node.op == "placeholder" and node.name == "p_w":
            node.meta["no_copy"] = True
            return "t0"
        if _is(node, MM):
            return "t0" if node.args[0].name == "x" else "t1"
        return None

    err = lower_and_expect(TagPartitioner(rule), errors.SharedConstantError, "p_w", "t0", "t1",
                           "no_copy")
    assert isinstance(err, RuntimeError)


def test_partitioner_that_mutates_the_graph():
    def mutate(program):
        for node in program.graph.nodes:
            if _is(node, ADD):
                node.target = exir_ops.edge.aten.sub.Tensor
                break

    err = lower_and_expect(TagPartitioner(lambda n: None, after=mutate),
                           errors.GraphModifiedError, "aten_add_tensor", "should not modify")
    assert isinstance(err, RuntimeError)


def test_partitioner_mutation_allowed_when_validation_disabled():
    def add_unused_node(program):
        for node in program.graph.nodes:
            if _is(node, ADD):
                node.meta["seen"] = True  # meta only: not a graph change

    with fastlower.validation_disabled():
        out = fastlower.to_backend(edge_program(), TagPartitioner(
            lambda n: "t0" if _is(n, MM) and n.args[0].name == "x" else None,
            after=add_unused_node))
    assert "executorch_call_delegate" in out.graph_module.code


def test_partition_tags_none():
    err = lower_and_expect(TagPartitioner(lambda n: None, tags=None),
                           errors.MissingPartitionTagsError, "partition_tags")
    assert isinstance(err, RuntimeError)


def test_partition_tags_missing_a_used_tag():
    with fastlower.strict_tags():
        err = lower_and_expect(
            TagPartitioner(lambda n: "t0" if _is(n, MM) and n.args[0].name == "x" else (
                "t9" if _is(n, ADD) else None), tags={"t0": SPEC}),
            errors.UnknownTagError, "t9", "aten_add_tensor", "tag-not-in-partition-tags")
    assert isinstance(err, RuntimeError)


def test_partition_tags_missing_a_used_tag_is_ignored_by_default():
    """As in the reference (its nested-backend tests rely on it), with a warning."""
    ep = edge_program()
    before = snapshot(ep)
    with pytest.warns(errors.UndelegatedTagWarning, match=r"aten_add_tensor \(t9\)"):
        out = fastlower.to_backend(ep, TagPartitioner(
            lambda n: "t0" if _is(n, MM) and n.args[0].name == "x" else (
                "t9" if _is(n, ADD) else None), tags={"t0": SPEC}))
    assert out.graph_module.code.count("executorch_call_delegate(") == 1
    assert "aten_add_tensor" in out.graph_module.code
    assert_unchanged(before, ep)


def test_unknown_backend_id():
    ep = edge_program()
    before = snapshot(ep)
    bad = DelegationSpec("NoSuchBackend", [])
    part = TagPartitioner(lambda n: "t0" if _is(n, MM) and n.args[0].name == "x" else None,
                          tags={"t0": bad})
    with pytest.raises(errors.BackendNotFoundError) as info:
        fastlower.to_backend(ep, part)
    assert isinstance(info.value, NotImplementedError)
    assert str(info.value) == "Backend NoSuchBackend was not found."
    assert "BackendWithCompilerDemo" in errors.describe(info.value)
    assert "BackendWithCompilerDemo" in info.value.known
    assert_unchanged(before, ep)


def test_unknown_backend_id_direct_overload():
    with pytest.raises(errors.BackendNotFoundError, match="NoSuchBackend"):
        fastlower.to_backend("NoSuchBackend", edge_program(), [])


def test_tag_that_cannot_be_fused_without_a_cycle():
    # mm(x, w) -> add -> mm(b, w): tagging both mm but not the add between them
    err = lower_and_expect(TagPartitioner(lambda n: "t0" if _is(n, MM) else None),
                           errors.CyclicPartitionError, "t0", "aten_add_tensor", "->",
                           "partition-not-convex")
    assert err.path[0] == "aten_mm_default" and err.path[-1] == "aten_mm_default_1"
    assert "aten_add_tensor" in err.path


def test_all_errors_share_the_base_class():
    for cls in (errors.TaggedOutputError, errors.TaggedUserInputError, errors.SharedConstantError,
                errors.GraphModifiedError, errors.MissingPartitionTagsError,
                errors.UnknownTagError, errors.CyclicPartitionError,
                errors.BackendNotFoundError, errors.OwnedBufferUpdateReadError,
                errors.BufferMutationOutputError, errors.NoPartitionOutputError):
        assert issubclass(cls, errors.FastlowerError)


class BufferModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.zeros(4, 4))

    def forward(self, x):
        self.b.add_(x)
        return torch.relu(self.b)


def test_owned_buffer_update_read_outside_the_delegate():
    ep = to_edge(torch.export.export(BufferModel(), (torch.randn(4, 4),))).exported_program()
    before = snapshot(ep)

    def rule(node):
        if node.op == "placeholder" and node.name == "b_b":
            return "t0"
        return "t0" if _is(node, ADD) else None

    with pytest.raises(errors.OwnedBufferUpdateReadError) as info:
        fastlower.to_backend(ep, TagPartitioner(rule))
    assert isinstance(info.value, RuntimeError)
    for word in ("t0", "aten_relu_default", "owned-buffer-update-read-outside"):
        assert word in errors.describe(info.value), errors.describe(info.value)
    assert_unchanged(before, ep)


def test_message_is_the_references_and_context_is_in_notes_and_attributes():
    err = errors.CyclicPartitionError("tag0", ["a", "b", "c"])
    assert str(err) == "Invalid partition, found dependency cycles"
    assert err.args == ("Invalid partition, found dependency cycles",)
    assert (err.rule, err.node, err.tag, err.path) == ("partition-not-convex", "a", "tag0",
                                                       ["a", "b", "c"])
    assert err.__notes__ == ["fastlower: [partition-not-convex] node 'a', tag 'tag0': fusing "
                             "this tag's nodes into one delegate would create a dependency cycle "
                             "along the path a -> b -> c (the path leaves the partition and "
                             "re-enters it)"]
    assert errors.describe(err).startswith(
        "Invalid partition, found dependency cycles (fastlower: [")


def test_contract_errors_pickle_with_their_notes_and_attributes():
    import pickle

    for err in (errors.SharedConstantError("b_k", "tag0", "add", "tag1", no_copy=True),
                errors.BackendNotFoundError("Nope", ["A", "B"]),
                errors.MethodWithoutProgramError("decode", ["forward"])):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and back.args == err.args
        assert back.__notes__ == err.__notes__ and back.__dict__ == err.__dict__


def test_backend_error_keeps_the_backends_text_args_attributes_and_notes():
    import fastlower.preprocess as pp

    class QuantError(ValueError):
        def __init__(self, message, code):
            super().__init__(message, code)
            self.code = code

    original = QuantError("Invalid zero point 300", 7)
    original.add_note("backend's own note")
    err = pp.failures.backend_error(original, "tag3", "XnnpackBackend", "forward")
    assert isinstance(err, QuantError) and isinstance(err, pp.PreprocessError)
    assert str(err) == str(original) and err.args == original.args and err.code == 7
    assert err.__notes__ == ["backend's own note", "fastlower: preprocess of partition 'tag3' "
                             "of method 'forward' by backend XnnpackBackend"]
    assert original.__notes__ == ["backend's own note"]  # the original is left as it was
    assert (err.tag, err.method, err.backend_id, err.original) == (
        "tag3", "forward", "XnnpackBackend", original)
