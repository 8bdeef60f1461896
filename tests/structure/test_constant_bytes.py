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
