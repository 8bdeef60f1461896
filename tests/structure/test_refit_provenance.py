"""The rules a refit follows to trace each stored tensor to the new checkpoint
(``fastlower.cache.refit.provenance``), one by one, on small tensors."""

from __future__ import annotations

import pytest
import torch

from fastlower.cache.refit.provenance import NotRefittable, Sources, digest, same_pattern


def _sources(a: dict, b: dict, numbers=()) -> Sources:
    by_digest: dict = {}
    for name, tensor in a.items():
        by_digest.setdefault(digest(tensor), []).append(name)
    changed = {n for n in a if digest(a[n]) != digest(b[n])}
    return Sources(by_digest, b, changed, set(numbers))


def test_a_stored_input_constant_becomes_the_new_checkpoints():
    a = {"w": torch.arange(1.0, 7.0).reshape(2, 3), "b": torch.ones(3)}
    b = {"w": torch.arange(1.0, 7.0).reshape(2, 3) + 1, "b": torch.ones(3)}
    new, changed = _sources(a, b).new_value("w", a["w"].clone())
    assert changed and torch.equal(new, b["w"])
    new, changed = _sources(a, b).new_value("b", torch.ones(3))
    assert not changed and new is b["b"]


def test_a_parameter_stays_a_parameter_with_the_stored_strides():
    a = {"w": torch.arange(1.0, 7.0).reshape(2, 3)}
    b = {"w": -torch.arange(1.0, 7.0).reshape(2, 3)}
    stored = torch.nn.Parameter(a["w"].t().contiguous().t(), requires_grad=False)
    new, _ = _sources(a, b).new_value("w", stored)
    assert isinstance(new, torch.nn.Parameter) and not new.requires_grad
    assert new.stride() == stored.stride() and torch.equal(new, b["w"])


def test_same_bytes_in_another_shape_or_dtype_is_no_provenance():
    a = {"w": torch.arange(6.0).reshape(2, 3)}
    with pytest.raises(NotRefittable, match="no input constant"):
        _sources(a, a).new_value("x", torch.arange(6.0).reshape(3, 2))


def test_a_literal_of_the_graph_is_kept_and_a_computed_value_refused():
    a = {"w": torch.ones(2)}
    sources = _sources(a, a, numbers=[1e-5, 2])
    eps = torch.tensor(1e-5)
    assert sources.new_value("eps", eps) == (eps, False)
    with pytest.raises(NotRefittable, match="a pass computed it from values"):
        sources.new_value("folded", torch.tensor(0.123))


def test_inputs_equal_in_one_checkpoint_only_refuse():
    a = {"m/x": "d1", "m/y": "d1", "m/z": "d2"}
    assert same_pattern(a, {"m/x": "e1", "m/y": "e1", "m/z": "e2"}) is None
    assert "equals another in one checkpoint only" in same_pattern(
        a, {"m/x": "e1", "m/y": "e3", "m/z": "e2"})
    assert "differ by name" in same_pattern(a, {"m/x": "e1", "m/y": "e1"})


def test_an_input_equal_to_a_literal_is_ambiguous():
    """``gate == 0.5`` beside ``y * 0.5``: the stored 0.5 could be either; B moves one."""
    a, b = {"gate": torch.tensor(0.5)}, {"gate": torch.tensor(0.7)}
    with pytest.raises(NotRefittable, match="both input 'gate' and a literal"):
        _sources(a, b, numbers=[0.5]).new_value("c", torch.tensor(0.5))
    # an integer buffer equal to an integer literal, moved in B: ambiguous too
    with pytest.raises(NotRefittable, match="both input 'n' and a literal"):
        _sources({"n": torch.tensor(2)}, {"n": torch.tensor(5)}, numbers=[2]).new_value(
            "c", torch.tensor(2))
    # unchanged in B: either source gives B's value
    n = {"n": torch.tensor(2)}
    assert _sources(n, n, numbers=[2]).new_value("c", torch.tensor(2))[1] is False


@pytest.mark.parametrize("a_value, b_value, why", [
    (torch.tensor(0.3), torch.tensor(0.5), "one element"),  # B's may equal a literal
    (torch.zeros(4), torch.randn(4), "uniform"),  # a zero bias, then a trained one
    (torch.full((4,), 2.0), torch.full((4,), 3.0), "uniform"),
])
def test_a_changed_input_that_is_no_distinct_source_refuses(a_value, b_value, why):
    a, b = {"w": a_value}, {"w": b_value}
    with pytest.raises(NotRefittable, match=why):
        _sources(a, b).new_value("w", a_value.clone())


@pytest.mark.parametrize("b_value", [
    torch.tensor([1.0, 0.0, 3.0]), torch.tensor([1.0, -0.0, 3.0]),
    torch.tensor([1.0, float("nan"), 3.0]), torch.tensor([1.0, 1e-40, 3.0]),
])
def test_an_input_may_change_value_case(b_value):
    """Nothing the refit skips reads a non-delegated input's value; a delegate's constants
    are checked by its template (tests/structure/test_template.py)."""
    a = {"w": torch.tensor([1.0, 2.0, 3.0])}
    new, changed = _sources(a, {"w": b_value}).new_value("w", a["w"].clone())
    assert changed and torch.equal(new.nan_to_num(7.0), b_value.nan_to_num(7.0))


def test_an_unchanged_uniform_input_is_kept():
    a = {"norm": torch.ones(4), "w": torch.tensor([1.0, 2.0])}
    b = {"norm": torch.ones(4), "w": torch.tensor([3.0, 4.0])}
    assert _sources(a, b).new_value("norm", torch.ones(4))[1] is False
    assert torch.equal(_sources(a, b).new_value("w", a["w"].clone())[0], b["w"])


def _placeholder(tensor: torch.Tensor, periodic: bool = False) -> torch.Tensor:
    """What a skimmed read of a stored entry gives in place of ``tensor``."""
    from fastlower.cache.skim import SKIMMED, Skimmed as Read

    meta = torch.empty(tensor.shape, dtype=tensor.dtype, device="meta")
    setattr(meta, SKIMMED, Read(tensor.nbytes, digest(tensor), periodic))
    return meta


def test_a_skimmed_stored_tensor_is_traced_by_the_digest_it_carries():
    a = {"w": torch.arange(1.0, 7.0).reshape(2, 3)}
    b = {"w": -torch.arange(1.0, 7.0).reshape(2, 3)}
    new, changed = _sources(a, b).new_value("w", _placeholder(a["w"]))
    assert changed and torch.equal(new, b["w"])


def test_a_skimmed_value_the_refit_needs_asks_for_the_whole_entry():
    from fastlower.cache.refit.provenance import Skimmed
    from fastlower.cache.skim import SKIMMED

    a = {"w": torch.arange(1.0, 7.0).reshape(2, 3)}
    b = {"w": -torch.arange(1.0, 7.0).reshape(2, 3)}
    with pytest.raises(Skimmed, match="may be uniform"):  # its first piece repeats
        _sources(a, b).new_value("w", _placeholder(a["w"], periodic=True))
    whole = _placeholder(torch.arange(12.0))
    part = whole.reshape(2, 6)[:, :3]  # a view: not its whole storage
    setattr(part, SKIMMED, getattr(whole, SKIMMED))
    with pytest.raises(Skimmed, match="not its whole storage"):
        _sources(a, b).new_value("w", part)
    with pytest.raises(Skimmed, match="no value"):  # a meta tensor that carries nothing
        _sources(a, b).new_value("w", torch.empty(2, 3, device="meta"))
