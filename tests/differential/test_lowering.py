"""Reference vs implementation under test: identical lowering, identical
.pte, and (where the delegates can run) correct runtime numerics."""

import warnings

import pytest

from tests.differential import harness as H
from tests.models import MODEL_CASES


def _params():
    for case in MODEL_CASES.values():
        for path in case.paths:
            marks = [pytest.mark.slow] if case.slow else []
            yield pytest.param(case, path, id=f"{case.name}-{path}", marks=marks)


@pytest.mark.parametrize("case,path", list(_params()))
def test_same_lowering(case, path, impl_under_test):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = H.lower(H.REFERENCE, case.build, path)
        got = H.lower(impl_under_test, case.build, path)
    # outputs first; the input programs' side effects are checked last so
    # that an output difference and an input-mutation difference are told apart
    H.assert_same_lowering(ref, got, check_inputs=False)
    if case.eager_check:
        H.check_eager(got)  # before to_executorch(), which rewrites programs in place

    ref_et = H.to_executorch(ref)
    got_et = H.to_executorch(got)
    H.assert_same_executorch(ref_et, got_et)

    if case.runtime:
        H.check_runtime(got_et, got.built)

    H.assert_same_input_side_effects(ref, got)
