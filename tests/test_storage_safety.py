"""Storage safety: a backend's ``preprocess`` or a partitioner that writes
tensors in place must not change the caller's program.

Each backend here transforms every weight of its partition in place, in one of
the four ways a tensor can be written (``add_``, ``copy_``, ``.data = ...``,
``set_``), as a careless packing or quantising pass would.
"""

import warnings

import pytest
import torch
from executorch.exir.backend.backend_api import to_backend as reference_to_backend
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.partitioner import Partitioner, PartitionResult

import fastlower
from tests.differential import harness as H
from tests.models.base import _single
from tests.models.partitioners import WholeGraphPartitioner


class Weighted(torch.nn.Module):
    """A parameter, a buffer and a lifted tensor constant, all used by the partition."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.full((4,), 2.0))
        self.offset = torch.arange(4.0)  # lifted as a tensor constant

    def forward(self, x):
        return self.lin(x) * self.scale + self.offset


def _zero_in_place(how: str):
    def mutate(t: torch.Tensor) -> None:
        with torch.no_grad():
            if how == "add_":
                t.add_(100.0)
            elif how == "copy_":
                t.copy_(torch.zeros_like(t))
            elif how == "data":
                t.data = torch.zeros_like(t)
            elif how == "set_":
                t.set_(torch.zeros_like(t))
    return mutate


def _mutating_backend(how: str):
    mutate = _zero_in_place(how)

    def preprocess(edge_program, compile_specs):
        for value in list(edge_program.state_dict.values()) + list(edge_program.constants.values()):
            mutate(value)
        # the bytes depend on the (mutated) weights: the delegate sees its own copy
        blob = b"".join(v.detach().contiguous().numpy().tobytes()
                        for v in edge_program.state_dict.values())
        return PreprocessResult(processed_bytes=blob)

    name = f"InPlaceWriter_{how.strip('_')}"
    return type(name, (BackendDetails,), {"preprocess": staticmethod(preprocess)})


HOWS = ("add_", "copy_", "data", "set_")
BACKENDS = {how: _mutating_backend(how) for how in HOWS}


def _snapshot(program):
    tensors = {**{f"state:{k}": v for k, v in program.state_dict.items()},
               **{f"const:{k}": v for k, v in program.constants.items()}}
    return {k: (v.detach().clone().numpy().tobytes(), tuple(v.shape)) for k, v in tensors.items()}


def _build(partitioner):
    torch.manual_seed(0)
    return _single(Weighted(), [(torch.randn(2, 4),)], partitioner)


@pytest.mark.parametrize("how", HOWS)
def test_backend_writing_weights_in_place_leaves_the_caller_intact(how):
    backend_id = BACKENDS[how].__name__
    built = _build(WholeGraphPartitioner(backend_id))
    program = built.epm.exported_program()
    before, code = _snapshot(program), program.graph_module.code
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = fastlower.to_backend(program, WholeGraphPartitioner(backend_id))
    assert _snapshot(program) == before
    assert program.graph_module.code == code
    # and the result is the reference's (which deep-copies before preprocess)
    ref_program = _build(WholeGraphPartitioner(backend_id)).epm.exported_program()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = reference_to_backend(ref_program, WholeGraphPartitioner(backend_id))
    H.assert_same_lowering(ref, got)
    # the lowered program still computes with the original weights
    x = built.inputs["forward"][0]
    torch.testing.assert_close(got.module()(*x), built.expected["forward"][0][0])


@pytest.mark.parametrize("how", HOWS)
def test_single_partition_overload_leaves_the_caller_intact(how):
    backend_id = BACKENDS[how].__name__
    program = _build(WholeGraphPartitioner(backend_id)).epm.exported_program()
    before = _snapshot(program)
    lowered = fastlower.to_backend(backend_id, program, [])
    assert _snapshot(program) == before
    assert lowered.processed_bytes  # preprocess ran on its own copy


class ConstantWritingPartitioner(Partitioner):
    """Tags the whole graph, and writes every real constant it was given in place."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = WholeGraphPartitioner("InPlaceWriter_add")

    def partition(self, exported_program) -> PartitionResult:
        for value in exported_program.constants.values():
            with torch.no_grad():
                value.add_(1000.0)
        return self.inner.partition(exported_program)


def test_partitioner_writing_constants_in_place_leaves_the_caller_intact():
    """The reference hands the partitioner the caller's constant tensors and so
    loses this one (documented difference); fastlower hands it copies."""
    program = _build(ConstantWritingPartitioner()).epm.exported_program()
    before = _snapshot(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fastlower.to_backend(program, ConstantWritingPartitioner())
    assert _snapshot(program) == before

    ref_program = _build(ConstantWritingPartitioner()).epm.exported_program()
    ref_before = _snapshot(ref_program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference_to_backend(ref_program, ConstantWritingPartitioner())
    assert _snapshot(ref_program) != ref_before  # the reference's input was written
