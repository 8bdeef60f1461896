"""Reference vs implementation under test: identical lowering, identical
.pte, and (where the delegates can run) correct runtime numerics."""

import warnings

import pytest

from tests.differential import harness as H
from tests.models.registry import MODEL_CASES


# paths a case shares with cases of its kind that run them in the default run: -m slow
# (every path and every case stay in the default run, each path with several cases)
SLOW_PATHS = {
    "chain_xnnpack_adds_then_xnnpack": {"spec", "manager"},  # chain_addmul_then_xnnpack's
    "chain_three_partitioners": {"spec", "manager"},
    "multimethod_preprocess_all": {"spec"},  # multimethod_xnnpack's
    "shared_param_xnnpack": {"manager"},
    "conv_relu_tan_split": {"manager"},  # conv_relu_tan's
    "cond_demo": {"manager"},  # cond_xnnpack's
    "map_demo": {"manager"},  # map_xnnpack's
    "list_arg_const_untagged": {"manager"},  # list_arg_const_xnnpack's
    "output_with_unknown_tag": {"manager"},
    "output_and_owned_param_and_buffer": {"manager"},  # output_and_owned_param's
}


def _params():
    for case in MODEL_CASES.values():
        for path in case.paths:
            slow = case.slow or path in SLOW_PATHS.get(case.name, ())
            marks = [pytest.mark.slow] if slow else []
            yield pytest.param(case, path, id=f"{case.name}-{path}", marks=marks)


@pytest.mark.parametrize("case,path", list(_params()))
def test_same_lowering(case, path, impl_under_test):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = H.lower(H.REFERENCE, case.build, path)
        got = H.lower(impl_under_test, case.build, path)
    if impl_under_test is not H.REFERENCE:
        # fastlower deliberately leaves its input untouched (the reference does
        # not); checked before anything runs the programs (buffers mutate in place)
        H.assert_inputs_unchanged(got)
    # outputs first; the reference's input side effects are checked last so
    # that an output difference and an input-mutation difference are told apart
    H.assert_same_lowering(ref, got, check_inputs=False)
    if case.eager_check:
        H.check_eager(got)  # before to_executorch(), which rewrites programs in place

    ref_et = H.to_executorch(ref)
    got_et = H.to_executorch(got)
    H.assert_same_executorch(ref_et, got_et)

    if case.runtime:
        H.check_runtime(got_et, got.built)

    if impl_under_test is H.REFERENCE:
        H.assert_same_input_side_effects(ref, got)


def test_list_argument_constant_is_duplicated(impl_under_test):
    """pytorch/executorch#22798: the reference cannot lower this (its duplication
    pass skips list arguments); fastlower deliberately differs and lowers it, each
    partition owning its own copy of the constant, with correct numerics."""
    from tests.models.constants import build_list_arg_const

    if impl_under_test is H.REFERENCE:
        pytest.skip("the reference raises on this case (pinned in test_errors)")
    ref = H.lower_error(H.REFERENCE, build_list_arg_const, "direct")
    assert ref.type is RuntimeError and "is tagged with (tag1)" in ref.message
    got = H.lower(impl_under_test, build_list_arg_const, "direct")
    H.assert_inputs_unchanged(got)
    H.check_eager(got)
    from executorch.exir.lowered_backend_module import get_lowered_submodules

    program = got.epm.exported_program()
    owned = []
    for _, lowered, _ in get_lowered_submodules(program.graph_module):
        sig = lowered.original_module.graph_signature
        owned.append({s.arg.name for s in sig.input_specs if s.kind.name != "USER_INPUT"})
    # each of the two partitions owns one of the two copies of c_c
    assert len(owned) == 2, owned
    assert sorted(len(o & {"c_c", "c_c_copy_0"}) for o in owned) == [1, 1], owned
    assert ("c_c" in owned[0]) != ("c_c" in owned[1]), owned
    assert "c_c" not in [s.arg.name for s in program.graph_signature.input_specs]
