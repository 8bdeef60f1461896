"""Value cases (``fastlower.preprocess.structure.value_case``) and the two guards built on them: a
member in another case than the samples, and a step the samples could not tell from
another, are preprocessed for real, never derived."""

from __future__ import annotations

import pytest
import torch

from fastlower.preprocess.structure import constant_bytes, value_case
from fastlower.preprocess.structure.template import Entry, NotDerivable, _entry_bytes


@pytest.mark.parametrize("tensor, flags", [
    (torch.tensor([1.0, 2.0]), ""),
    (torch.zeros(3), "ZUz"),
    (torch.full((3,), -0.0), "Uz-"),
    (torch.ones(3), "U"),
    (torch.tensor([1.0, 0.0]), "z"),
    (torch.tensor([1.0, 1e-40]), "st"),
    (torch.tensor([1.0, -1e-40]), "St"),
    (torch.tensor([1.0, 1e-20]), "t"),
    (torch.tensor([1.0, 1e20]), "h"),
    (torch.tensor([1.0, float("nan")]), "n"),
    (torch.tensor([1.0, float("inf")]), "n"),
    (torch.tensor([1, 9], dtype=torch.int8), "4"),
    (torch.tensor([-8, 7], dtype=torch.int8), ""),
    (torch.zeros(2, dtype=torch.int32), "ZU"),
    (torch.tensor([True, True]), "U"),
    (torch.empty(0), "E"),
])
def test_flags(tensor, flags):
    assert value_case.case_of(tensor) == flags


def test_nan_is_uniform_with_itself():
    assert value_case.case_of(torch.full((3,), float("nan"))) == "Un"


def test_first_difference_names_the_constant_and_both_cases():
    expected = value_case.cases([torch.randn(3).abs() + 1, torch.zeros(2)])
    assert value_case.first_difference(expected, [torch.ones(3) * 2 + torch.arange(3),
                                                  torch.zeros(2)]) == ""
    why = value_case.first_difference(expected, [torch.tensor([1.0, 0.0, 2.0]), torch.zeros(2)])
    assert why.startswith("constant 0 is in another value case (a zero element;")
    assert "ordinary values" in why


def test_a_uniform_weight_leaves_its_layout_step_open():
    """A uniform 4-d weight is its own channels-last layout: the step learnt from it is
    kept only for members on which both steps give the same bytes."""
    uniform = torch.ones(4, 3, 2, 2)
    key = constant_bytes.digest(constant_bytes.apply("channels_last", uniform))
    found, _ = constant_bytes.explain([key], [uniform])
    position, step, others = found[0]
    assert "channels_last" in (step, *others) and "stored" in (step, *others)
    entry = Entry("", position, step, 16, None, others)
    assert _entry_bytes(entry, torch.full((4, 3, 2, 2), 3.0))  # uniform: the steps agree
    with pytest.raises(NotDerivable, match="differ on this member's values"):
        _entry_bytes(entry, torch.randn(4, 3, 2, 2))


def test_steps_equal_for_every_value_are_not_checked():
    assert constant_bytes.same_function("stored", "float32", torch.randn(2))
    assert not constant_bytes.same_function("stored", "float32", torch.randn(2).half())
    assert constant_bytes.same_function("stored", "channels_last", torch.randn(4, 1, 3, 3))
    assert not constant_bytes.same_function("stored", "channels_last", torch.randn(4, 2, 3, 3))
