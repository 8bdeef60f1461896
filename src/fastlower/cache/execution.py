"""The execution programs of a ``to_executorch`` served from the cache, made when first read.

A served ``ExecutorchProgramManager`` has its ``.pte`` bytes, ``.ptd`` data and emitter
output from the entry. Its execution programs (``exported_program()``, the programs
after ExecuTorch's memory planning and emission passes) are not stored: serializing,
checking and reading them back cost ~a third of ``to_executorch`` on a miss and most of
a hit, for an object export scripts rarely read (``export_llm`` never does). They are
made again on first access instead: ExecuTorch's own ``to_executorch`` runs on a copy
of the ``EdgeProgramManager`` (the caller's manager is not rewritten), and its
``.pte`` must be the served one's, byte for byte.

The programs are made from the manager as it was when ``to_executorch`` was served: a
manager whose programs were changed in place since then (its key differs) raises
:class:`~.errors.ExecutionProgramsUnavailable` rather than programs of another lowering.
"""

from __future__ import annotations

import copy
import threading
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence

from executorch.exir.capture._config import ExecutorchBackendConfig
from executorch.exir.program._program import EdgeProgramManager
from torch.export import ExportedProgram

from .errors import ExecutionProgramsUnavailable


class LazyExecutionPrograms(Mapping[str, ExportedProgram]):
    """``{method: execution program}``: method names at once, programs on first read."""

    def __init__(self, edge: EdgeProgramManager, config: Optional[ExecutorchBackendConfig],
                 key: str, pte: Sequence[bytes],
                 key_of: Callable[[EdgeProgramManager, Any], str],
                 reference: Callable[..., Any]) -> None:
        self._names: List[str] = list(edge._edge_programs)
        self._edge = edge
        self._config = config
        self._key = key
        self._pte = pte
        self._key_of = key_of
        self._reference = reference
        self._programs: Optional[Dict[str, ExportedProgram]] = None
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> ExportedProgram:
        if name not in self._names:
            raise KeyError(name)
        return self.made()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        state = "made" if self._programs is not None else "not made yet"
        return f"LazyExecutionPrograms({self._names}, {state})"

    def made(self) -> Dict[str, ExportedProgram]:
        """The programs (made on the first call, in whichever thread asks first)."""
        with self._lock:
            if self._programs is None:
                self._programs = self._make()
                # what they were made from is no longer needed
                self._edge = self._config = None
            return self._programs

    def _make(self) -> Dict[str, ExportedProgram]:
        edge, config = self._edge, self._config
        if self._key_of(edge, config) != self._key:
            raise ExecutionProgramsUnavailable(
                "the EdgeProgramManager was changed since its to_executorch() was served from "
                "the lowering cache; call to_executorch() again for its execution programs")
        edge_copy, config_copy = copy.deepcopy((edge, config))
        result = self._reference(edge_copy, config_copy)
        if bytes(result._pte_data) != b"".join(self._pte):
            raise ExecutionProgramsUnavailable(
                "to_executorch() made again gives another .pte than the one served from the "
                f"lowering cache (key {self._key}): a pass or backend is not deterministic; "
                "clear the cache (fastlower cache clear --only lowering)")
        return dict(result._execution_programs)
