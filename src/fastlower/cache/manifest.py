"""What an entry records beside its programs: the backends that made its delegates (with
their source digests, checked on every hit, as ccache's manifests) and operators by name.

The backends are known only after lowering, so they cannot be in the key; an
entry whose backend's package changed since it was stored (a new XNNPACK in a
development install, an edited in-house backend) is a miss, and the new result
replaces it under the same key.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional

import torch
from torch.export import ExportedProgram

from ..preprocess.backends import find_backend
from ..errors import BackendNotFoundError
from ..preprocess.keys import source_digest


def _lowered_modules(gm: torch.fx.GraphModule) -> Iterable[Any]:
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    for module in gm.modules():
        if isinstance(module, LoweredBackendModule):
            yield module
            yield from _lowered_modules(module.original_module.graph_module)


def backends_of(programs: Mapping[str, ExportedProgram]) -> List[Dict[str, str]]:
    """Each backend id of the programs' delegates (nested ones too), its class and digest."""
    found: Dict[str, Dict[str, str]] = {}
    for program in programs.values():
        for lowered in _lowered_modules(program.graph_module):
            if lowered.backend_id in found:
                continue
            try:
                cls = find_backend(lowered.backend_id)
            except BackendNotFoundError:
                found[lowered.backend_id] = {"id": lowered.backend_id, "class": "", "source": ""}
                continue
            found[lowered.backend_id] = {"id": lowered.backend_id,
                                         "class": f"{cls.__module__}.{cls.__qualname__}",
                                         "source": source_digest(cls)}
    return [found[k] for k in sorted(found)]


def stale_backend(recorded: List[Dict[str, str]]) -> Optional[str]:
    """Why the entry's backends are not the ones this process would run, or None."""
    for backend in recorded:
        if not backend.get("class"):
            continue
        try:
            cls = find_backend(backend["id"])
        except BackendNotFoundError:
            return f"backend {backend['id']} is not known in this process"
        name = f"{cls.__module__}.{cls.__qualname__}"
        if name != backend["class"]:
            return f"backend {backend['id']} is now {name}, was {backend['class']}"
        if source_digest(cls) != backend["source"]:
            return f"the source of backend {backend['id']} ({name}) changed"
    return None


def op_names(ops: Iterable[Any]) -> List[str]:
    """Operators (ATen overloads) as ``namespace.name.overload``."""
    return [str(op) for op in ops]


def resolve_ops(names: Iterable[str]) -> List[Any]:
    """The operators of :func:`op_names` back."""
    ops = []
    for name in names:
        obj: Any = torch.ops
        for part in name.split("."):
            obj = getattr(obj, part)
        ops.append(obj)
    return ops
