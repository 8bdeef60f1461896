"""Small programs, a partitioner and test backends for the preprocess tests.

The backends are final ``BackendDetails`` subclasses defined at module level, so
forked workers inherit them and executors' workers can import them
(``tests.preprocess.helpers``). What each does is driven by compile specs, so
one program can hold a partition that fails, kills its worker or interrupts
the caller next to ordinary ones.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import os
import signal
import time
from typing import Callable, Dict, List, Optional, final

import psutil
import torch
from executorch.exir import EdgeCompileConfig, to_edge
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.utils import tag_constant_data
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.lowered_backend_module import get_lowered_submodules
from torch.export import ExportedProgram

PAD = 64 * 1024  # above diskcache's 32 KiB threshold: the entry is stored in a file


def echo_bytes(program: ExportedProgram, compile_specs: List[CompileSpec]) -> bytes:
    """Deterministic bytes from everything a real backend would read."""
    h = hashlib.blake2b()
    h.update(program.graph_module.code.encode())
    h.update(str(program.graph_signature).encode())
    for spec in compile_specs:
        h.update(spec.key.encode() + bytes(spec.value))
    for name, tensor in list(program.state_dict.items()) + list(program.constants.items()):
        h.update(name.encode() + tensor.detach().contiguous().numpy().tobytes())
    for node in program.graph.nodes:
        h.update(repr(node.meta.get("debug_handle")).encode())
    return h.digest()


def _spec(compile_specs: List[CompileSpec], key: str) -> Optional[bytes]:
    for spec in compile_specs:
        if spec.key == key:
            return bytes(spec.value)
    return None


def _debug_handles(program: ExportedProgram) -> Dict[int, tuple]:
    return {i: (n.meta["debug_handle"],) for i, n in enumerate(program.graph.nodes)
            if n.op == "call_function" and "debug_handle" in n.meta}


@final
class PreprocessTestEchoBackend(BackendDetails):
    """Echoes a digest of its input. Compile specs steer it (values are bytes):

    * ``sleep=<seconds>``: sleep first (to order what several workers do);
    * ``fail``: raise ``ValueError``;
    * ``kill=<pid>``: SIGKILL its own process, unless that is ``pid`` (the test);
    * ``interrupt=<pid>``: send SIGINT to ``pid`` and sleep, in a worker only;
    * ``pad``: pad the bytes to :data:`PAD`;
    * ``random``: append random bytes (a non-deterministic backend).
    """

    @staticmethod
    def preprocess(edge_program: ExportedProgram,
                   compile_specs: List[CompileSpec]) -> PreprocessResult:
        pause = _spec(compile_specs, "sleep")
        if pause is not None:
            time.sleep(float(pause))
        if _spec(compile_specs, "fail") is not None:
            raise ValueError("echo backend asked to fail")
        caller = _spec(compile_specs, "kill")
        if caller is not None:
            if os.getpid() == int(caller):
                raise RuntimeError("kill requested in the test process itself (not in a worker)")
            os.kill(os.getpid(), signal.SIGKILL)
        caller = _spec(compile_specs, "interrupt")
        if caller is not None:
            if os.getpid() == int(caller):
                raise RuntimeError("interrupt requested in the test process itself")
            os.kill(int(caller), signal.SIGINT)
            time.sleep(60)
        data = echo_bytes(edge_program, compile_specs)
        if _spec(compile_specs, "pad") is not None:
            data = data.ljust(PAD, b"p")
        if _spec(compile_specs, "random") is not None:
            data += os.urandom(8)
        return PreprocessResult(processed_bytes=data, debug_handle_map=_debug_handles(edge_program))


@final
class PreprocessTestMultimethodBackend(BackendDetails):
    """Overrides ``preprocess_multimethod``; records where and how often it ran."""

    calls: List[int] = []  # pid of each preprocess_multimethod call (in the caller)

    @staticmethod
    def preprocess(edge_program: ExportedProgram,
                   compile_specs: List[CompileSpec]) -> PreprocessResult:
        return PreprocessResult(processed_bytes=echo_bytes(edge_program, compile_specs)
                                + str(os.getpid()).encode())

    @classmethod
    def preprocess_multimethod(cls, edge_programs, compile_specs):
        cls.calls.append(os.getpid())
        return {m: [cls.preprocess(p, s) for p, s in zip(programs, compile_specs[m])]
                for m, programs in edge_programs.items()}


class Blocks(torch.nn.Module):
    """``n`` blocks of Linear, ReLU and +1: one partition per Linear."""

    def __init__(self, n: int = 4, dim: int = 8):
        super().__init__()
        torch.manual_seed(0)
        self.lins = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(n))

    def forward(self, x):
        for lin in self.lins:
            x = torch.relu(lin(x)) + 1.0
        return x


def edge_blocks(n: int = 4, fresh: bool = False) -> ExportedProgram:
    """An Edge program of :class:`Blocks` (linear decomposed: permute + addmm), the caller's
    own: a deep copy of one export per ``n``, or with ``fresh`` a new export."""
    if fresh:
        return _export_blocks(n)
    return copy.deepcopy(_pristine_blocks(n))


@functools.lru_cache(maxsize=None)
def _pristine_blocks(n: int) -> ExportedProgram:
    return _export_blocks(n)


def _export_blocks(n: int) -> ExportedProgram:
    model = Blocks(n)
    aten = torch.export.export(model, (torch.randn(2, 8),))
    config = EdgeCompileConfig(_check_ir_validity=False)
    return to_edge(aten, compile_config=config).exported_program()


SpecsFor = Callable[[int], List[CompileSpec]]


class LinearPartitioner(Partitioner):
    """Each ``addmm`` with its ``permute`` (and their weights) is one partition, ``tag<k>``;
    ``specs_for(k)`` gives its compile specs."""

    def __init__(self, backend: type = PreprocessTestEchoBackend,
                 specs_for: Optional[SpecsFor] = None):
        super().__init__()
        self.backend = backend
        self.specs_for = specs_for or (lambda k: [])

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        tags = {}
        for node in exported_program.graph.nodes:
            if node.op == "call_function" and node.target == exir_ops.edge.aten.addmm.default:
                k = len(tags)
                tag = f"tag{k}"
                node.meta["delegation_tag"] = tag
                for arg in node.args:
                    if isinstance(arg, torch.fx.Node) and arg.op == "call_function":
                        arg.meta["delegation_tag"] = tag
                tags[tag] = DelegationSpec(self.backend.__name__, self.specs_for(k))
        tag_constant_data(exported_program)
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)


def delegates(program: ExportedProgram) -> list:
    """Every delegate's backend id, compile specs, processed bytes and debug-handle map."""
    return [(m.backend_id, [(s.key, bytes(s.value)) for s in m.compile_specs],
             bytes(m.processed_bytes), m.meta.get("debug_handle_map"))
            for _, m, _ in get_lowered_submodules(program.graph_module)]


def fingerprint(program: ExportedProgram) -> tuple:
    """The lowered program's graph code, signature and delegates."""
    return program.graph_module.code, str(program.graph_signature), delegates(program)


def snapshot(program: ExportedProgram) -> tuple:
    """The caller-visible state of a program, to check it is unchanged after a failure."""
    tensors = {k: v.detach().clone() for k, v in
               list(program.state_dict.items()) + list(program.constants.items())
               if isinstance(v, torch.Tensor)}
    return program.graph_module.code, str(program.graph_signature), tensors


def assert_unchanged(program: ExportedProgram, before: tuple) -> None:
    code, signature, tensors = snapshot(program)
    assert code == before[0]
    assert signature == before[1]
    assert tensors.keys() == before[2].keys()
    for k, v in tensors.items():
        assert torch.equal(v, before[2][k]), k


def child_processes() -> List[psutil.Process]:
    """This process's live descendants (zombies excluded), but resource trackers: the one
    process each of ``multiprocessing`` and loky starts once, at the first spawned worker,
    to clean up after workers, and which exits with this process."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if any("resource_tracker" in part for part in proc.cmdline()):
                continue
            found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def new_children(before: List[psutil.Process]) -> List[psutil.Process]:
    """Live descendants that were not in ``before`` (other fixtures' helpers, e.g. a Dask
    cluster or multiprocessing's resource tracker, may already be running)."""
    known = {p.pid for p in before}
    return [p for p in child_processes() if p.pid not in known]


def warm_up_backend(name: str, module: str = __name__) -> type:
    """A backend class ``name`` that fills a per-process cache on its first ``preprocess``
    (as XNNPACK traces its pattern graphs on first use) and says, in its bytes, where it
    ran and whether the cache was already warm there: ``b"<pid>:<warm>"``. Each class
    has its own cache (``warm``)."""

    def preprocess(edge_program, compile_specs) -> PreprocessResult:
        was_warm, backend.warm = backend.warm, True
        return PreprocessResult(processed_bytes=f"{os.getpid()}:{was_warm}".encode())

    backend = type(name, (BackendDetails,), {"warm": False, "__module__": module,
                                             "preprocess": staticmethod(preprocess)})
    return backend


PreprocessTestWarmUpBackend = warm_up_backend("PreprocessTestWarmUpBackend")
