"""torchao's HQQ quantization computed by the native core (``fastlower.quantize.hqq``):
torchao's bits on every input the core takes (adversarial values, every branch of torch's
summation order, both builds of the kernels), torchao's own function on every other input,
and the premise check and verify mode catching a kernel that is wrong."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from fastlower.core.loader import load_core
from fastlower.core.twin import hqq as twin
from fastlower.in_process import hqq
from fastlower.in_process.hqq import native, premise as hqq_premise

primitives = pytest.importorskip("torchao.quantization.quant_primitives")
REFERENCE = primitives._choose_qparams_and_quantize_scale_only_hqq
CORE = load_core()
needs_core = pytest.mark.skipif(CORE is None, reason="the native core is not built")
EPS = float(torch.finfo(torch.float32).eps)


@pytest.fixture(params=["avx2", "portable"])
def kernels(request):
    """Each build of the kernels (the AVX2 one where the CPU has it)."""
    if request.param == "avx2" and not CORE.hqq_uses_avx2():
        pytest.skip("no AVX2 here")
    CORE.hqq_force_portable(request.param == "portable")
    yield request.param
    CORE.hqq_force_portable(False)


def _torchao(w, group, qmin=-8, qmax=7, **kw):
    return REFERENCE(w, [1, group], qmin, qmax, **kw)


def _native(w, group, qmin=-8, qmax=7, **kw):
    before = hqq.counts()["native"]
    out = hqq.compute(REFERENCE, w, [1, group], qmin, qmax, **kw)
    assert hqq.counts()["native"] == before + 1, "the native kernels did not run"
    return out


def _adversarial(rows: int, cols: int, group: int, seed: int) -> torch.Tensor:
    w = hqq_premise.weights(rows, cols, torch.float32, seed)
    w[6, :group] = 3.0e38  # products overflow: an infinite, then a NaN change of scale
    w[7, :group] = torch.linspace(-1.0e-38, 1.0e-38, group)  # scales at eps
    w[8] = torch.tensor([1.0, -1.0]).repeat(cols // 2)  # every group alike
    w[9, 1:group] = 0.0  # one value per group
    return w


@needs_core
@pytest.mark.parametrize("group", [8, 16, 24, 32, 64, 128, 136, 512, 520, 1024, 4096])
def test_the_native_result_is_torchaos_bits(kernels, group):
    w = _adversarial(12, group * 2, group, seed=group)
    for qmin, qmax, iters, tol in ((-8, 7, 20, 1e-5), (-128, 127, 4, 1e-5), (-2, 1, 20, 0.5)):
        ours = _native(w, group, qmin, qmax, iters=iters, early_stop_tol=tol)
        assert hqq.same_bits(ours, _torchao(w, group, qmin, qmax, iters=iters,
                                             early_stop_tol=tol)) is None, (qmin, qmax, iters)


@needs_core
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_weights(kernels, dtype):
    w = hqq_premise.weights(40, 256, dtype, seed=3)
    ours = _native(w, 32)
    assert ours[1].dtype == dtype
    assert hqq.same_bits(ours, _torchao(w, 32)) is None


@needs_core
def test_a_parameter_that_requires_grad_and_a_transposed_weight():
    """As torchao's ``quantize_`` passes a linear's weight: a ``Parameter`` that requires
    grad, in grad mode (torchao's function runs under ``torch.no_grad``)."""
    w = torch.nn.Parameter(hqq_premise.weights(64, 128, torch.float32, seed=4))
    assert torch.is_grad_enabled() and w.requires_grad
    ours, theirs = _native(w, 32), _torchao(w, 32)
    assert not ours[1].requires_grad and not theirs[1].requires_grad
    assert hqq.same_bits(ours, theirs) is None
    t = w.detach().t()
    assert hqq.same_bits(_native(t, 32), _torchao(t, 32)) is None


@needs_core
@pytest.mark.parametrize("threads", [1, 3])
def test_the_threads_do_not_change_the_bits(threads):
    w = _adversarial(37, 256, 32, seed=5).numpy()
    scales = []
    for n in (1, threads):
        scale = np.empty((37, 8), np.float32)
        CORE.hqq_init_scale(w, 32, 8.0, EPS, scale, n)
        rels = [CORE.hqq_step(w, 32, -8.0, 7.0, EPS, scale, n) for _ in range(2)]
        scales.append((scale, rels))
    assert scales[0][0].tobytes() == scales[1][0].tobytes()
    for _, rels in scales:  # the overflowing row: an infinite change, then inf - inf
        assert rels[0] == float("inf") and np.isnan(rels[1])


@needs_core
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_the_first_pass_finds_a_weight_that_is_not_finite(kernels, value):
    w = _adversarial(12, 64, 32, seed=9).numpy()
    scale = np.empty((12, 2), np.float32)
    assert CORE.hqq_init_scale(w, 32, 8.0, EPS, scale, 2)
    assert twin.hqq_init_scale(w, 32, 8.0, EPS, scale, 2)
    w[11, 63] = value
    assert not CORE.hqq_init_scale(w, 32, 8.0, EPS, scale, 2)
    assert not twin.hqq_init_scale(w, 32, 8.0, EPS, scale, 2)


@needs_core
@pytest.mark.parametrize("n", [8, 16, 40, 96, 128, 256, 512, 520, 1024, 2048, 4096])
def test_the_core_and_the_twin_sum_in_torchs_order(kernels, n):
    g = torch.Generator().manual_seed(n)
    binades = torch.randint(-30, 30, (64, n), generator=g).float()
    x = torch.randn(64, n, generator=g) * torch.exp2(binades)
    expected = x.sum(dim=1, dtype=torch.float32)
    core = torch.tensor([CORE.hqq_ordered_sum(row.numpy()) for row in x], dtype=torch.float32)
    assert torch.equal(core.view(torch.int32), expected.view(torch.int32))
    if n <= 1024:
        mine = torch.tensor([twin.hqq_ordered_sum(row.numpy()) for row in x[:8]])
        assert torch.equal(mine.view(torch.int32), expected[:8].view(torch.int32))


@needs_core
def test_the_twin_steps_as_the_core():
    w = _adversarial(12, 96, 32, seed=6).numpy()
    ours, theirs = np.empty((12, 3), np.float32), np.empty((12, 3), np.float32)
    for module, scale in ((CORE, ours), (twin, theirs)):
        module.hqq_init_scale(w, 32, 8.0, EPS, scale, 2)
    for _ in range(3):
        with np.errstate(all="ignore"):
            a = CORE.hqq_step(w, 32, -8.0, 7.0, EPS, ours, 2)
            b = twin.hqq_step(w, 32, -8.0, 7.0, EPS, theirs, 2)
        assert ours.tobytes() == theirs.tobytes() and np.isnan(a) == np.isnan(b)
    q_core, q_twin = np.empty((12, 96), np.int32), np.empty((12, 96), np.int32)
    CORE.hqq_quantize(w, 32, -8.0, 7.0, ours, q_core, 2)
    with np.errstate(all="ignore"):
        twin.hqq_quantize(w, 32, -8.0, 7.0, theirs, q_twin, 2)
    assert np.array_equal(q_core, q_twin)


def _twin_native(order: str):
    def native(w, group, qmin, qmax, iters, tol):
        W = w.to(torch.float32).contiguous().numpy()
        scale = np.empty((W.shape[0], W.shape[1] // group), np.float32)
        twin.hqq_init_scale(W, group, float(max(abs(qmin), abs(qmax))), EPS, scale, 1)
        for _ in range(max(1, iters)):
            rel = twin.hqq_step(W, group, float(qmin), float(qmax), EPS, scale, 1, order=order)
            if torch.tensor(rel, dtype=torch.float32) < tol:
                break
        q = np.empty(W.shape, np.int32)
        twin.hqq_quantize(W, group, float(qmin), float(qmax), scale, q, 1)
        return torch.from_numpy(q), torch.from_numpy(scale).to(w.dtype)
    return native


def test_the_premise_check_fails_on_another_summation_order(monkeypatch):
    monkeypatch.setattr(hqq_premise, "CASES", hqq_premise.CASES[:3])  # the twin is slow
    assert hqq_premise.differing_case(_twin_native("torch"), REFERENCE) is None
    assert hqq_premise.differing_case(_twin_native("sequential"), REFERENCE) is not None


@needs_core
def test_a_failed_premise_runs_torchao_with_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(native, "_PREMISE", {})
    monkeypatch.setattr(native, "differing_case", lambda run, reference: "group 32: scale")
    w = hqq_premise.weights(16, 64, torch.float32, seed=7)
    before = hqq.counts()
    with caplog.at_level(logging.WARNING, logger="fastlower"):
        out = hqq.compute(REFERENCE, w, [1, 32], -8, 7)
    assert hqq.counts()["torchao"] == before["torchao"] + 1
    assert hqq.same_bits(out, _torchao(w, 32)) is None
    assert "differ from this torch's (group 32: scale)" in caplog.text


def _ok() -> torch.Tensor:
    return hqq_premise.weights(16, 64, torch.float32, seed=8)


def _nan() -> torch.Tensor:
    w = _ok()
    w[10, 3] = float("nan")
    return w


def _inf() -> torch.Tensor:
    w = _ok()
    w[10, 3] = float("inf")
    return w


@needs_core
@pytest.mark.parametrize("case", [
    "nan", "inf", "stochastic", "group 4", "group 12", "3-D", "float64", "iters 2.0",
    "tol tensor", "neg bit", "qmin 2**25"])
def test_inputs_outside_the_premise_run_torchao(case):
    w, args, kw = _ok(), ([1, 32], -8, 7), {}
    if case == "nan":
        w = _nan()
    elif case == "inf":
        w = _inf()
    elif case == "stochastic":
        kw = {"stochastic": True}
    elif case == "group 4":
        args = ([1, 4], -8, 7)
    elif case == "group 12":
        w, args = hqq_premise.weights(16, 48, torch.float32, 8), ([1, 12], -8, 7)
    elif case == "3-D":
        w = w.reshape(4, 4, 64)
    elif case == "float64":
        w = w.double()
    elif case == "iters 2.0":
        kw = {"iters": 2.0}
    elif case == "tol tensor":
        kw = {"early_stop_tol": torch.tensor(1e-5)}
    elif case == "neg bit":
        w = torch._neg_view(w)
    elif case == "qmin 2**25":
        args = ([1, 32], -(2 ** 25), 7)
    before = hqq.counts()
    try:
        expected = REFERENCE(w, *args, **kw)
    except Exception as exc:  # torchao rejects it: so must fastlower, the same way
        with pytest.raises(type(exc)):
            hqq.compute(REFERENCE, w, *args, **kw)
    else:
        if case == "stochastic":
            torch.manual_seed(0)
            expected = REFERENCE(w, *args, **kw)
            torch.manual_seed(0)
        got = hqq.compute(REFERENCE, w, *args, **kw)
        assert got[1].requires_grad == expected[1].requires_grad
        assert hqq.same_bits(tuple(t.detach() for t in got),
                             tuple(t.detach() for t in expected)) is None
    assert hqq.counts()["native"] == before["native"]


@needs_core
@pytest.mark.parametrize("qmin, qmax", [(7, -8), (7, 7)])
def test_what_torchao_rejects_fastlower_rejects(qmin, qmax):
    with pytest.raises(AssertionError):
        REFERENCE(_ok(), [1, 32], qmin, qmax)
    with pytest.raises(AssertionError):
        hqq.compute(REFERENCE, _ok(), [1, 32], qmin, qmax)


@needs_core
def test_flushed_denormals_run_torchao():
    before = hqq.counts()
    assert torch.set_flush_denormal(True)
    try:
        hqq.compute(REFERENCE, _ok(), [1, 32], -8, 7)
    finally:
        torch.set_flush_denormal(False)
    assert hqq.counts()["native"] == before["native"]


@needs_core
def test_torchao_mode_never_runs_the_core(monkeypatch):
    monkeypatch.setenv("FASTLOWER_HQQ", "torchao")
    before = hqq.counts()
    hqq.compute(REFERENCE, _ok(), [1, 32], -8, 7)
    assert hqq.counts()["native"] == before["native"]


@needs_core
def test_verify_mode_catches_a_wrong_result(monkeypatch):
    monkeypatch.setenv("FASTLOWER_HQQ", "verify")
    w = _ok()
    assert hqq.same_bits(_native(w, 32), _torchao(w, 32)) is None
    right = native._native

    def one_bit_off(*args):
        qdata, scale = right(*args)
        scale.view(torch.int32)[3, 1] ^= 1
        return qdata, scale

    monkeypatch.setattr(native, "_native", one_bit_off)
    with pytest.raises(hqq.HqqVerificationError, match="in its scale"):
        hqq.compute(REFERENCE, w, [1, 32], -8, 7)


def _f32(*shape):
    return np.zeros(shape, np.float32)


@needs_core
@pytest.mark.parametrize("call", [
    lambda: CORE.hqq_step(_f32(4, 30), 10, -8.0, 7.0, EPS, _f32(4, 3), 1),  # group 10
    lambda: CORE.hqq_step(np.zeros((4, 32)), 32, -8.0, 7.0, EPS, _f32(4, 1), 1),  # float64
    lambda: CORE.hqq_step(_f32(4, 32), 32, -8.0, 7.0, EPS, _f32(4, 2), 1),  # scale's shape
    lambda: CORE.hqq_step(_f32(32, 4).T, 32, -8.0, 7.0, EPS, _f32(4, 1), 1),  # not contiguous
    lambda: CORE.hqq_quantize(_f32(4, 32), 32, -8.0, 7.0, _f32(4, 1),
                              np.zeros((4, 32), np.int64), 1),  # q of int64
    lambda: CORE.hqq_ordered_sum(_f32(12)),  # not whole vectors
])
def test_the_core_rejects_malformed_buffers(call):
    with pytest.raises(ValueError, match="hqq: "):
        call()


def _random_case(rng: np.random.Generator):
    """A shape, a quantization set-up and values of one of several adversarial kinds."""
    group = int(rng.choice([8, 16, 24, 32, 48, 64, 128, 256, 1024]))
    rows, cols = int(rng.integers(1, 24)), group * int(rng.integers(1, 4))
    kind = rng.choice(["binades", "halves", "constant", "sparse", "huge", "tiny", "ints"])
    if kind == "binades":
        w = rng.standard_normal((rows, cols)) * np.exp2(rng.integers(-60, 60, (rows, cols)))
    elif kind == "halves":  # ties of the rounding once the scale is a power of two
        w = rng.integers(-16, 17, (rows, cols)) / 2.0
    elif kind == "constant":
        w = np.full((rows, cols), rng.standard_normal())
    elif kind == "sparse":
        w = rng.standard_normal((rows, cols)) * (rng.random((rows, cols)) < 0.05)
    elif kind == "huge":
        w = rng.standard_normal((rows, cols)) * 1.0e37
    elif kind == "tiny":  # denormal and near-denormal weights
        w = rng.standard_normal((rows, cols)) * 1.0e-39
    else:
        w = rng.integers(-8, 8, (rows, cols)).astype(np.float64)
    dtype = rng.choice([torch.float32, torch.float32, torch.bfloat16, torch.float16])
    if dtype == torch.float16:
        w = np.clip(w, -6.0e4, 6.0e4)
    qmin, qmax = [(-8, 7), (-128, 127), (-2, 1), (0, 15), (-1, 1)][int(rng.integers(0, 5))]
    iters = int(rng.integers(0, 25))
    tol = float(rng.choice([1e-5, 1e-3, 0.1, 0.5, 0.0]))
    weights = torch.from_numpy(w.astype(np.float32)).to(dtype)
    return weights, group, qmin, qmax, iters, tol


@needs_core
@pytest.mark.parametrize("seed", range(6))
def test_random_adversarial_weights_give_torchaos_bits(seed):
    """A seeded differential sweep: 60 random cases per seed, each torchao's bits."""
    rng = np.random.default_rng(seed)
    for case in range(60):
        w, group, qmin, qmax, iters, tol = _random_case(rng)
        ours = _native(w, group, qmin, qmax, iters=iters, early_stop_tol=tol)
        theirs = _torchao(w, group, qmin, qmax, iters=iters, early_stop_tol=tol)
        assert hqq.same_bits(ours, theirs) is None, (seed, case, tuple(w.shape), group, w.dtype,
                                                     qmin, qmax, iters, tol)
