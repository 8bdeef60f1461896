"""``ExportGraphSignature.inputs_to_*`` inside ``accelerated()``: built once per signature,
the reference's content and order, rebuilt after any change to the specs."""

from __future__ import annotations

import random

import pytest
import torch
from torch._export.utils import is_buffer, is_lifted_tensor_constant, is_param
from torch.export.graph_signature import (CustomObjArgument, ExportGraphSignature, InputKind,
                                          InputSpec, TensorArgument)

import fastlower.partitioners as fp
from fastlower.partitioners.signatures import PROPERTIES


def _random_signature(rng: random.Random, n: int) -> ExportGraphSignature:
    kinds = [InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR, InputKind.USER_INPUT,
             InputKind.CUSTOM_OBJ]
    specs = []
    for i in range(n):
        kind = rng.choice(kinds)
        if kind is InputKind.USER_INPUT:
            specs.append(InputSpec(kind, TensorArgument(f"x{i}"), None))
        elif kind is InputKind.CUSTOM_OBJ:
            specs.append(InputSpec(kind, CustomObjArgument(f"o{i}", "cls"), f"obj{i}"))
        else:
            specs.append(InputSpec(kind, TensorArgument(f"p{i}"), f"t{i}",
                                   persistent=True if kind is InputKind.BUFFER else None))
    return ExportGraphSignature(input_specs=specs, output_specs=[])


def _reference_maps(sig):
    with fp.reference():
        return [list(getattr(sig, p).items()) for p in PROPERTIES]


def _maps(sig):
    return [list(getattr(sig, p).items()) for p in PROPERTIES]


@pytest.mark.parametrize("seed", range(10))
def test_same_maps_and_reused(seed):
    rng = random.Random(seed)
    sig = _random_signature(rng, rng.randint(0, 40))
    expected = _reference_maps(sig)
    with fp.accelerated():
        assert _maps(sig) == expected
        for p in PROPERTIES:
            assert getattr(sig, p) is getattr(sig, p)  # one mapping per signature
    assert getattr(sig, PROPERTIES[0]) is not getattr(sig, PROPERTIES[0])  # reference: fresh


EDITS = {
    "rename_arg": lambda sig, rng: setattr(rng.choice(sig.input_specs).arg, "name", "renamed"),
    "change_kind": lambda sig, rng: setattr(rng.choice(sig.input_specs), "kind", InputKind.BUFFER),
    "change_target": lambda sig, rng: setattr(rng.choice(sig.input_specs), "target", "other"),
    "append": lambda sig, rng: sig.input_specs.append(
        InputSpec(InputKind.PARAMETER, TensorArgument("new"), "new_t")),
    "pop": lambda sig, rng: sig.input_specs.pop(rng.randrange(len(sig.input_specs))),
    "swap": lambda sig, rng: sig.input_specs.reverse(),
    "replace_item": lambda sig, rng: sig.input_specs.__setitem__(0, sig.input_specs[-1]),
    "new_list": lambda sig, rng: setattr(sig, "input_specs", list(reversed(sig.input_specs))),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_edits_are_seen(edit):
    rng = random.Random(hash(edit) % 1000)
    sig = _random_signature(rng, 30)
    with fp.accelerated():
        _maps(sig)
        EDITS[edit](sig, rng)
        assert _maps(sig) == _reference_maps(sig)


def test_is_param_buffer_constant_on_a_program():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))
            self.register_buffer("b", torch.ones(3))

        def forward(self, x):
            return x * self.w + self.b + torch.tensor([1.0, 2.0, 3.0])

    ep = torch.export.export(M(), (torch.ones(3),))
    nodes = list(ep.graph.nodes)
    with fp.reference():
        expected = [(is_param(ep, n), is_buffer(ep, n), is_lifted_tensor_constant(ep, n))
                    for n in nodes]
    with fp.accelerated():
        got = [(is_param(ep, n), is_buffer(ep, n), is_lifted_tensor_constant(ep, n)) for n in nodes]
    assert got == expected and any(e[0] for e in expected) and any(e[1] for e in expected)
