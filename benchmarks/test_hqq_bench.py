"""torchao's HQQ quantization of a weight (``export_llm``'s ``8da4w`` source transform):
torchao's function against fastlower's native kernels (``fastlower.in_process.hqq``), the
same weights in the same session, interleaved rounds, the bits compared every round.

The weights are Llama-3.2-1B's linear shapes (random, seeded): an attention projection
(2048 x 2048), a feed-forward one (8192 x 2048) and an eighth of the output projection
(16032 x 2048; the whole is 128256 x 2048), group 32, int4 range, 20 iterations.

Run (benchmarks/README.md, "torchao's HQQ quantization, natively"):
``python -m pytest benchmarks/test_hqq_bench.py -p no:cacheprovider
--benchmark-json benchmarks/hqq_bench.json``.
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from fastlower.in_process import hqq

primitives = pytest.importorskip("torchao.quantization.quant_primitives")
REFERENCE = primitives._choose_qparams_and_quantize_scale_only_hqq
SHAPES = {"attention": (2048, 2048), "feed-forward": (8192, 2048), "output/8": (16032, 2048)}
ROUNDS = 3


def _torchao(w):
    return REFERENCE(w, [1, 32], -8, 7)


def _fastlower(w):
    return hqq.compute(REFERENCE, w, [1, 32], -8, 7)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_hqq(benchmark, shape):
    w = torch.randn(*SHAPES[shape], generator=torch.Generator().manual_seed(0))
    before = hqq.counts()["native"]
    _fastlower(w)  # the once-per-process premise check is not in the rounds
    times = {"torchao": [], "fastlower": []}
    for round_ in range(ROUNDS):
        order = ("torchao", "fastlower") if round_ % 2 == 0 else ("fastlower", "torchao")
        outs = {}
        for name in order:
            start = time.perf_counter()
            outs[name] = (_torchao if name == "torchao" else _fastlower)(w)
            times[name].append(time.perf_counter() - start)
        assert hqq.same_bits(outs["torchao"], outs["fastlower"]) is None
    assert hqq.counts()["native"] == before + 1 + ROUNDS, "the native kernels did not run"
    medians = {name: statistics.median(t) for name, t in times.items()}
    benchmark.extra_info.update({
        "shape": list(SHAPES[shape]), "threads": torch.get_num_threads(),
        "torchao_s": times["torchao"], "fastlower_s": times["fastlower"],
        "median_torchao_s": medians["torchao"], "median_fastlower_s": medians["fastlower"],
        "speedup": medians["torchao"] / medians["fastlower"]})
    benchmark.pedantic(_fastlower, args=(w,), rounds=1, iterations=1)
