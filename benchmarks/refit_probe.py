"""Would a refit work? Two checkpoints A and B of one model (seeds 0 and 1), both lowered
by ExecuTorch (``to_edge_transform_and_lower`` with XNNPACK, then ``to_executorch``).
In A's ``.pte``, every byte string that a catalog step
(``fastlower.preprocess.structure.constant_bytes.STEPS``) makes of an input constant of A (tensor
subclasses flattened to their inner tensors) is swapped for the same step of B's
constant, and every sha256 name of such bytes for B's. Prints whether the result is B's
``.pte``.

``python benchmarks/refit_probe.py FAMILY:QMODE ...`` (families and modes of
``tests/structure/models.py``). A probe, not a refit: a byte search over the ``.pte``
proves nothing about what a pass computed from values; it shows which model families a
refit keyed on constant provenance could serve.
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path
from typing import Dict, Tuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastlower.cache.refit.provenance import flat_constants  # noqa: E402
from fastlower.preprocess.structure.constant_bytes import STEPS  # noqa: E402
from tests.edge.models import partitioners  # noqa: E402
from tests.structure.models import aten_program, lower  # noqa: E402


def input_constants(program) -> Dict[str, torch.Tensor]:
    return {name: tensor.detach()
            for name, tensor in flat_constants(program, strict=False).items()}


def swaps(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]
          ) -> Tuple[Dict[bytes, bytes], Dict[bytes, bytes], int]:
    """A's bytes -> B's bytes for every catalog step of every constant, the same for
    their sha256 names, and how many of A's byte strings map to two different B's."""
    data: Dict[bytes, bytes] = {}
    names: Dict[bytes, bytes] = {}
    ambiguous = 0
    for name, tensor in a.items():
        for function in STEPS.values():
            try:
                old, new = function(tensor), function(b[name])
            except Exception:  # the step does not apply to this constant
                continue
            if len(old) < 16 or old == new:
                continue
            ambiguous += int(old in data and data[old] != new)
            data[old] = new
            names[hashlib.sha256(old).hexdigest().encode()] = \
                hashlib.sha256(new).hexdigest().encode()
    return data, names, ambiguous


def probe(family: str, qmode: str) -> str:
    start = time.perf_counter()
    programs = [aten_program(family, qmode, n_layers=3, seed=seed) for seed in (0, 1)]
    same_code = programs[0].graph_module.code == programs[1].graph_module.code
    a_pte, b_pte = (lower(p, partitioners("xnnpack"), fastlower=False)[1].buffer
                    for p in programs)
    data, names, ambiguous = swaps(*(input_constants(p) for p in programs))
    refit, found, renamed = a_pte, 0, 0
    for old, new in sorted(data.items(), key=lambda item: -len(item[0])):
        found += int(old in refit)
        refit = refit.replace(old, new)
    for old, new in names.items():
        renamed += int(old in refit)
        refit = refit.replace(old, new)
    return (f"{family}-{qmode}: same graph code {same_code}, .pte {len(a_pte)} B, "
            f"{len(data)} candidate byte strings, {found} found, {renamed} names swapped, "
            f"{ambiguous} ambiguous, refit equals B's .pte: {refit == b_pte}, "
            f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    for case in sys.argv[1:]:
        print(probe(*case.split(":")), flush=True)
