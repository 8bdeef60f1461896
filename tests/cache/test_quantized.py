"""torchao's HQQ quantization of a weight, remembered by the weight's bytes
(``fastlower.cache.quantized``): a hit gives torchao's own tensors bit for bit, in
another process too; anything that could change the result is in the key; a damaged
entry is a miss; verify mode catches an entry that does not match a fresh run."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
import torch

import fastlower.patch
import fastlower.preprocess
from fastlower.cache import quantized
from fastlower.cache.errors import QuantizationCacheVerificationError
from fastlower.cache.store import LoweringStore
from tests import python_children

torchao_primitives = pytest.importorskip("torchao.quantization.quant_primitives")
REFERENCE = fastlower.patch.reference_of(quantized.REFERENCE_NAME)


class _Subclass(torch.Tensor):
    pass


def _weight(seed: int = 0, rows: int = 256, cols: int = 512) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randn(rows, cols)


def _same(a, b) -> bool:
    return all(x.dtype == y.dtype and x.shape == y.shape
               and torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8))
               for x, y in zip(a, b))


def _through_fastlower(folder: Path, weight: torch.Tensor, verify: bool = False, **kwargs):
    """The call as torchao's own module makes it, under fastlower with ``folder``."""
    from torchao.quantization.quantize_.workflows.intx import intx_unpacked_to_int8_tensor as ix

    before = quantized.counts()
    with fastlower.preprocess.options(cache_dir=str(folder), verify=verify), \
            fastlower.patch.installed():
        result = ix._choose_qparams_and_quantize_scale_only_hqq(weight, [1, 32], -8, 7, **kwargs)
    after = quantized.counts()
    return result, {k: after[k] - before[k] for k in after}


def test_routed_only_under_fastlower(tmp_path):
    from torchao.quantization.quantize_.workflows.intx import intx_unpacked_to_int8_tensor as ix

    assert ix._choose_qparams_and_quantize_scale_only_hqq is REFERENCE
    with fastlower.patch.installed():
        assert ix._choose_qparams_and_quantize_scale_only_hqq is not REFERENCE
    assert ix._choose_qparams_and_quantize_scale_only_hqq is REFERENCE
    # no folder: torchao's function runs, nothing is kept
    with fastlower.patch.installed():
        result = ix._choose_qparams_and_quantize_scale_only_hqq(_weight(), [1, 32], -8, 7)
    assert _same(result, REFERENCE(_weight(), [1, 32], -8, 7))


def test_a_hit_is_torchaos_result_bit_for_bit(tmp_path):
    weight = _weight()
    expected = REFERENCE(weight, [1, 32], -8, 7)
    first, counted = _through_fastlower(tmp_path, weight)
    assert counted == {"hit": 0, "stored": 1, "ran": 0} and _same(first, expected)
    second, counted = _through_fastlower(tmp_path, weight.clone())
    assert counted == {"hit": 1, "stored": 0, "ran": 0} and _same(second, expected)
    assert second[0].dtype == torch.int32 and second[0].is_contiguous()


@pytest.mark.parametrize("change", [
    "one element", "dtype", "shape", "qrange", "iters", "tol", "block"])
def test_every_input_is_in_the_key(tmp_path, change):
    weight = _weight()
    _through_fastlower(tmp_path, weight)
    args, kwargs = ([weight, [1, 32], -8, 7], {})
    if change == "one element":
        args[0] = weight.clone()
        args[0][3, 5] = torch.nextafter(args[0][3, 5], torch.tensor(10.0))
    elif change == "dtype":
        args[0] = weight.to(torch.bfloat16)
    elif change == "shape":
        args[0] = weight.reshape(512, 256)
    elif change == "qrange":
        args[2:] = [-4, 3]
    elif change == "iters":
        kwargs = {"iters": 19}
    elif change == "tol":
        kwargs = {"early_stop_tol": 1e-6}
    elif change == "block":
        args[1] = [1, 64]
    with fastlower.preprocess.options(cache_dir=str(tmp_path)), fastlower.patch.installed():
        before = quantized.counts()
        got = quantized.choose_qparams_hqq(*args, **kwargs)
        after = quantized.counts()
    assert after["hit"] == before["hit"], change
    assert _same(got, REFERENCE(*args, **kwargs)), change


def test_a_models_parameter_is_served(tmp_path):
    """export_llm's weights are ``nn.Parameter`` s that require grad: torchao runs under
    ``no_grad``, so the result is the same, and a hit gives it."""
    weight = torch.nn.Parameter(_weight())
    expected = REFERENCE(weight, [1, 32], -8, 7)
    assert not any(t.requires_grad for t in expected)
    _through_fastlower(tmp_path, weight)
    got, counted = _through_fastlower(tmp_path, torch.nn.Parameter(_weight()))
    assert counted["hit"] == 1 and _same(got, expected)
    assert not any(t.requires_grad for t in got)


@pytest.mark.parametrize("case", ["stochastic", "subclass", "small", "nan"])
def test_what_is_never_served(tmp_path, case):
    weight, kwargs = _weight(), {}
    if case == "stochastic":  # random numbers: never the same twice
        kwargs = {"stochastic": True}
    elif case == "subclass":  # a tensor subclass may compute otherwise
        weight = weight.as_subclass(_Subclass)
    elif case == "small":
        weight = weight[:8, :64].clone()
    elif case == "nan":  # NaN quantizes outside [qmin, qmax]: not kept as int8
        weight[0, 0] = float("nan")
    for _ in range(2):
        with torch.no_grad():
            _, counted = _through_fastlower(tmp_path, weight, **kwargs)
        assert counted["hit"] == 0 and counted["stored"] == 0, (case, counted)


def _entry_keys(folder: Path):
    store = LoweringStore(folder, 1 << 30)
    try:
        return store, [k for k in store.store.iterkeys() if str(k).startswith(quantized.PREFIX)]
    except Exception:
        store.close()
        raise


def test_a_damaged_entry_is_a_miss_and_dropped(tmp_path):
    weight = _weight()
    _through_fastlower(tmp_path, weight)
    store, keys = _entry_keys(tmp_path)
    try:
        (key,) = keys
        with store.open(key) as stream:
            data = bytearray(stream.read())
        data[len(data) // 2] ^= 1
        store.store.set(key, bytes(data), tag=quantized.TAG)
    finally:
        store.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, counted = _through_fastlower(tmp_path, weight)
    assert counted == {"hit": 0, "stored": 1, "ran": 0}
    assert _same(got, REFERENCE(weight, [1, 32], -8, 7))
    assert any("damaged quantized-weight" in str(w.message) for w in caught)


def test_verify_mode_catches_an_entry_that_differs(tmp_path):
    """An authentic entry (the folder's own key signed it) whose qdata is not what torchao
    gives: served without verify mode (the folder's owner vouched for it), refused with."""
    weight = _weight()
    _through_fastlower(tmp_path, weight)
    store, (key,) = _entry_keys(tmp_path)
    try:
        qdata, scale = REFERENCE(weight, [1, 32], -8, 7)
        forged = qdata.clone()
        forged[0, 0] = 7 if int(forged[0, 0]) != 7 else 6
        data = quantized.encode(key, store.folder.seal(quantized.PURPOSE, key), forged, scale,
                                torch.int8)
        store.store.set(key, data, tag=quantized.TAG)
    finally:
        store.close()
    served, _ = _through_fastlower(tmp_path, weight)
    assert torch.equal(served[0], forged)
    with pytest.raises(QuantizationCacheVerificationError, match="qdata"):
        _through_fastlower(tmp_path, weight, verify=True)


_CHILD = """
import json, sys, torch, fastlower.patch, fastlower.preprocess
from fastlower.cache import quantized
from torchao.quantization.quantize_.workflows.intx import intx_unpacked_to_int8_tensor as ix
torch.manual_seed(0)
weight = torch.randn(256, 512)
with fastlower.preprocess.options(cache_dir=sys.argv[1]), fastlower.patch.installed():
    qdata, scale = ix._choose_qparams_and_quantize_scale_only_hqq(weight, [1, 32], -8, 7)
print(json.dumps({"counts": quantized.counts(), "qdata": qdata.sum().item(),
                  "scale": scale.double().sum().item()}))
"""


def test_two_processes_share_the_folder(tmp_path):
    runs = [json.loads(python_children.run([sys.executable, "-c", _CHILD, str(tmp_path)],
                                           capture_output=True, text=True, check=True,
                                           timeout=600).stdout.splitlines()[-1])
            for _ in range(2)]
    assert runs[0]["counts"]["stored"] == 1 and runs[1]["counts"]["hit"] == 1, runs
    qdata, scale = REFERENCE(_weight(), [1, 32], -8, 7)
    for run in runs:
        assert run["qdata"] == qdata.sum().item() and run["scale"] == scale.double().sum().item()
