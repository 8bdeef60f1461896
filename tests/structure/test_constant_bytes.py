"""The catalog's byte readers give exactly the storage XNNPACK hashes."""

import hashlib

import pytest
import torch

from fastlower.preprocess.structure import constant_bytes


CASES = {
    "float32": torch.randn(3, 4),
    "a view (the whole storage is read)": torch.randn(10, 10)[2:5],
    "empty": torch.empty(0),
    "int8": torch.arange(-7, 7, dtype=torch.int8),
    "bfloat16": torch.randn(2, 3).to(torch.bfloat16),
}


@pytest.mark.parametrize("tensor", list(CASES.values()), ids=list(CASES))
def test_storage_bytes_are_the_untyped_storage(tensor):
    assert constant_bytes._storage_bytes(tensor) == bytes(tensor.untyped_storage())


def test_packed_4bit_is_xnnpacks_conversion():
    from executorch.backends.xnnpack.operators.node_visitor import NodeVisitor

    values = torch.randint(-8, 8, (4, 6), dtype=torch.int8)
    packed = NodeVisitor.convert_to_qc4w(values)
    assert constant_bytes.apply("packed_4bit", values) == bytes(packed.untyped_storage())
    key = hashlib.sha256(bytes(packed.untyped_storage())).hexdigest()
    found, why = constant_bytes.explain([key], [torch.randn(4, 6), values])
    assert found == [(1, "packed_4bit", ())], why


# constants chosen so that steps collide: zeros and uniform values give one byte string
# for several steps, a float32 tensor is its own "stored" and "float32" bytes, a view
# reads its whole storage, a transposed tensor is stored from a fresh copy
def _pruning_cases():
    torch.manual_seed(3)
    return [
        torch.zeros(4, 8), torch.ones(2, 1, 3, 3), torch.randn(4, 8),
        torch.randn(6, 8)[1:3], torch.randn(8, 4).t(), torch.randn(3, 5).to(torch.bfloat16),
        torch.randn(3, 5).half(), torch.randint(-8, 8, (4, 6), dtype=torch.int8),
        torch.zeros(4, 6, dtype=torch.int8), torch.empty(0), torch.randn(2, 3, 4, 5),
        torch.randn(10)[::2],
    ]


@pytest.mark.parametrize("step", list(constant_bytes.STEPS))
def test_step_length_is_the_steps_length_where_it_is_known(step):
    for tensor in _pruning_cases():
        predicted = constant_bytes.step_length(step, tensor)
        try:
            made = constant_bytes.apply(step, tensor)
        except Exception:
            continue
        assert predicted is None or predicted == len(made), (step, tensor.shape, tensor.dtype)
        assert constant_bytes.step_digest(step, tensor) == constant_bytes.digest(made)


def test_lengths_leave_every_explanation_as_it_was():
    """explain() with the keys' lengths skips steps of other lengths: for keys made from
    every step of every constant (ambiguous ones included), the answer is the same."""
    constants = _pruning_cases()
    made = []
    for tensor in constants:
        for step in constant_bytes.STEPS:
            try:
                made.append(constant_bytes.apply(step, tensor))
            except Exception:
                continue
    checked = 0
    for data in made:
        for prefix in constant_bytes.PREFIXES:
            keys = [prefix + constant_bytes.digest(data)]
            without = constant_bytes.explain(keys, constants)
            with_lengths = constant_bytes.explain(keys, constants, [len(data)])
            assert with_lengths == without
            checked += 1
    assert checked == 2 * len(made) > 50


def test_lengths_skip_the_steps_of_other_lengths(monkeypatch):
    """A 4-bit weight's key: its int8 constant is not converted to float32 or bfloat16
    (4 and 2 bytes an element, where the key's data has half a byte)."""
    values = torch.randint(-8, 8, (64, 32), dtype=torch.int8)
    packed = constant_bytes.apply("packed_4bit", values)
    ran = []
    for step in ("float32", "bfloat16", "stored"):
        real = constant_bytes.STEPS[step]
        monkeypatch.setitem(constant_bytes.STEPS, step,
                            lambda t, real=real, step=step: ran.append(step) or real(t))
    key = constant_bytes.digest(packed)
    assert constant_bytes.explain([key], [values], [len(packed)]) == (
        [(0, "packed_4bit", ())], "")
    assert ran == []
    assert constant_bytes.explain([key], [values]) == ([(0, "packed_4bit", ())], "")
    assert sorted(ran) == ["bfloat16", "float32", "stored"]


def test_a_constant_outside_this_process_memory_is_no_step():
    meta = torch.empty(4, 4, device="meta")
    found, why = constant_bytes.explain(["0" * 64], [meta])
    assert found is None and "no catalog step" in why
