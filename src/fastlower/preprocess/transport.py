"""Partition programs for another process or machine: ExecuTorch's own Edge serializer.

A user-supplied ``concurrent.futures.Executor`` (a Dask cluster, a process pool
with ``spawn``) cannot inherit programs the way fastlower's fork pool does, and
Edge programs do not pickle (Edge operators are not importable by name). They
travel the way ExecuTorch's ETRecord stores Edge programs:
``executorch.exir.serde.serialize.serialize`` (graph, signature, meta,
``state_dict`` and constants, each as bytes) and ``deserialize`` on the other
side. The backend class travels by module and qualified name and is imported
there.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import List, Tuple, Type

from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec

from .jobs import PreprocessJob, call_preprocess


@dataclass
class WireJob:
    """A :class:`PreprocessJob` as plain picklable data."""

    index: int
    backend_id: str
    backend_module: str
    backend_qualname: str
    program: object  # executorch.exir.serde.export_serialize.SerializedArtifact
    compile_specs: List[CompileSpec]
    tag: str
    method: str
    backend_copy_hook: bool


def to_wire(job: PreprocessJob) -> WireJob:
    """Serialize a job's program (ETRecord's serializer)."""
    from executorch.exir.serde.serialize import serialize

    return WireJob(job.index, job.backend_id, job.backend.__module__, job.backend.__qualname__,
                   serialize(job.program), list(job.compile_specs), job.tag, job.method,
                   job.backend_copy_hook)


def _import_backend(module: str, qualname: str) -> Type[BackendDetails]:
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def from_wire(wire: WireJob) -> PreprocessJob:
    """The job back, its program deserialized and its backend imported."""
    from executorch.exir.serde.serialize import deserialize

    return PreprocessJob(wire.index, wire.backend_id,
                         _import_backend(wire.backend_module, wire.backend_qualname),
                         deserialize(wire.program), wire.compile_specs, wire.tag, wire.method,
                         wire.backend_copy_hook)


def run_wire_job(wire: WireJob) -> Tuple[int, PreprocessResult, float]:
    """Runs on the executor's worker: deserialize, preprocess, return the result."""
    job = from_wire(wire)
    result, seconds = call_preprocess(job)
    return wire.index, result, seconds
