"""The registries the parametrised tests iterate: ``MODEL_CASES`` (lowered and compared),
``ERROR_CASES`` (the reference's exception, type and message) and
``SEED_DEPENDENT_ERROR_CASES`` (``tests/test_determinism.py``). Their members and order
are the test ids.
"""

from __future__ import annotations

import re
from typing import Callable, Dict


from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
    XnnpackPartitioner,
)
from executorch.exir.backend.test.op_partitioner_demo import (
    AddMulPartitionerDemo,
)
from executorch.exir.error import InternalError
from torch._export.verifier import SpecViolationError
from tests.models.base import (
    Built, ErrorCase, ModelCase,
)
from tests.models.basic import (
    build_conv_relu_tan, build_conv_relu_tan_split, build_llama_case, build_split_output,
)
from tests.models.chains import (
    build_chain, _nothing, _xnn_adds, _xnn_adds_same_tags,
)
from tests.models.constants import (
    build_buffer_mutation, build_list_arg_const, build_list_arg_const_untagged,
    build_list_arg_const_xnnpack, build_output_and_owned, build_shared_const_demo,
    build_shared_param_xnnpack,
)
from tests.models.control_flow import (
    build_cond, build_cond_without_branches, build_map, build_nested_cf, _cond_inputs,
    CondModel,
)
from tests.models.multimethod import (
    build_multimethod_preprocess_all, build_multimethod_xnnpack,
)
from tests.models.orders import (
    build_cycle_shared_constant_edited, build_cycle_then_tagged_output,
    build_edited_then_cycle, build_failing_default_and_override, build_failing_then_cycle,
    build_owned_update_read_and_failing, build_tagged_inputs_and_shared_buffer,
)
from tests.models.partitioners import (
    _spec, XnnpackControlFlowPartitioner,
)
from tests.models.tagging import (
    _bad, _bad_adds_a_node, _bad_cycle, _bad_mutates_graph, _bad_no_copy, _bad_tagged_output,
    _bad_tagged_user_input, build_edited_cat_dim, build_method_without_program,
    build_missing_tag, build_owned_update_read, build_owned_update_returned, _edit_add_alpha,
    _tag_adds, _tag_first_add, _tag_output_with_unknown_tag,
)


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
            r"The partitioner <tests\.models\.partitioners\._FnPartitioner object at "
            + ADDR
            + r"> should not modify the graph module",
        ),
        ErrorCase(
            "partition_tags_none",
            _bad(_tag_adds, None),
            AssertionError,
            r"Partitioner <tests\.models\.partitioners\._FnPartitioner object at "
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
            r"The partitioner <tests\.models\.partitioners\._FnPartitioner object at "
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
            slow=True,  # llama1_xnnpack's decoder, deeper: the default run has llama1's
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
            doc="chained lowering: the second lowering must not replace the first one's delegates",
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


# Errors whose identity depends on the hash seed, in the reference and in fastlower alike:
# the reference duplicates a tag's candidates in the iteration order of a set of their
# names, and meets a tagged user input (which it cannot duplicate) or, for an edited
# program, the verifier (run after the first constant it duplicates) in that order.
# tests/test_determinism.py compares both under seeds that order {b_k, x, y} differently.
SEED_DEPENDENT_ERROR_CASES: Dict[str, Callable[[], Built]] = {
    "tagged_inputs_and_shared_buffer": build_tagged_inputs_and_shared_buffer(edit_cat=False),
    "tagged_inputs_and_shared_buffer_edited": build_tagged_inputs_and_shared_buffer(edit_cat=True),
}


# Cases of a kind another (default-run) case already has: the per-case sweeps of the cache
# round trip (tests/cache/test_roundtrip.py), the cache hits (tests/cache/test_hits.py) and
# the partitioners' tags (tests/partitioners/test_xnnpack.py) run them with -m slow only.
# case -> the case of its kind
SECOND_CASES: Dict[str, str] = {
    "conv_relu_tan_split": "conv_relu_tan",
    "cond_demo": "cond_xnnpack",
    "map_demo": "map_xnnpack",
    "list_arg_const_untagged": "list_arg_const_xnnpack",
    "output_with_unknown_tag": "missing_tag",
    "output_and_owned_param_and_buffer": "output_and_owned_param",
    "chain_xnnpack_adds_then_xnnpack": "chain_addmul_then_xnnpack",
    "chain_three_partitioners": "chain_addmul_then_xnnpack",
    "multimethod_preprocess_all": "multimethod_xnnpack",
}
