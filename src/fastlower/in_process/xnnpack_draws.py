"""The random draws ExecuTorch's XNNPACK ``preprocess`` makes once per process, made by
fastlower where that code did not run here.

The first XNNPACK ``preprocess`` of a process builds the patterns of two of its passes
(``bilinear_2d``, ``sdpa``: ``lru_cache``d), and building them draws sample inputs from
torch's global generator: ``randn(1, 3, 4, 4)``, then ``randn(8, 16, 32, 64)`` three
times. A caller that seeds, lowers and then draws (test inputs, calibration data) gets
numbers that depend on it. fastlower often does not run that code in this process: a
lowering-cache hit or refit, a preprocess-cache hit, a worker process, a derived
partition, or a graph whose patterns cannot match
(:mod:`.xnnpack_patterns`). So after a lowering with an XNNPACK
partition, :func:`as_reference` makes the same draws, once per process, unless
ExecuTorch's patterns are already built here (its own code drew then). The draws leave
the generator in ExecuTorch's state (``tests/test_xnnpack_draws.py``
compares it). A pattern build fastlower itself runs after that is done with the
generator's state kept (:func:`kept`). ExecuTorch's own ``preprocess`` called directly
later in the same process would draw a second time.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import torch

XNNPACK = "XnnpackBackend"
_LOCK = threading.Lock()
_drawn = False  # this process has made the draws (as_reference)


def _built() -> bool:
    """ExecuTorch's patterns are built in this process (its code drew when it built them)."""
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa

    return (bilinear_2d._get_bilinear_2d_graphs.cache_info().currsize > 0
            or sdpa.get_graphs.cache_info().currsize > 0)


def as_reference() -> None:
    """The draws of the first XNNPACK ``preprocess`` of the process, if nobody made them."""
    global _drawn
    with _LOCK:
        if _drawn or _built():
            _drawn = True
            return
        torch.randn(1, 3, 4, 4)  # bilinear_2d's sample input
        for _ in range(3):  # sdpa's q, k, v
            torch.randn(8, 16, 32, 64)
        _drawn = True


@contextmanager
def kept() -> Iterator[None]:
    """A block that may build ExecuTorch's patterns: once the draws were made, the
    generator's state is kept across it (the build would draw them again)."""
    with _LOCK:
        keep = _drawn and not _built()
    if not keep:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        yield
