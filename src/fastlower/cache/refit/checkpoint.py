"""A new checkpoint of a lowered structure: the cached lowering refit with the new weights.

Each stored ``to_edge_transform_and_lower`` entry (checkpoint A) leaves a small record
under its **structure key** (:func:`~.key.lowering_key`'s second hash: the call's key
with the values of the programs' parameters, buffers and constants left out): A's
full key and the content digest of each of A's input constants. A later call whose full
key misses but whose structure key finds a record (checkpoint B: same model, same
partitioners and options, other weights) reads A's entry and re-makes it for B
(:mod:`fastlower.cache.refit`): no edge stage, partitioner or ``preprocess`` runs; only what
depends on values is redone (each tensor swapped for B's through its provenance, each
changed delegate's payload and named data re-made by a template that first re-made A's
own, byte for byte). Anything that cannot be shown to follow B's weights refuses the
refit (the report says why) and the call lowers for real.

Verify mode (``FASTLOWER_CACHE_VERIFY=1``) lowers B for real too and raises
:class:`~.errors.LoweringCacheVerificationError` on the first difference. The refit
result is stored under B's full key, so B's next export is a plain hit.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

import torch
from torch.export import ExportedProgram

from .programs import RefitSummary, lowered_modules, refit_programs
from .provenance import NotRefittable, Sources, flat_constants, literals, same_pattern
from .. import access
from ..key import LoweringKey, method_programs
from ..skim import Skim
from ..store import LoweringStore

log = logging.getLogger("fastlower.cache")

# storages smaller than this are read whole even when a refit replaces them
SKIM_MIN_BYTES = 1 << 20


@dataclass
class Refit:
    """A refit lowering (``programs``) or why there is none (``refused``)."""

    source: str = ""  # A's full key
    info: Dict[str, Any] = field(default_factory=dict)  # A's entry info
    programs: Optional[Dict[str, ExportedProgram]] = None
    summary: Optional[RefitSummary] = None
    refused: str = ""
    seconds: float = 0.0

    def as_report(self) -> Dict[str, Any]:
        """The report's ``refit`` field."""
        if self.programs is None or self.summary is None:
            return {"source": self.source, "refused": self.refused}
        s = self.summary
        return {"source": self.source, "tensors": s.tensors, "changed": s.changed,
                "delegates": s.delegates, "remade": s.remade, "templates": len(s.templates),
                "reused": ["edge stage", "partitioners", "preprocess"]}


def record(key: LoweringKey, backends: List[Any],
           sizes: Sequence[int] = ()) -> Optional[Dict[str, Any]]:
    """The structure record of an entry stored under ``key`` (its ``info``), or None."""
    if not key.structure or key.digests is None:
        return None
    return {"backends": backends, "refit_source": key.key, "digests": key.digests,
            "skimmable": sorted(sizes)}


def skimmable(programs: Dict[str, ExportedProgram]) -> List[int]:
    """The byte sizes of the large storages the programs' own tables hold (a refit replaces
    them all, :func:`.programs.refit_programs`) that no delegate's tables hold (a
    delegate's stored constants are read, to re-make its payload): a refit may skim
    storages of these sizes (:mod:`..skim`)."""
    outside: Set[int] = set()
    inside: Set[int] = set()
    for program in programs.values():
        _sizes(program, outside)
        for _, module in lowered_modules(program):
            _sizes(module.original_module, inside)
    return sorted(size for size in outside - inside if size >= SKIM_MIN_BYTES)


def _sizes(program: ExportedProgram, out: Set[int]) -> None:
    for tensor in flat_constants(program, strict=False).values():
        if tensor.device.type == "cpu" and tensor.layout == torch.strided:
            out.add(tensor.untyped_storage().nbytes())


def store_record(store: LoweringStore, key: LoweringKey, backends: List[Any],
                 refused: str = "", skim: Sequence[int] = ()) -> None:
    """The record of the entry just stored under ``key`` (it replaces the structure's last
    one; ``skim``: :func:`skimmable`), or, with ``refused``, the record that this
    structure cannot be refit. A refused record stays: what refused it lies in the
    structure, not in the weights."""
    info = record(key, backends, skim)
    if info is None:
        return
    if refused:
        info["refused"] = refused
    else:
        found = access.lookup_local(store, key.structure or "")
        if found is not None and found[0].get("refused"):
            return
    access.store_checked(store, key.structure or "", info, {"programs": {}},
                         lambda copy: None)


def try_refit(store: LoweringStore, key: LoweringKey, programs: Any,
              reads_values: Callable[[], str] = lambda: "") -> Optional[Refit]:
    """B's lowering made from the entry its structure record names; None when there is no
    record (or no entry behind it), a :class:`Refit` with ``refused`` when it cannot be
    (``reads_values``, asked once a record is found: why the call's own arguments may
    read values outside delegates, :func:`.value_reads.refused`)."""
    if not key.structure or key.digests is None:
        return None
    found = access.lookup(store, key.structure)
    if found is None:
        return None
    start = time.perf_counter()
    info = found[0]
    refit = Refit(source=str(info.get("refit_source", "")))
    if info.get("refused"):  # an earlier checkpoint showed this structure cannot be refit
        refit.refused = str(info["refused"])
        return refit
    reads = reads_values()
    if reads:
        refit.refused = reads
        return refit
    if not refit.source.startswith("lowering:"):
        return None
    sizes = info.get("skimmable")
    done = _skimmed_refit(store, refit, info, key, programs, sizes) if sizes else False
    if not done:
        entry = access.lookup(store, refit.source)
        if entry is None:
            return None
        refit.info = entry[0]
        try:
            refit.programs = entry[1]["programs"]
            refit.summary = _refit(refit.programs, info.get("digests"), key.digests,
                                   method_programs(programs))
        except NotRefittable as why:
            refit.programs, refit.summary, refit.refused = None, None, str(why)
            log.debug("structure %s found, not refit: %s", key.structure, why)
            if why.structural and not store.read_only:
                store_record(store, key, list(found[0].get("backends", [])), refused=str(why))
    refit.seconds = time.perf_counter() - start
    return refit


def _skimmed_refit(store: LoweringStore, refit: Refit, info: Dict[str, Any], key: LoweringKey,
                   programs: Any, sizes: Any) -> bool:
    """The refit from A's entry read with its large storages outside delegates skimmed
    (:mod:`..skim`: A's embedding is not held beside B's), into ``refit``; False when
    that does not give one (the caller then reads the entry whole and refits as before)."""
    if key.digests is None or not isinstance(sizes, list) or not all(
            isinstance(s, int) for s in sizes):
        return False
    skim = Skim(frozenset(sizes))
    entry = access.lookup(store, refit.source, skim)
    if entry is None:
        return False
    try:
        stored = entry[1]["programs"]
        summary = _refit(stored, info.get("digests"), key.digests, method_programs(programs))
    except Exception as why:  # a skimmed value needed, or a refusal: the whole entry decides
        log.debug("refit of %s from the skimmed entry: %r", key.structure, why)
        return False
    refit_info = entry[0]
    del entry
    if not skim.all_gone():  # a placeholder is still held: never hand it on
        log.debug("refit of %s: a skimmed tensor is still referenced", key.structure)
        return False
    refit.info, refit.programs, refit.summary = refit_info, stored, summary
    return True


def _refit(stored: Dict[str, ExportedProgram], a_digests: Any, b_digests: Dict[str, Dict[str, str]],
           inputs: Dict[str, ExportedProgram]) -> RefitSummary:
    if not isinstance(a_digests, dict) or list(a_digests) != list(b_digests):
        raise NotRefittable("the record names other methods")
    a_flat = {f"{m}/{n}": d for m, names in a_digests.items() for n, d in names.items()}
    b_flat = {f"{m}/{n}": d for m, names in b_digests.items() for n, d in names.items()}
    why = same_pattern(a_flat, b_flat)
    if why is not None:
        raise NotRefittable(why)
    b_tensors: Dict[str, Any] = {}
    a_by_digest: Dict[str, List[str]] = {}
    for method, program in inputs.items():
        tensors = flat_constants(program)
        if set(tensors) != set(b_digests[method]):
            raise NotRefittable(f"method {method!r} has a constant the key did not hash")
        for name, tensor in tensors.items():
            b_tensors[f"{method}/{name}"] = tensor
    for name, value in a_flat.items():
        a_by_digest.setdefault(value, []).append(name)
    changed = {name for name in a_flat if a_flat[name] != b_flat[name]}
    sources = Sources(a_by_digest, b_tensors, changed, literals(inputs.values()))
    summary = refit_programs(stored, sources)
    for method, program in stored.items():  # the key holds their layout, not their values
        if program.example_inputs is not None:  # the reference's partitioned programs: None
            program.example_inputs = inputs[method].example_inputs
    return summary
