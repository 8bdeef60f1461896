"""XnnpackPartitioner (GroupBasedPartitioner underneath) with acceleration on: identical
tags, and identical lowered programs through ``fastlower.to_backend``."""

from __future__ import annotations

import copy
import logging
import warnings
from typing import Dict, List, Tuple

import pytest
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir.backend.backend_api import to_backend as reference_to_backend
from executorch.exir.backend.partitioner import Partitioner

import fastlower
import fastlower.partitioners as fp
from fastlower.frontends.examples.llama import edge_llama
from fastlower.partitioners import native
from tests.differential import harness as H
from tests.models.basic import build_llama_case
from tests.models.registry import MODEL_CASES, SECOND_CASES


@pytest.fixture(autouse=True)
def _quiet():
    logging.disable(logging.WARNING)  # XnnpackPartitioner warns on every call
    yield
    logging.disable(logging.NOTSET)


@pytest.fixture
def native_calls(monkeypatch):
    calls = []
    real_cap, real_group = native.propose_capability, native.propose_group
    monkeypatch.setattr(native, "propose_capability",
                        lambda p: calls.append("capability") or real_cap(p))
    monkeypatch.setattr(native, "propose_group", lambda p: calls.append("group") or real_group(p))
    return calls


def _tags(result) -> Tuple[List[Tuple[str, object]], List[str]]:
    program = result.tagged_exported_program
    return ([(n.name, n.meta.get("delegation_tag")) for n in program.graph.nodes],
            list(result.partition_tags))


def _same_tags(partitioner: Partitioner, program) -> int:
    """Partition a copy with the reference and another with acceleration on; returns the
    number of partitions (asserting both agree)."""
    with fp.reference():
        expected = _tags(partitioner(copy.deepcopy(program)))
    with fp.accelerated():
        got = _tags(partitioner(copy.deepcopy(program)))
    assert got == expected
    return len(expected[1])


@pytest.mark.parametrize("n_layers", [1, 2, pytest.param(3, marks=pytest.mark.slow)])
def test_decoder_tags(n_layers, native_calls):
    program, _ = edge_llama(n_layers)
    assert _same_tags(XnnpackPartitioner(), program) > n_layers
    assert native_calls == ["group"]


@pytest.mark.slow
@pytest.mark.parametrize("n_layers", list(range(4, 12)) + [16, 24, 32, 64])
def test_decoder_tags_large(n_layers):
    program, _ = edge_llama(n_layers)
    assert _same_tags(XnnpackPartitioner(), program) > n_layers


# large decoders are covered by the decoder tests above; SECOND_CASES by a case of their kind
_SLOW_MODELS = {"llama4_xnnpack"}


def _cases():
    return [pytest.param(name,
                         marks=[pytest.mark.slow]
                         if case.slow or name in _SLOW_MODELS or name in SECOND_CASES else [])
            for name, case in MODEL_CASES.items()]


@pytest.mark.parametrize("name", _cases())
def test_model_tags(name):
    """Every model of tests/models/registry.py: same tags from each of its partitioners."""
    built = MODEL_CASES[name].build()
    partitioners: Dict[str, Partitioner] = H._method_partitioners(built)
    for method, program in built.epm._edge_programs.items():
        if method not in partitioners:
            continue
        steps = partitioners[method]
        if not isinstance(steps, list):
            _same_tags(steps, program)
            continue
        # a chain: each partitioner sees the program the previous ones lowered
        for step in steps:
            _same_tags(step, program)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                program = reference_to_backend(copy.deepcopy(program), step)


@pytest.mark.parametrize("n_layers", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_decoder_lowering_identical(n_layers, native_calls):
    """fastlower.to_backend (acceleration on by default) == the reference's to_backend."""
    factory = lambda: build_llama_case(n_layers)  # noqa: E731
    ref = H.lower(H.REFERENCE, factory, "direct")
    got = H.lower(fastlower.to_backend, factory, "direct")
    assert native_calls == ["group"]
    H.assert_same_lowering(ref, got, check_inputs=False)
    H.assert_same_executorch(H.to_executorch(ref), H.to_executorch(got))


def test_environment_switch_off(monkeypatch, native_calls):
    monkeypatch.setenv(fp.ENV, "0")
    program, _ = edge_llama(1)
    fastlower.to_backend(program, XnnpackPartitioner())
    assert native_calls == []


def test_patch_installed_uses_native_partitioners(native_calls):
    """to_edge_transform_and_lower under fastlower.patch.installed() proposes natively."""
    import executorch.exir  # looked up inside the block: a name bound before is the reference

    import fastlower.patch

    built = build_llama_case(1)
    with fastlower.patch.installed():
        executorch.exir.to_edge_transform_and_lower(built.aten,
                                                    partitioner=[XnnpackPartitioner()])
    assert native_calls == ["group"]


# ----------------------------------------------------------------------------- user models
# Programs as users make them (fastlower.frontends.examples.user_models): ExecuTorch's own llama
# Transformer and Hugging Face decoders, through plain to_edge (linear decomposed into
# permute + addmm, so XNNPACK's GEMM configs use get_source_partitions) and through
# to_edge_transform_and_lower's partitioning step.

_USER_MODELS = ["executorch_llama", "hf_llama", "hf_gpt2"]


@pytest.mark.parametrize("name", _USER_MODELS)
@pytest.mark.parametrize("n_layers", [1, pytest.param(2, marks=pytest.mark.slow),
                                      pytest.param(4, marks=pytest.mark.slow)])
def test_user_model_tags_plain_to_edge(name, n_layers, native_calls):
    pytest.importorskip("transformers")
    from fastlower.frontends.examples.user_models import edge_program

    program = edge_program(name, n_layers)
    assert _same_tags(XnnpackPartitioner(), program) >= n_layers
    assert native_calls == ["group"]


@pytest.mark.parametrize("name", ["executorch_llama",
                                  pytest.param("hf_llama", marks=pytest.mark.slow),
                                  pytest.param("hf_gpt2", marks=pytest.mark.slow)])
def test_user_model_tags_transform_and_lower_path(name, native_calls):
    """The program to_edge_transform_and_lower partitions (linear preserved): the same
    tags with the reference's code and with acceleration on."""
    pytest.importorskip("transformers")
    from executorch.exir import to_edge_transform_and_lower

    from fastlower.frontends.examples.user_models import aten_program

    class Partitioned(Exception):
        """Stops the lowering once the tags are known (no backend preprocess)."""

    class Recording(XnnpackPartitioner):
        def partition(self, exported_program):
            self.tags = _tags(super().partition(exported_program))
            raise Partitioned

    tags = {}
    for impl, context in (("reference", fp.reference), ("accelerated", fp.accelerated)):
        partitioner = Recording()
        with context(), pytest.raises(Partitioned):
            to_edge_transform_and_lower(aten_program(name, 2), partitioner=[partitioner])
        tags[impl] = partitioner.tags
    assert tags["accelerated"] == tags["reference"] and len(tags["reference"][1]) >= 2
    assert native_calls == ["group"]


def test_vulkan_tags_plain_to_edge():
    """VulkanPartitioner (torch.fx's CapabilityBasedPartitioner underneath)."""
    vulkan = pytest.importorskip("executorch.backends.vulkan.partitioner.vulkan_partitioner")
    from fastlower.frontends.examples.user_models import edge_program

    program = edge_program("executorch_llama", 1)
    assert _same_tags(vulkan.VulkanPartitioner(), program) >= 1


def test_coreml_tags_plain_to_edge(native_calls):
    """CoreMLPartitioner (torch.fx's CapabilityBasedPartitioner underneath, one partition
    per connected supported region)."""
    coreml = pytest.importorskip("executorch.backends.apple.coreml.partition")
    from fastlower.frontends.examples.user_models import edge_program

    program = edge_program("executorch_llama", 2)
    assert _same_tags(coreml.CoreMLPartitioner(), program) >= 1
    assert native_calls == ["capability"]
