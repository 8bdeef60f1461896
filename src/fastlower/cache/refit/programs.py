"""A stored lowering of checkpoint A re-made, in place, for checkpoint B's weights.

Every tensor the programs hold (each method's parameters, buffers and constants, and
those of each delegate's partition) is replaced by B's value through its provenance
(:mod:`.provenance`). A delegate none of whose constants changed is kept as it is. One
whose constants changed is re-made by a structural template (:mod:`fastlower.preprocess.structure.
template`): learnt from a stored delegate of the same partition structure, it must first
re-make that delegate's own stored payload and named data, byte for byte, from A's
constants (the proof that it models this delegate), and then makes B's. A backend no
template models, a payload the template does not re-make, a constant without provenance:
:class:`~.provenance.NotRefittable`, and the caller lowers for real.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Tuple

import torch
from executorch.exir.backend.backend_details import PreprocessResult
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch.export import ExportedProgram

from ...preprocess.backends import find_backend
from ...preprocess.jobs import PreprocessJob
from ...preprocess.structure import constant_bytes
from ...preprocess.structure.classes import DERIVERS
from ...preprocess.structure.shape_key import PartitionShape, constants_of, partition_shape
from ...preprocess.structure.template import NotDerivable, Template, derive, learn
from ..skim import skimmed
from .provenance import NotRefittable, Skimmed, Sources, flat_constants


@dataclass
class RefitSummary:
    """What a refit did, for the report."""

    tensors: int = 0  # tensors the lowering holds
    changed: int = 0  # of them, with a new value
    delegates: int = 0
    remade: int = 0  # delegates whose payload and named data were re-made
    templates: Dict[str, Template] = field(default_factory=dict)  # by partition structure


def refit_programs(programs: Dict[str, ExportedProgram], sources: Sources) -> RefitSummary:
    """Rewrites ``programs`` (A's, freshly read from the cache) for B's weights."""
    summary = RefitSummary()
    for method, program in programs.items():
        _swap_constants(f"method {method!r}", program, sources, summary)
        for path, module in lowered_modules(program):
            _refit_delegate(f"method {method!r}, {path}", module, sources, summary)
    return summary


def lowered_modules(program: ExportedProgram) -> Iterator[Tuple[str, LoweredBackendModule]]:
    for path, module in program.graph_module.named_modules():
        if isinstance(module, LoweredBackendModule):
            yield path, module


# one table entry of B's: (the program's state_dict or constants, name, B's tensor)
Swap = Tuple[Dict[str, Any], str, torch.Tensor]


def _swap_constants(where: str, program: ExportedProgram, sources: Sources,
                    summary: RefitSummary) -> None:
    """B's values into the program's tables."""
    _apply(_new_values(where, program, sources, summary)[0])


def _new_values(where: str, program: ExportedProgram, sources: Sources,
                summary: RefitSummary) -> Tuple[List[Swap], bool]:
    """B's value of each entry of the program's tables (left as they are), counted in
    ``summary``, and whether any differs from A's."""
    swaps: List[Swap] = []
    changed = False
    for table in (program.state_dict, program.constants):
        for name, value in table.items():
            if type(value) not in (torch.Tensor, torch.nn.Parameter):
                raise NotRefittable(f"{where}: constant {name!r} is a {type(value).__name__}",
                                    structural=True)
            new, differs = sources.new_value(f"{where}: constant {name!r}", value)
            swaps.append((table, name, new))
            summary.tensors += 1
            summary.changed += differs
            changed |= differs
    return swaps, changed


def _apply(swaps: List[Swap]) -> None:
    for table, name, new in swaps:
        table[name] = new


def _refit_delegate(where: str, module: LoweredBackendModule, sources: Sources,
                    summary: RefitSummary) -> None:
    original = module.original_module
    if any(True for _ in lowered_modules(original)):
        raise NotRefittable(f"{where}: a delegate inside a delegate", structural=True)
    summary.delegates += 1
    swaps, changed = _new_values(where, original, sources, summary)
    if not changed:  # none of its constants changed: kept as it is
        _apply(swaps)
        return
    if module.backend_id not in DERIVERS:
        raise NotRefittable(f"{where}: backend {module.backend_id} inlines constants in a way "
                            "no template models, and its constants changed")
    if any(skimmed(t) is not None for t in flat_constants(original, strict=False).values()):
        raise Skimmed(f"{where}: a constant it reads was skimmed")
    before = _shape(module)  # A's constants, still in its tables
    _apply(swaps)
    stored = PreprocessResult(processed_bytes=module.processed_bytes,
                              debug_handle_map=module.meta.get("debug_handle_map"),
                              data_store_output=module._named_data_store_output)
    template = _template_for(where, before, stored, summary.templates)
    after = PartitionShape(before.key, constants_of(original), before.handles)
    try:
        made = derive(template, after)
    except NotDerivable as why:
        raise NotRefittable(f"{where}: {why}") from why
    module._processed_bytes = made.processed_bytes
    module._named_data_store_output = made.data_store_output
    summary.remade += 1


def _shape(module: LoweredBackendModule) -> PartitionShape:
    job = PreprocessJob(index=0, backend_id=module.backend_id,
                        backend=find_backend(module.backend_id), program=module.original_module,
                        compile_specs=list(module.compile_specs), tag="", method="",
                        backend_copy_hook=False)
    return partition_shape(job)


def _template_for(where: str, shape: PartitionShape, stored: PreprocessResult,
                  templates: Dict[str, Template]) -> Template:
    """A template that re-makes ``stored`` from ``shape``'s constants (A's), byte for byte."""
    known = templates.get(shape.key)
    if known is not None and _remakes(known, shape, stored):
        return known
    try:
        template = learn(shape, stored)
    except NotDerivable as why:
        raise NotRefittable(f"{where}: {why}",
                            structural=constant_bytes.AMBIGUOUS not in str(why)) from why
    if not _remakes(template, shape, stored):
        raise NotRefittable(f"{where}: its stored payload is not re-made from its constants",
                            structural=True)
    templates[shape.key] = template
    return template


def _remakes(template: Template, shape: PartitionShape, stored: PreprocessResult) -> bool:
    try:
        made = derive(template, shape)
    except NotDerivable:
        return False
    return (bytes(made.processed_bytes) == bytes(stored.processed_bytes)
            and _named_data(made) == _named_data(stored))


def _named_data(result: PreprocessResult) -> Tuple[List[bytes], Dict[str, object], object]:
    output = result.data_store_output
    if output is None:
        return [], {}, None
    return ([bytes(buffer) for buffer in output.buffers], dict(output.pte_data),
            output.external_data)
