"""fastlower.in_process.xnnpack_patterns: inside fastlower's lowering steps, XNNPACK's
``ConvertToUpsampleBilinear2d`` and ``ConvertToSDPAPass`` do not build their patterns
for a graph without their operator (no pattern can match it), and give the same graph;
a graph with it runs ExecuTorch's method. The premise is checked against ExecuTorch's
own patterns."""

from __future__ import annotations

import copy
import importlib

import pytest
import torch

from fastlower import patch
from fastlower.in_process import xnnpack_patterns

PATTERNS = {  # pass -> (module of its patterns, the function building them)
    "ConvertToUpsampleBilinear2d": ("executorch.backends.xnnpack.partition.graphs.bilinear_2d",
                                    "get_graphs_dict"),
    "ConvertToSDPAPass": ("executorch.backends.xnnpack.partition.graphs.sdpa", "get_graphs"),
}


def _operator_of(pass_name: str) -> str:
    [operator] = [op for path, op in xnnpack_patterns.PASSES.items()
                  if path.endswith(":" + pass_name)]
    return operator


def _pass_class(pass_name: str):
    [path] = [path for path in xnnpack_patterns.PASSES if path.endswith(":" + pass_name)]
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("pass_name", sorted(PATTERNS))
def test_every_pattern_holds_the_operator(pass_name):
    """The premise: each pattern has a node calling the pass's operator, and a pattern
    node only matches a graph node of the same target (if ExecuTorch changes its
    patterns, this fails and the skip must be rethought)."""
    module, builder = PATTERNS[pass_name]
    patterns = list(getattr(importlib.import_module(module), builder)())
    assert patterns
    for pattern in patterns:
        assert xnnpack_patterns.matchable(pattern, _operator_of(pass_name))


def _edge_program(module: torch.nn.Module, inputs):
    from executorch.exir import to_edge

    return to_edge(torch.export.export(module, inputs)).exported_program()


class Plain(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


class Upsampling(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.interpolate(x, scale_factor=2.0, mode="bilinear")


class Softmax(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def _run(pass_name: str, program, skipping: bool):
    program = copy.deepcopy(program)
    pass_ = _pass_class(pass_name)(program)
    if not skipping:
        return pass_(program.graph_module).graph_module
    with xnnpack_patterns.skipped_when_absent():
        return pass_(program.graph_module).graph_module


def _refuse_building(monkeypatch, pass_name: str) -> None:
    module, builder = PATTERNS[pass_name]

    def refused():
        raise AssertionError("patterns built for a graph without the operator")

    monkeypatch.setattr(importlib.import_module(module), builder, refused)


@pytest.mark.parametrize("pass_name", sorted(PATTERNS))
def test_without_the_operator_no_patterns_and_the_same_graph(pass_name, monkeypatch):
    program = _edge_program(Plain(), (torch.randn(2, 3),))
    reference = _run(pass_name, program, skipping=False)
    _refuse_building(monkeypatch, pass_name)
    skipped = _run(pass_name, program, skipping=True)
    assert skipped.code == reference.code
    assert [str(n.meta.get("val")) for n in skipped.graph.nodes] == \
        [str(n.meta.get("val")) for n in reference.graph.nodes]
    with pytest.raises(AssertionError, match="patterns built"):
        _run(pass_name, program, skipping=False)  # outside the block ExecuTorch's method runs


@pytest.mark.parametrize("pass_name,model,shape", [
    ("ConvertToUpsampleBilinear2d", Upsampling, (1, 2, 4, 4)),
    ("ConvertToSDPAPass", Softmax, (2, 5))])
def test_with_the_operator_executorchs_method_runs(pass_name, model, shape, monkeypatch):
    program = _edge_program(model(), (torch.randn(*shape),))
    assert xnnpack_patterns.matchable(program.graph_module, _operator_of(pass_name))
    module, builder = PATTERNS[pass_name]
    patterns = importlib.import_module(module)
    real, calls = getattr(patterns, builder), []

    def counted():
        calls.append(1)
        return real()

    monkeypatch.setattr(patterns, builder, counted)
    _run(pass_name, program, skipping=True)
    assert calls == [1]


def test_lowering_with_and_without_the_skip_gives_the_same_pte():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    import executorch.exir  # looked up inside the block: a name bound before is the reference

    class Both(torch.nn.Module):
        def forward(self, x):
            return Upsampling()(torch.relu(x)) + torch.softmax(x, dim=-1).repeat(1, 1, 2, 2)

    def pte(fastlower: bool) -> bytes:
        program = torch.export.export(Both(), (torch.randn(1, 2, 4, 4),))
        if not fastlower:
            return executorch.exir.to_edge_transform_and_lower(
                program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
        with patch.installed():
            return executorch.exir.to_edge_transform_and_lower(
                program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer

    assert pte(True) == pte(False)
