"""The template's refusals: what it does not model makes the backend run, never a guess.

Real XNNPACK results of a small program (two linears of the same shape, each on its own
input, in a partition each), then each refusal provoked on them."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fastlower.preprocess.jobs import PreprocessJob
from fastlower.preprocess.structure import constant_bytes
from fastlower.preprocess.structure.shape_key import partition_shape
from fastlower.preprocess.structure.template import (
    NotDerivable, derive, from_plain, learn, to_plain,
)
from fastlower.preprocess.structure.xnnpack_blob import BlobLayoutError, read_fields


class TwoLinears(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 16)

    def forward(self, x, y):
        return self.a(x), self.b(y)


@pytest.fixture(scope="module")
def partitions():
    """``(job, real result)`` for each XNNPACK partition of ``TwoLinears``."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
    from executorch.exir import to_edge_transform_and_lower

    seen = []
    original = XnnpackBackend.preprocess

    def record(program, specs):
        import copy

        kept = copy.deepcopy(program)
        result = original(program, specs)
        seen.append((PreprocessJob(len(seen), "XnnpackBackend", XnnpackBackend, kept,
                                   list(specs), f"tag{len(seen)}", "forward", False), result))
        return result

    torch.manual_seed(0)
    program = torch.export.export(TwoLinears().eval(), (torch.randn(2, 16), torch.randn(2, 16)))
    XnnpackBackend.preprocess = staticmethod(record)
    try:
        to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner(per_op_mode=True)])
    finally:
        XnnpackBackend.preprocess = staticmethod(original)
    return seen


def _linears(partitions):
    shapes = [(partition_shape(job), result) for job, result in partitions]
    key = shapes[0][0].key
    same = [(s, r) for s, r in shapes if s.key == key]
    assert len(same) >= 2, [s.key[:8] for s, _ in shapes]
    return same


def test_derives_the_other_linear_byte_for_byte(partitions):
    (first, first_result), (second, second_result) = _linears(partitions)[:2]
    derived = derive(learn(first, first_result), second)
    assert bytes(derived.processed_bytes) == bytes(second_result.processed_bytes)
    assert derived.data_store_output == second_result.data_store_output
    assert bytes(first_result.processed_bytes) != bytes(second_result.processed_bytes)


def test_named_data_no_step_explains_is_refused(partitions):
    first, result = _linears(partitions)[0]
    moved = dataclasses.replace(first, constants=[c + 1 for c in first.constants])
    with pytest.raises(NotDerivable, match="no catalog step"):
        learn(moved, result)


def test_a_constant_no_named_data_holds_must_not_change(partitions):
    (first, result), (second, _) = _linears(partitions)[:2]
    template = learn(first, result)
    extra = torch.arange(4.0)
    template = dataclasses.replace(template, unread=((len(first.constants), "0" * 32),))
    member = dataclasses.replace(second, constants=[*second.constants, extra])
    with pytest.raises(NotDerivable, match="which no named data holds, differs"):
        derive(template, member)


def test_shared_debug_handles_must_stay_shared(partitions):
    (first, result), (second, _) = _linears(partitions)[:2]
    template = learn(first, result)
    handles = list(second.handles)
    slot_nodes = template.handle_slots[0][1]
    handles[slot_nodes[0]] = 0
    with pytest.raises(NotDerivable, match="debug handle"):
        derive(template, dataclasses.replace(second, handles=handles))


def test_another_structure_is_refused(partitions):
    (first, result), (second, _) = _linears(partitions)[:2]
    with pytest.raises(NotDerivable, match="another structure"):
        derive(learn(first, result), dataclasses.replace(second, key="0" * 32))


def test_garbage_blob_is_a_layout_error():
    with pytest.raises(BlobLayoutError):
        read_fields(b"\0" * 64)
    with pytest.raises(BlobLayoutError):
        read_fields(b"\0\0\0\0XH00" + b"\xff" * 40)


def test_keys_named_otherwise_are_not_explained():
    found, why = constant_bytes.explain(["weight_0"], [torch.ones(3)])
    assert found is None and "not a sha256 name" in why
    data = constant_bytes.apply("float32", torch.ones(3))
    found, why = constant_bytes.explain([constant_bytes.digest(data)], [torch.ones(3)])
    assert found == [(0, "stored", ("float32",))] and why == ""


@pytest.mark.parametrize("value", [0.0, float("nan"), 1e-40])
def test_a_member_in_another_value_case_is_refused(partitions, value):
    """A bias with a zero, non-finite or subnormal element where the representative's had
    none: XNNPACK may read it (a scale it rejects, a bias it quantizes), so the backend runs."""
    (first, result), (second, _) = _linears(partitions)[:2]
    template = learn(first, result)
    constants = [c.clone() for c in second.constants]
    bias = next(i for i, c in enumerate(constants) if c.dim() == 1)
    constants[bias][0] = value
    with pytest.raises(NotDerivable, match="another value case"):
        derive(template, dataclasses.replace(second, constants=constants))


# ------------------------------------------------------------ a cached template, malformed
class Raises:
    """A value whose reading raises ``error``: what from_plain meets is not up to it."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __int__(self) -> int:
        raise self.error

    def __iter__(self):
        raise self.error


@pytest.fixture(scope="module")
def plain(partitions):
    first, result = _linears(partitions)[0]
    return to_plain(learn(first, result))


def _with(plain, index, value):
    return plain[:index] + (value,) + plain[index + 1:]


def _entry_with(plain, field, value):
    entry = plain[2][0]
    return _with(plain, 2, (entry[:field] + (value,) + entry[field + 1:],) + plain[2][1:])


def test_a_plain_template_comes_back(plain):
    assert to_plain(from_plain(plain)) == plain
    assert plain[5] and plain[4], "the template has no key or handle slots to damage"


MALFORMED = {
    "None": lambda p: None,
    "an int": lambda p: 7,
    "too few fields": lambda p: p[:-1],
    "too many fields": lambda p: p + ((),),
    "entries None": lambda p: _with(p, 2, None),
    "an entry of five": lambda p: _with(p, 2, (p[2][0][:5],)),
    "an entry's constant a string": lambda p: _entry_with(p, 1, "x"),
    "an entry's constant infinite": lambda p: _entry_with(p, 1, float("inf")),
    "an entry's constant negative": lambda p: _entry_with(p, 1, -1),
    "an unknown step": lambda p: _entry_with(p, 2, "no-such-step"),
    "the blob an int": lambda p: _with(p, 1, 16),
    "the blob an int of its length": lambda p: _with(p, 1, len(p[1])),  # bytes(n): zeros
    "the blob a huge int": lambda p: _with(p, 1, 10 ** 30),
    "the blob a string": lambda p: _with(p, 1, "blob"),
    "a key slot of one": lambda p: _with(p, 4, ((1,),)),
    "a key slot at a huge position": lambda p: _with(p, 4, ((10 ** 30, 0),)),
    "a key slot at the blob's end": lambda p: _with(p, 4, ((len(p[1]) - 10, 0),)),
    "a key slot of a huge entry": lambda p: _with(p, 4, ((0, 10 ** 30),)),
    "a handle slot's nodes an int": lambda p: _with(p, 5, ((0, 3),)),
    "a handle slot past the blob": lambda p: _with(p, 5, ((len(p[1]) - 2, (0,)),)),
    "a handle slot of no node": lambda p: _with(p, 5, ((0, ()),)),
    "a handle slot of a negative node": lambda p: _with(p, 5, ((0, (-1,)),)),
    "unread a dict": lambda p: _with(p, 6, {1: 2}),
    "an unread position negative": lambda p: _with(p, 6, ((-2, "0" * 32),)),
    "cases an int": lambda p: _with(p, 8, 5),
    "a value raising LookupError": lambda p: _entry_with(p, 3, Raises(LookupError("x"))),
    "a value raising RuntimeError": lambda p: _with(p, 3, Raises(RuntimeError("x"))),
}


@pytest.mark.parametrize("damage", list(MALFORMED), ids=list(MALFORMED))
def test_a_malformed_plain_template_is_not_derivable(plain, damage):
    with pytest.raises(NotDerivable):
        from_plain(MALFORMED[damage](plain))


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_reading_a_template_is_not_swallowed(plain, error):
    with pytest.raises(error):
        from_plain(_entry_with(plain, 3, Raises(error())))
