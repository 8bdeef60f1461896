"""Lower one checkpoint through the lowering cache in a process of its own (a subprocess
of the refit tests): ``python -m tests.structure.refit_checkpoint OUT.json FAMILY QMODE
SEED [--one-weight] [--embedding=zeros|seed0] [--skim-min=BYTES]``.

The model is ``tests.structure.models.aten_program(FAMILY, QMODE, n_layers=2,
seed=SEED)``; ``--one-weight`` moves one element of one delegated weight (the first
floating-point constant of the first attention projection) after export;
``--embedding``: the decoder's token embedding set to zeros, or to seed 0's, after export.
The call is
``fastlower.cache.to_edge_transform_and_lower`` with XNNPACK's partitioners, then
``to_executorch``; the cache folder is ``FASTLOWER_CACHE_DIR``. ``OUT.json``: the
report's ``lowering_cache`` and ``refit``, the seconds of the lowering window, and the
``.pte`` (written to ``OUT.json.pte``). ``--skim-min=BYTES``: a refit may skim stored
storages from this size on (``fastlower.cache.refit.checkpoint.SKIM_MIN_BYTES``, 1 MiB,
more than these models' largest); the JSON's ``storages`` then lists the byte sizes of
the storages this process read from entries, ``kept`` and ``skimmed``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import torch

from tests.edge.models import partitioners
from tests.structure.models import aten_program

PROJECTIONS = ("attention.wq", "self_attn.q_proj", "conv1")


def embedding_of(family: str, seed: int) -> torch.Tensor:
    """The token embedding ``aten_program(family, ..., n_layers=2, seed=seed)`` holds: the
    model built after the same seed (quantization leaves embeddings, export leaves values)."""
    from fastlower.frontends.examples.user_models import MODELS

    torch.manual_seed(seed)
    model, _ = MODELS[family](2)
    return model.tok_embeddings.weight.detach()


def program_of(family: str, qmode: str, seed: int, one_weight: bool,
               embedding: Optional[str] = None):
    program = aten_program(family, qmode, n_layers=2, seed=seed)
    if embedding is not None:  # the decoders' token embedding, set after export
        table = program.state_dict["tok_embeddings.weight"]
        value = torch.zeros_like(table) if embedding == "zeros" else embedding_of(family, 0)
        with torch.no_grad():
            table.copy_(value)
    if one_weight:
        from fastlower.cache.refit.provenance import flat_constants

        name, tensor = next((n, t) for n, t in flat_constants(program).items()
                            if any(p in n for p in PROJECTIONS) and t.is_floating_point())
        with torch.no_grad():
            tensor.view(-1)[0] *= 2
    return program


def main() -> None:
    out, family, qmode, seed = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    from fastlower import report_for
    from fastlower.cache import to_edge_transform_and_lower
    from fastlower.report.text import summary

    embedding = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--embedding=")),
                     None)
    program = program_of(family, qmode, seed, "--one-weight" in sys.argv, embedding)
    storages = _watch_storages(next((int(a.split("=", 1)[1]) for a in sys.argv
                                     if a.startswith("--skim-min=")), None))
    start = time.perf_counter()
    manager = to_edge_transform_and_lower(program, partitioner=partitioners("xnnpack"))
    executorch = manager.to_executorch()
    seconds = time.perf_counter() - start
    report = report_for(manager)
    out.with_name(out.name + ".pte").write_bytes(executorch.buffer)
    out.write_text(json.dumps({"lowering_cache": report.lowering_cache, "refit": report.refit,
                               "seconds": seconds, "text": report.format(),
                               "summary": summary(report), "storages": storages}))


def _watch_storages(skim_min):
    """With ``skim_min``: that threshold set, and the sizes of the storages read from
    entries, kept whole or skimmed, recorded in the dict returned."""
    if skim_min is None:
        return None
    from fastlower.cache import entry
    from fastlower.cache.refit import checkpoint

    checkpoint.SKIM_MIN_BYTES = skim_min
    seen: dict = {"kept": [], "skimmed": []}
    for method, kind in (("storage", "kept"), ("skim", "skimmed")):
        read = getattr(entry._Sealed, method, None)
        if read is not None:
            def watched(self, size, what, read=read, kind=kind):
                seen[kind].append(size)
                return read(self, size, what)
            setattr(entry._Sealed, method, watched)
    return seen


if __name__ == "__main__":
    main()
