"""Pure-Python twin of the core's HQQ kernels (``csrc/hqq.cpp``), the tests' oracle.

The same functions as ``fastlower._core.hqq_*``, over numpy float32 arrays, one float32
operation at a time: :func:`ordered_sum` is torch's CPU sum over a contiguous inner
dimension written out (``SumKernel.cpp``: 8-lane vectors, rows of 4 vectors, a cascade of
4 levels of 16 rows, the rows and vectors left, the accumulators, then the lanes from
0.0). ``order="sequential"`` adds left to right instead, for tests that need a wrong order.
"""

from __future__ import annotations

from typing import Any, List

import numpy as np

__all__ = ["hqq_init_scale", "hqq_ordered_sum", "hqq_quantize", "hqq_step"]

_LANES, _ILP, _LEVELS, _LEVEL_POWER = 8, 4, 4, 4
F32 = np.float32


def hqq_ordered_sum(x: Any, order: str = "torch") -> float:
    x = np.asarray(x, dtype=F32)
    if order == "sequential":
        total = F32(0.0)
        for value in x:
            total = F32(total + value)
        return float(total)
    vecs = [x[j * _LANES:(j + 1) * _LANES] for j in range(len(x) // _LANES)]
    lanes = _vector_sum(vecs)
    total = F32(0.0)
    for value in x[len(vecs) * _LANES:]:  # the scalar tail (none for whole vectors)
        total = F32(total + value)
    for value in lanes:
        total = F32(total + value)
    return float(total)


def _vector_sum(vecs: List[np.ndarray]) -> np.ndarray:
    step, mask = 1 << _LEVEL_POWER, (1 << _LEVEL_POWER) - 1
    rows = len(vecs) // _ILP
    zero = np.zeros(_LANES, dtype=F32)
    acc = [[zero.copy() for _ in range(_ILP)] for _ in range(_LEVELS)]
    i = 0
    while i + step <= rows:
        for _ in range(step):
            for k in range(_ILP):
                acc[0][k] = acc[0][k] + vecs[i * _ILP + k]
            i += 1
        for j in range(1, _LEVELS):
            for k in range(_ILP):
                acc[j][k] = acc[j][k] + acc[j - 1][k]
                acc[j - 1][k] = zero.copy()
            if i & (mask << (j * _LEVEL_POWER)):
                break
    for row in range(i, rows):
        for k in range(_ILP):
            acc[0][k] = acc[0][k] + vecs[row * _ILP + k]
    for j in range(1, _LEVELS):
        for k in range(_ILP):
            acc[0][k] = acc[0][k] + acc[j][k]
    for t in range(rows * _ILP, len(vecs)):
        acc[0][0] = acc[0][0] + vecs[t]
    for k in range(1, _ILP):
        acc[0][0] = acc[0][0] + acc[0][k]
    return acc[0][0]


def _groups(w: np.ndarray, group: int) -> np.ndarray:
    rows, cols = w.shape
    return w.reshape(rows, cols // group, group)


def hqq_init_scale(w: Any, group: int, qabs: float, eps: float, scale: Any, threads: int) -> bool:
    scale[...] = np.maximum(np.abs(_groups(w, group)).max(axis=2) / F32(qabs), F32(eps))
    return bool(np.isfinite(w).all())


def _quantized(x: np.ndarray, s: Any, qmin: float, qmax: float) -> np.ndarray:
    return np.minimum(F32(qmax), np.maximum(F32(qmin), np.rint(x / F32(s))))  # rint: ties to even


def hqq_step(w: Any, group: int, qmin: float, qmax: float, eps: float, scale: Any,
             threads: int, order: str = "torch") -> float:
    eps32, rel = F32(eps), F32(-1.0)
    grouped = _groups(w, group)
    for r in range(grouped.shape[0]):
        for g in range(grouped.shape[1]):
            x, s = grouped[r, g], F32(scale[r, g])
            q = _quantized(x, s, qmin, qmax)
            num = F32(hqq_ordered_sum(x * q, order))
            den = F32(hqq_ordered_sum(q * q, order))
            new = F32(num / den) if den > 0 else s
            new = abs(new if not new < eps32 else eps32)
            scale[r, g] = new
            change = F32(abs(F32(new - s)) / (s if not s < eps32 else eps32))
            if not np.isnan(rel) and (np.isnan(change) or change > rel):  # NaN wins, as torch's max
                rel = change
    return float(rel)


def hqq_quantize(w: Any, group: int, qmin: float, qmax: float, scale: Any, q: Any,
                 threads: int) -> None:
    grouped = _groups(w, group)
    out = _groups(q, group)
    for r in range(grouped.shape[0]):
        for g in range(grouped.shape[1]):
            out[r, g] = _quantized(grouped[r, g], scale[r, g], qmin, qmax).astype(np.int32)
