"""The inputs on which the native HQQ kernels must give torchao's bits, once per process.

Each case takes a branch of torch's summation order (one vector; up to four; the rows of
four; a full cascade block of 16 rows and the rows after it), a dtype, a quantization
range and an iteration count, with rows of random values spread over up to 40 binades (a sum
in another order differs in most of their bits) and rows of zeros, signed zeros,
denormals, one repeated value, and ties of the rounding (halves, with a scale of 1).
"""

from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import torch

__all__ = ["CASES", "Result", "differing_case", "same_bits", "weights"]

Result = Tuple[torch.Tensor, torch.Tensor]

# (rows, group, groups per row, dtype, qmin, qmax, iters, early_stop_tol)
CASES: List[Tuple[int, int, int, torch.dtype, int, int, int, float]] = [
    (12, 8, 3, torch.float32, -8, 7, 20, 1e-5),
    (12, 32, 2, torch.float32, -8, 7, 20, 1e-5),
    (12, 32, 2, torch.bfloat16, -8, 7, 3, 1e-5),
    (12, 40, 1, torch.float16, -128, 127, 20, 1e-5),
    (12, 64, 2, torch.float32, -2, 1, 20, 0.5),
    (12, 200, 1, torch.float32, -8, 7, 20, 1e-5),
    (12, 512, 1, torch.float32, -8, 7, 5, 1e-5),
    (12, 1024, 1, torch.float32, -32768, 32767, 5, 1e-5),
]


def weights(rows: int, cols: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random rows over 40 binades, then the special rows (the first six)."""
    generator = torch.Generator().manual_seed(seed)
    span = 6 if dtype == torch.float16 else 20  # finite in the dtype
    w = torch.randn(rows, cols, generator=generator) * torch.exp2(
        torch.randint(-span, span, (rows, cols), generator=generator).float())
    w[0] = 0.0
    w[1] = -0.0
    w[2] = 1.0e-40 * torch.randn(cols, generator=generator)  # denormals
    w[3] = 0.375
    w[4] = torch.arange(cols, dtype=torch.float32).remainder(16) - 7.5  # halves
    w[4, 0] = 8.0  # max |w| = 8: the first scale is 1 (qabs 8), w / 1 ties
    w[5, : cols // 2] = 0.0  # half a row of zeros
    return w.to(dtype)


def same_bits(a: Result, b: Result) -> Optional[str]:
    """The output (``qdata`` or ``scale``) that differs in dtype, shape or any bit, or None."""
    for name, x, y in (("qdata", a[0], b[0]), ("scale", a[1], b[1])):
        if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(
                x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8)):
            return name
    return None


def differing_case(native: Callable[..., Optional[Result]],
                   reference: Callable[..., Result]) -> Optional[str]:
    """The first case where ``native`` and ``reference`` differ in a bit, or None."""
    for seed, (rows, group, groups, dtype, qmin, qmax, iters, tol) in enumerate(CASES):
        w = weights(rows, group * groups, dtype, seed)
        with torch.no_grad():
            ours = native(w, group, qmin, qmax, iters, tol)
            theirs = reference(w, [1, group], qmin, qmax, iters=iters, stochastic=False,
                               early_stop_tol=tol)
        found = "not computed" if ours is None else same_bits(ours, theirs)
        if found is not None:
            return f"group {group}, {dtype}, [{qmin}, {qmax}]: {found}"
    return None
