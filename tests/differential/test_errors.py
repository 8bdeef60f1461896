"""Bad partitioners / inputs: the implementation under test must raise the
reference's exception type (a typed subclass is fine) with the reference's
message, exactly (fastlower's context is in notes and attributes), and leave
the input program unchanged."""

import dataclasses
import re

import pytest

from tests.differential import harness as H
from tests.models.registry import ERROR_CASES


def _params():
    for case in ERROR_CASES.values():
        for path in case.paths:
            yield pytest.param(case, path, id=f"{case.name}-{path}")


@pytest.mark.parametrize("case,path", list(_params()))
def test_same_error(case, path, impl_under_test):
    ref = H.lower_error(H.REFERENCE, case.build, path)
    # pin the reference's behaviour (documents it; catches ExecuTorch drift)
    assert ref.type is case.expected_type, (ref.type, ref.message)
    assert re.fullmatch(case.message_for(path), ref.message), ref.message
    if case.name == "list_arg_const" and impl_under_test is not H.REFERENCE:
        pytest.skip("fastlower lowers this case correctly "
                    "(test_list_argument_constant_is_duplicated)")
    got = H.lower_error(impl_under_test, case.build, path)
    if case.message_until is not None:
        end = ref.message.index(case.message_until) + len(case.message_until)
        ref = dataclasses.replace(ref, message=ref.message[:end])
    H.assert_same_error(ref, got, prefix=case.message_until is not None)


# Every error fastlower raises on a to_backend path, and the ERROR_CASES entries in
# which test_same_error runs it next to the reference (same class, the reference's
# message inside). Errors with no reference counterpart are listed with the reason.
ERROR_TABLE = {
    "TaggedOutputError": ["tagged_output"],
    "TaggedUserInputError": ["tagged_user_input"],
    "SharedConstantError": ["no_copy_shared_constant"],
    "GraphModifiedError": ["mutates_graph", "adds_a_node"],
    "MissingPartitionTagsError": ["partition_tags_none"],
    "BackendNotFoundError": ["unknown_backend"],
    "CyclicPartitionError": ["cycle", "owned_update_read_and_cycle_spec",
                             "chain_cond_same_tag_names", "failing_backend_then_cycle_spec",
                             "cycle_then_tagged_output"],
    "OwnedBufferUpdateReadError": ["owned_update_read_outside",
                                   "owned_update_read_and_cycle_direct",
                                   "owned_update_read_then_failing"],
    "BufferMutationOutputError": ["owned_update_returned"],
    "MethodWithoutProgramError": ["method_without_program"],
}
FASTLOWER_ONLY = {
    "UnknownTagError": "only inside strict_tags(); the reference ignores the tag "
                       "(ModelCase missing_tag)",
    "PartitionerEditError": "only inside strict_partitioners(); the reference does not see the "
                            "edit (ModelCase edited_add_alpha, ErrorCase edited_cat_dim)",
    "PartitionerGraphError": "the native partitioners' error for a getitem reading two tuple "
                             "producers, where the reference's partitioner loops forever "
                             "(tests/partitioners/test_switch.py)",
    "NoPartitionOutputError": "a partition none of whose nodes is used outside it: only dead "
                              "nodes, which an exported program does not have",
    "UnsupportedVersionError": "a torch or ExecuTorch outside the tested series, before any "
                               "lowering (tests/test_compat.py)",
}


def _concrete_errors():
    import fastlower.errors as errors

    found, stack = set(), [errors.FastlowerError]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            stack.append(sub)
            if sub.__module__ == errors.__name__ and sub is not errors.PartitionContractError:
                found.add(sub.__name__)
    return found


def test_error_table_covers_every_error():
    assert _concrete_errors() == set(ERROR_TABLE) | set(FASTLOWER_ONLY)
    for cls_name, cases in ERROR_TABLE.items():
        for name in cases:
            assert name in ERROR_CASES, (cls_name, name)


@pytest.mark.parametrize("cls_name,case_name",
                         [(c, n) for c, ns in ERROR_TABLE.items() for n in ns])
def test_fastlower_raises_the_tabled_error(cls_name, case_name, impl_under_test):
    if impl_under_test is H.REFERENCE:
        pytest.skip("fastlower's own error classes")
    import fastlower.errors as errors

    case = ERROR_CASES[case_name]
    got = H.lower_error(impl_under_test, case.build, case.paths[0])
    assert issubclass(got.type, getattr(errors, cls_name)), (got.type, got.message)
    assert issubclass(got.type, case.expected_type)
