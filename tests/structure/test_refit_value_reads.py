"""A refit keeps checkpoint A's edge stage and partitions for checkpoint B, so it must not
run where ExecuTorch hands B's real values to code that decides them
(``fastlower.cache.refit.value_reads``). Each case lowers A with fastlower in one
process and B with fastlower in another (one cache folder), then B with ExecuTorch:
without the guard each B came out a refit with A's decisions and another ``.pte``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import pytest
import torch

from fastlower.cache.refit import value_reads
from tests.child_lowering import lowered


CASES = {
    "choice": "ops_to_not_decompose is given the real weights",
    "pass": "takes the whole program (an ExportedProgramPassBase)",
    "partition": "lifted constants as they are",
}


def _lower(tmp_path: Path, name: str, checkpoint: str, impl: str) -> Dict[str, Any]:
    return lowered("tests.structure.value_readers", tmp_path / f"{name}-{checkpoint}-{impl}.json",
                   [name, checkpoint, impl, tmp_path / "cache"])


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_refit_is_refused_where_values_decide(name, tmp_path):
    first = _lower(tmp_path, name, "a", "fastlower")
    assert first["lowering_cache"] == "miss", first
    second = _lower(tmp_path, name, "b", "fastlower")
    expected = _lower(tmp_path, name, "b", "reference")
    assert expected["pte"] != first["pte"]  # the reader's threshold was crossed
    assert second["pte"] == expected["pte"], second["refit"]
    assert second["lowering_cache"] == "miss", second
    assert CASES[name] in second["refit"]["refused"], second["refit"]


def _program(with_fakes: bool = True):
    class Add(torch.nn.Module):
        def forward(self, x):
            return x + 1

    program = torch.export.export(Add(), (torch.randn(2),))
    if not with_fakes:
        for node in program.graph.nodes:
            node.meta.pop("val", None)
    return {"forward": program}


def test_xnnpacks_partitioners_as_shipped_are_trusted():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
        XnnpackDynamicallyQuantizedPartitioner, XnnpackPartitioner,
    )

    programs = _program()
    for partitioners in ([XnnpackPartitioner()],
                         [XnnpackDynamicallyQuantizedPartitioner(), XnnpackPartitioner()],
                         {"forward": [XnnpackPartitioner()]}, None, []):
        assert value_reads.refused(partitioners, None, programs) == ""


def test_a_replaced_method_or_configuration_is_not_trusted():
    from executorch.backends.xnnpack.partition.config.generic_node_configs import AddConfig
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    class Partition(XnnpackPartitioner):
        def partition(self, exported_program):
            return super().partition(exported_program)

    class Checked(AddConfig):
        def get_original_aten(self):
            return torch.ops.aten.add.Tensor

    programs = _program()
    assert "ops_to_not_decompose" in value_reads.refused([Partition()], None, programs)
    custom = XnnpackPartitioner(configs=[Checked])
    assert "ops_to_not_decompose" in value_reads.refused([custom], None, programs)


def test_default_choice_without_lifted_constants_is_trusted():
    from executorch.exir.backend.test.op_partitioner_demo import AddMulPartitionerDemo

    assert value_reads.refused([AddMulPartitionerDemo()], None, _program()) == ""


def test_passes_on_the_graph_module_are_trusted_whole_program_passes_are_not():
    from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
    from executorch.exir.pass_manager import ExportedProgramPassManager

    class Whole(ExportedProgramPassBase):
        def call(self, ep):
            return ExportedProgramPassResult(ep, False)

    def on_graph(gm):
        return None

    programs = _program()
    assert value_reads.refused(None, [on_graph], programs) == ""
    assert value_reads.refused(None, {"forward": [on_graph]}, programs) == ""
    for passes in ([Whole()], {"forward": [on_graph, Whole()]},
                   ExportedProgramPassManager([on_graph, Whole()])):
        assert "Whole takes the whole program" in value_reads.refused(None, passes, programs)


def test_a_program_without_fake_tensors_is_not_trusted():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    programs = _program(with_fakes=False)
    assert "no fake tensors" in value_reads.refused([XnnpackPartitioner()], None, programs)
    assert value_reads.refused(None, None, programs) == ""
