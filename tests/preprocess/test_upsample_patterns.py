"""fastlower.preprocess.upsample_patterns: inside fastlower's lowering steps, XNNPACK's
``ConvertToUpsampleBilinear2d`` does not build its patterns for a graph without an
upsample node (it cannot match), and gives the same graph; a graph with one runs
ExecuTorch's method. The premise is checked against ExecuTorch's own patterns."""

from __future__ import annotations

import copy

import pytest
import torch

from fastlower import patch
from fastlower.preprocess import upsample_patterns


def test_every_pattern_is_one_upsample_node():
    """The premise: a pattern's only operator is ``upsample_bilinear2d.vec``, so a graph
    without an upsample node has no match (if ExecuTorch changes its patterns, this
    fails and the skip must be rethought)."""
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d

    patterns = bilinear_2d.get_graphs_dict()
    assert patterns
    for pattern in patterns:
        targets = {str(node.target) for node in pattern.graph.nodes
                   if node.op == "call_function"}
        assert len(targets) == 1 and "upsample_bilinear2d.vec" in next(iter(targets))
        assert upsample_patterns.matchable(pattern)


def _edge_program(module: torch.nn.Module, inputs):
    from executorch.exir import to_edge

    return to_edge(torch.export.export(module, inputs)).exported_program()


class Plain(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


class Upsampling(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.interpolate(x, scale_factor=2.0, mode="bilinear")


def _run(program, skipping: bool):
    from executorch.backends.xnnpack._passes.convert_to_upsample_bilinear2d import (
        ConvertToUpsampleBilinear2d,
    )

    program = copy.deepcopy(program)
    if not skipping:
        return ConvertToUpsampleBilinear2d(program)(program.graph_module).graph_module
    with upsample_patterns.skipped_when_absent():
        return ConvertToUpsampleBilinear2d(program)(program.graph_module).graph_module


def test_no_upsample_node_no_patterns_and_the_same_graph(monkeypatch):
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d

    graph = _edge_program(Plain(), (torch.randn(2, 3),))
    reference = _run(graph, skipping=False)

    def refused():
        raise AssertionError("patterns built for a graph without an upsample node")

    monkeypatch.setattr(bilinear_2d, "get_graphs_dict", refused)
    skipped = _run(graph, skipping=True)
    assert skipped.code == reference.code
    assert [str(n.meta.get("val")) for n in skipped.graph.nodes] == \
        [str(n.meta.get("val")) for n in reference.graph.nodes]
    with pytest.raises(AssertionError, match="patterns built"):
        _run(graph, skipping=False)  # outside the block ExecuTorch's method runs


def test_an_upsample_node_runs_executorchs_method(monkeypatch):
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d

    graph = _edge_program(Upsampling(), (torch.randn(1, 2, 4, 4),))
    assert upsample_patterns.matchable(graph.graph_module)
    calls = []
    real = bilinear_2d.get_graphs_dict

    def counted():
        calls.append(1)
        return real()

    monkeypatch.setattr(bilinear_2d, "get_graphs_dict", counted)
    _run(graph, skipping=True)
    assert calls == [1]


def test_lowering_with_and_without_the_skip_gives_the_same_pte():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    class Both(torch.nn.Module):
        def forward(self, x):
            return Upsampling()(torch.relu(x)) + 1.0

    def pte(fastlower: bool) -> bytes:
        program = torch.export.export(Both(), (torch.randn(1, 2, 4, 4),))
        if not fastlower:
            return to_edge_transform_and_lower(
                program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
        with patch.installed():
            return to_edge_transform_and_lower(
                program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer

    assert pte(True) == pte(False)
