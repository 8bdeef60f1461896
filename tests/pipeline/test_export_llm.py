"""ExecuTorch's own LLM export (``export_llm``) with fastlower, as users run it.

The tiny config in the default run: the reference (plain ``python``), then
``fastlower run`` twice with the same cache folder, each its own process. The three
``.pte`` files must be byte-identical; the first fastlower process misses every
partition and stores the whole lowering, the second is served the whole
``to_edge_transform_and_lower`` from the lowering cache (no partitioner, no
``preprocess``). In slow mode, fastlower's fake outputs in verify mode on the same
program give the reference's ``.pte`` too (one reference export of the tiny config serves
both), and a checkpoint with one weight changed misses the lowering cache and takes every
other partition from the preprocess cache. The unquantized config runs in slow mode, the
stories15M-size one in slow mode in ``test_export_llm_stories15m.py`` (its own module, so
another worker runs it beside these); the timings are benchmarks
(``benchmarks/test_export_llm_bench.py``).
"""

from __future__ import annotations

import dataclasses
from typing import List

import pytest

from .cold_warm import reference_then_cold_then_warm
from .export_llm import TINY, run_export


@dataclasses.dataclass(frozen=True)
class ReferencePrograms:
    """The canonical lines of ExecuTorch's main Edge program and of its program after
    ``to_executorch``, in the tiny reference export."""

    edge: List[str]
    executorch: List[str]


@pytest.fixture(scope="module")
def tiny_reference_export(tmp_path_factory):
    """ExecuTorch's export of the tiny config, made once for the module's tests, and the
    canonical lines of its programs."""
    work = tmp_path_factory.mktemp("tiny-reference")
    lines = work / "edge-lines.txt"
    reference = run_export("reference", TINY, work, extra_env={"TIMED_EDGE_LINES": str(lines)})
    assert reference.ok, reference.log
    return reference, ReferencePrograms(_main_program(lines, "edge"),
                                        _main_program(lines, "executorch"))


@pytest.fixture(scope="module")
def tiny_reference(tiny_reference_export):
    """ExecuTorch's export of the tiny config (an ``ExportRun``)."""
    return tiny_reference_export[0]


def _main_program(path, kind: str) -> list:
    """The largest ``kind`` program's canonical lines in a ``TIMED_EDGE_LINES`` file (the
    model's; XNNPACK's preprocess makes small ones of its own)."""
    blocks = [block.split("\n", 1) for block in path.read_text().split("\f\n") if block]
    return max((text for head, text in blocks if head == kind), key=len).splitlines()


def _first_difference(expected: list, got: list):
    found = next(((i, a, b) for i, (a, b) in enumerate(zip(expected, got)) if a != b), None)
    return found if found is not None or len(got) == len(expected) else (len(expected), len(got))


def test_export_llm_edge_program_is_executorchs(tiny_reference_export, tmp_path):
    """fastlower on export_llm's program (dynamic shapes, an item() per layer, 8da4w, two
    XNNPACK partitioners), every shortcut in its default mode: the Edge program and the
    ExecuTorch program ExecuTorch's, line for line (metadata, unbacked symbols, range
    constraints: a skipped retrace's replayed growth of the shape environment included)."""
    lines = tmp_path / "edge-lines.txt"
    fast = run_export("fastlower", TINY, tmp_path, workers=2,
                      extra_env={"TIMED_EDGE_LINES": str(lines)})
    assert fast.ok, fast.log
    reference, programs = tiny_reference_export
    assert fast.pte_sha256 == reference.pte_sha256
    # the second partitioner's default-table retrace repeats the first's: skipped
    # (in_process.edge.repeated_retrace), its growth of the shape environment replayed
    assert fast.edge_retraces == [[1, 1, 3]], fast.edge_retraces
    expected = programs.edge
    assert len(expected) > 1000 and any("unbacked" in line for line in expected)
    assert _first_difference(expected, _main_program(lines, "edge")) is None
    expected = programs.executorch
    assert len(expected) > 1000 and any("unbacked" in line for line in expected)
    assert _first_difference(expected, _main_program(lines, "executorch")) is None


@pytest.mark.parametrize("config", [
    TINY,
    pytest.param(TINY.with_qmode(None), marks=pytest.mark.slow),
], ids=lambda c: c.name)
def test_export_llm_identical_pte_and_warm_cache(config, tmp_path, request):
    reference = request.getfixturevalue("tiny_reference") if config == TINY else None
    reference_then_cold_then_warm(config, tmp_path, reference)


@pytest.mark.slow  # fake outputs in verify mode: tests/test_fake_outputs.py in the default run
def test_export_llm_quantized_in_verify_mode_gives_the_reference_pte(tiny_reference, tmp_path):
    """fastlower.fake_outputs and the retraces' memo of torchao's operators (and of
    ExecuTorch's EDGE_DO_NOT_DECOMP stand-ins for them) on export_llm's program (8da4w;
    dynamic shapes; two XNNPACK partitioners), in its own process, both in verify mode: no
    difference, and both fake-output shortcuts taken in the edge stage and in
    to_executorch."""
    checked = run_export("fastlower", TINY, tmp_path, workers=2,
                         extra_env={"FASTLOWER_FAKE_OUTPUTS": "verify",
                                    "FASTLOWER_RETRACE_QUANT_OPS": "verify"})
    assert checked.ok, checked.log
    assert checked.pte_sha256 == tiny_reference.pte_sha256
    counts = {name: rest for name, *rest in checked.fake_outputs}
    assert counts["to_edge_transform_and_lower"][2] > 0  # quantization operators remembered
    assert counts["to_executorch"][0] > 0  # delegate calls read off their programs
    assert counts["to_edge_transform_and_lower"][4] > 0  # calls repeated across passes
    answered = checked.retrace_memo[-1]  # the retraces' memo: stand-ins answered too
    assert answered.get("EDGE_DO_NOT_DECOMP.dequantize_affine.default", 0) > 0


# a weight of a quantized linear (layer 0's feed-forward down projection): its
# partition changes, the others do not
NUDGED = "layers.0.feed_forward.w2.weight"


@pytest.mark.slow
def test_export_llm_one_weight_changed_hits_the_preprocess_cache(tmp_path):
    config = TINY
    cache = tmp_path / "cache"
    cold = run_export("fastlower", config, tmp_path, workers=2, cache_dir=cache)
    assert cold.ok, cold.log
    changed_reference = run_export("reference", config, tmp_path, nudge=NUDGED)
    assert changed_reference.ok, changed_reference.log
    # the lowering cache off: with it, the changed checkpoint is refit from the cold run's
    # entry (tests/structure/test_refit.py); here the preprocess cache is what is tested
    changed = run_export("fastlower", config, tmp_path, workers=2, cache_dir=cache, nudge=NUDGED,
                         extra_env={"FASTLOWER_LOWERING_CACHE": "0"})
    assert changed.ok, changed.log
    assert changed.pte_sha256 == changed_reference.pte_sha256 != cold.pte_sha256
    assert changed.lowering_cache == [None]  # the lowering cache took no part: no refit
    # only the partitions holding the changed weight are preprocessed again
    assert changed.cache_hits > 0 and 0 < changed.cache_misses < cold.cache_misses
