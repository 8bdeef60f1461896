"""torchao's scale-only HQQ quantization of a weight, computed by the native core.

``export_llm``'s ``8da4w`` source transform quantizes every linear weight with torchao's
``_choose_qparams_and_quantize_scale_only_hqq`` before anything is exported: up to 20
iterations, each seven torch operators over the whole weight and a new tensor for each,
164 s of a 338 s first export at Llama-3.2-1B's shape. The iterations are independent
per group of weights but for the early stop, so ``fastlower._core`` (``csrc/hqq.cpp``)
runs each iteration as one pass that keeps a group in cache, with torch's float32
operations in torch's order; the early stop is decided here with torch's own comparison.

**Premise**: the result is torchao's bit for bit. Element-wise, each step is an exactly
rounded IEEE float32 operation (division, round half to even, clamp, product, the
``where``, ``clamp_min``, ``abs``), the same in any implementation; the two sums per group
add in the order of torch's vectorized CPU sum over an inner dimension, which the core
reproduces. Guards, each a fall-back to torchao's function:

* the order of torch's sums is this process's torch's: checked once per process against
  torchao on inputs that take every branch of that order (group sizes 8 to 1024, values
  over 40 binades, zeros, signed zeros, denormals, ties); a different order changes most
  of those sums' bits;
* the inputs are ones the core covers: a plain CPU tensor (or ``nn.Parameter``) of
  float32, float16 or bfloat16, 2-D, no negative or conjugate bit, every value finite
  (``requires_grad`` is not read: torchao's function runs under ``torch.no_grad``, and so
  does this one); ``block_size`` ``[1, g]`` with ``g`` a multiple of 8 in [8, 4096] dividing the
  columns; ``qmin < qmax`` ints within 2**24 (exact in float32); ``iters`` an int,
  ``early_stop_tol`` a float or int, ``stochastic`` False;
* the calling thread does not flush denormals to zero (``torch.set_flush_denormal``).

``FASTLOWER_HQQ``: ``native`` (the default), ``torchao`` (always torchao's function),
``verify`` (both; :class:`HqqVerificationError` at any difference, else torchao's result).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional, Tuple

import torch

from ... import settings
from ...core.loader import load_core
from ...errors import FastlowerError
from .premise import Result, differing_case, same_bits

__all__ = ["HqqVerificationError", "compute", "counts", "ineligible", "premise_holds"]

log = logging.getLogger(__name__)

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_MAX_Q = 1 << 24
_LOCK = threading.Lock()
_COUNTS = {"native": 0, "torchao": 0}
_PREMISE: dict = {}  # id(core) -> bool, under _LOCK


class HqqVerificationError(FastlowerError, RuntimeError):
    """``FASTLOWER_HQQ=verify``: the native result differs from torchao's."""

    def __init__(self, output: str, shape: Tuple[int, ...], block_size: Any):
        super().__init__(f"the native HQQ quantization of a {list(shape)} weight "
                         f"(block size {list(block_size)}) differs from torchao's in its "
                         f"{output}; set FASTLOWER_HQQ=torchao and report it")
        self.output = output
        self.shape = shape
        self.block_size = block_size

    def __reduce__(self):
        return HqqVerificationError, (self.output, self.shape, self.block_size)


def counts() -> dict:
    """This process's weights quantized by the native kernels and by torchao."""
    with _LOCK:
        return dict(_COUNTS)


def _count(what: str) -> None:
    with _LOCK:
        _COUNTS[what] += 1


def _is_int(value: Any) -> bool:
    return type(value) is int


def ineligible(hp_tensor: Any, block_size: Any, qmin: Any, qmax: Any, iters: Any,
               stochastic: Any, early_stop_tol: Any) -> Optional[str]:
    """Why the core does not cover these inputs, or None (whether the values are finite
    is the kernels' first pass)."""
    if type(hp_tensor) not in (torch.Tensor, torch.nn.Parameter):
        return "not a plain tensor"
    if (hp_tensor.device.type != "cpu" or hp_tensor.layout != torch.strided
            or hp_tensor.dtype not in _FLOATS or hp_tensor.ndim != 2
            or hp_tensor.is_neg() or hp_tensor.is_conj()):
        return "not a 2-D CPU float tensor"
    if stochastic is not False or not _is_int(iters) or type(early_stop_tol) not in (float, int):
        return "stochastic, or iters / early_stop_tol of another type"
    if not (isinstance(block_size, (list, tuple)) and len(block_size) == 2
            and all(_is_int(b) for b in block_size) and block_size[0] == 1):
        return "block size not [1, g]"
    group, (rows, cols) = block_size[1], hp_tensor.shape
    if not (8 <= group <= 4096 and group % 8 == 0 and rows > 0 and cols > 0 and cols % group == 0):
        return "group size"
    if not (_is_int(qmin) and _is_int(qmax) and -_MAX_Q <= qmin < qmax <= _MAX_Q):
        return "qmin / qmax"
    return None


def _flushes_denormals() -> bool:
    tiny = torch.full((1,), 1.0e-39, dtype=torch.float32)
    return bool((tiny * 1.0 == 0).item())


@torch.no_grad()
def _native(core: Any, hp_tensor: torch.Tensor, group: int, qmin: int, qmax: int, iters: int,
            early_stop_tol: float) -> Optional[Result]:
    """torchao's function (``torch.no_grad`` as well), step for step, each step a pass of
    the core; None when a weight is not finite (the first pass finds out)."""
    weights = hp_tensor.detach().to(torch.float32).contiguous()
    w = weights.numpy()
    rows, cols = weights.shape
    eps = torch.finfo(torch.float32).eps
    qabs = max(abs(qmin), abs(qmax)) or 1
    threads = torch.get_num_threads()
    scale = torch.empty(rows, cols // group, dtype=torch.float32)
    if not core.hqq_init_scale(w, group, float(qabs), eps, scale.numpy(), threads):
        return None
    for _ in range(max(1, iters)):
        rel = core.hqq_step(w, group, float(qmin), float(qmax), eps, scale.numpy(), threads)
        if torch.tensor(rel, dtype=torch.float32) < early_stop_tol:  # torchao's comparison
            break
    qdata = torch.empty(rows, cols, dtype=torch.int32)
    core.hqq_quantize(w, group, float(qmin), float(qmax), scale.numpy(), qdata.numpy(), threads)
    return qdata, scale.to(hp_tensor.dtype)


def premise_holds(core: Any, reference: Callable[..., Result]) -> bool:
    """Whether the core gives torchao's bits on this process's torch (checked once)."""
    with _LOCK:
        known = _PREMISE.get(id(core))
    if known is not None:
        return known
    found = differing_case(lambda *args: _native(core, *args), reference)
    if found is not None:
        log.warning("fastlower: torchao's HQQ quantization runs as torchao: the native "
                    "kernels' sums differ from this torch's (%s)", found)
    with _LOCK:
        _PREMISE[id(core)] = found is None
    return found is None


def compute(reference: Callable[..., Result], hp_tensor: Any, block_size: Any, qmin: Any,
            qmax: Any, *, iters: Any = 20, stochastic: Any = False,
            early_stop_tol: Any = 1e-5) -> Result:
    """``reference(hp_tensor, block_size, qmin, qmax, ...)``'s result (torchao's
    function), computed by the native core where the module's premise covers it."""
    def run() -> Result:
        return reference(hp_tensor, block_size, qmin, qmax, iters=iters,
                         stochastic=stochastic, early_stop_tol=early_stop_tol)

    mode = settings.choice(settings.HQQ)
    core = load_core() if mode != "torchao" else None
    native = None
    if (core is not None and ineligible(hp_tensor, block_size, qmin, qmax, iters, stochastic,
                                        early_stop_tol) is None
            and not _flushes_denormals() and premise_holds(core, reference)):
        native = _native(core, hp_tensor, block_size[1], qmin, qmax, iters, early_stop_tol)
    if native is None:
        _count("torchao")
        return run()
    _count("native")
    if mode != "verify":
        return native
    real = run()
    found = same_bits(native, real)
    if found is not None:
        raise HqqVerificationError(found, tuple(hp_tensor.shape), block_size)
    return real
