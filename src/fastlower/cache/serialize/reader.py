"""The reading side: an unpickler that rebuilds each persistent id the writer made."""

from __future__ import annotations

import io
import pickle
import weakref
from typing import Any, Dict, List, Optional, Sequence

import torch
from torch.export import ExportedProgram

from ..errors import DamagedEntry
from ..skim import SKIMMED, Skim, Skimmed
from ..symbolic import SymbolicReader
from .graphs import rebuild_graph_module
from .named import edge_verifier, find_op, view_spec


class Reader(pickle.Unpickler):
    """``pickle``'s unpickler with the writer's persistent ids rebuilt; ``storages`` are the
    entry's storages in the writer's order."""

    def __init__(self, file: io.BytesIO, storages: List[torch.UntypedStorage],
                 symbolic: SymbolicReader, blobs: Sequence[bytes] = ()) -> None:
        super().__init__(file)
        self.storages = storages
        self.blobs = blobs
        self.symbolic = symbolic
        self.objects: Dict[int, Any] = {}
        self.skimmed: Dict[int, Skimmed] = {}
        self.skimming = Skim(frozenset())

    def skim(self, skimmed: Dict[int, Skimmed], skim: Skim) -> None:
        """The storages (by index) that were skimmed: their tensors become placeholders,
        listed in ``skim``."""
        self.skimmed, self.skimming = skimmed, skim

    def persistent_load(self, pid: Any) -> Any:  # noqa: C901 - one dispatch table
        kind = pid[0]
        if kind == "ref":
            return self.objects[pid[1]]
        if kind == "t":
            _, number, storage, offset, size, stride, dtype, grad, param, extra = pid
            if storage in self.skimmed:
                return self._keep(number, self._placeholder(pid))
            t = torch.empty(0, dtype=dtype).set_(self.storages[storage], offset, size, stride)
            return self._keep(number, _finish_tensor(t, grad, param, extra))
        if kind == "meta":
            _, number, size, stride, offset, dtype, grad, param, extra = pid
            t = torch.empty_strided(size, stride, dtype=dtype, device="meta")
            if offset:
                t = t.as_strided(size, stride, offset)
            return self._keep(number, _finish_tensor(t, grad, param, extra))
        if kind == "fake":
            return self._keep(pid[1], self.symbolic.fake(pid[2]))
        if kind == "subclass":
            return self._keep(pid[1], pid[2])
        if kind == "sym":
            return self.symbolic.sym(pid[1])
        if kind == "blob":
            return self.blobs[pid[1]]
        if kind in ("storage", "typed_storage") and pid[1] in self.skimmed:
            self.skimming.other_use = True
        if kind == "storage":
            return self.storages[pid[1]]
        if kind == "typed_storage":
            return torch.TypedStorage(wrap_storage=self.storages[pid[1]], dtype=pid[2],
                                      _internal=True)
        if kind == "op":
            return find_op(pid[1], pid[2])
        if kind == "gm":
            return self._keep(pid[1], rebuild_graph_module(pid[2]))
        if kind == "ep":
            program = ExportedProgram.__new__(ExportedProgram)
            program.__dict__.update(pid[2])
            return self._keep(pid[1], program)
        if kind == "view_spec":
            return self._keep(pid[1], view_spec(pid[2], pid[3], pid[4]))
        if kind == "env":
            return self.symbolic.env
        if kind == "mode":
            return self.symbolic.mode
        if kind == "edge_verifier":
            return edge_verifier(*pid[1])
        raise DamagedEntry(f"unknown persistent id {kind!r}")

    def _placeholder(self, pid: Any) -> torch.Tensor:
        """A meta tensor in place of one over a skimmed storage, carrying its ``Skimmed``."""
        _, _, storage, offset, size, stride, dtype, grad, param, extra = pid
        t = torch.empty(0, dtype=dtype, device="meta").set_(
            self.storages[storage], offset, size, stride)
        t = _finish_tensor(t, grad, param, extra)
        setattr(t, SKIMMED, self.skimmed[storage])
        self.skimming.placeholders.append(weakref.ref(t))
        return t

    def _keep(self, number: int, obj: Any) -> Any:
        self.objects[number] = obj
        return obj


def _finish_tensor(t: torch.Tensor, grad: bool, param: bool,
                   extra: Optional[Dict[str, Any]]) -> torch.Tensor:
    if param:
        t = torch.nn.Parameter(t, requires_grad=grad)
    elif grad:
        t.requires_grad_(True)
    if extra:
        t.__dict__.update(extra)
    return t
