"""Bad partitioners / inputs: the implementation under test must raise the
reference's exception type (a typed subclass is fine) with the reference's
message inside its own, and leave the input program unchanged."""

import re

import pytest

from tests.differential import harness as H
from tests.models import ERROR_CASES


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
        pytest.skip("fastlower lowers this case correctly (test_list_argument_constant_is_duplicated)")
    got = H.lower_error(impl_under_test, case.build, path)
    H.assert_same_error(ref, got)
