"""Partition programs for another process or machine: ExecuTorch's own Edge serializer.

A user-supplied ``concurrent.futures.Executor`` (a Dask cluster, a process pool
with ``spawn``) cannot inherit programs the way fastlower's fork pool does, and
Edge programs do not pickle (Edge operators are not importable by name). They
travel the way ExecuTorch's ETRecord stores Edge programs:
``executorch.exir.serde.serialize.serialize`` (graph, signature, meta,
``state_dict`` and constants, each as bytes) and ``deserialize`` on the other
side. That serializer keeps only part of each node's ``meta`` (``val``,
``debug_handle``, ``stack_trace``, ``nn_module_stack`` ...) and turns the output
list into a tuple; a backend may read the rest (``delegation_tag``, partitioner
configs, ``desc``); it also drops arguments equal to their schema default
(``slice_copy``'s ``dim``), which XNNPACK reads positionally. So every other
picklable ``meta`` entry and every node's ``args``/``kwargs`` (nodes by name)
travel beside the artifact and are put back, and so is the output
container's type. Entries that do not pickle (they hold fake tensors or live objects) are
left out. The backend class travels by module and qualified name and is
imported there.
"""

from __future__ import annotations

import importlib
import pickle
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple, Type, cast

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
    meta: Dict[str, Dict[str, bytes]] = field(default_factory=dict)  # node -> key -> pickle
    arguments: Dict[str, bytes] = field(default_factory=dict)  # node -> pickled (args, kwargs)
    output_type: str = "tuple"


_SERIALIZER_META = frozenset({"val"})


def _pickled_meta(program) -> Dict[str, Dict[str, bytes]]:
    found: Dict[str, Dict[str, bytes]] = {}
    for node in program.graph.nodes:
        entries = {}
        for key, value in node.meta.items():
            if key in _SERIALIZER_META:
                continue
            try:
                entries[key] = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # fake tensors, live objects: the serializer's copy only
                continue
        if entries:
            found[node.name] = entries
    return found


@dataclass(frozen=True)
class _NodeRef:
    name: str


def _pickled_arguments(program) -> Dict[str, bytes]:
    import torch

    found: Dict[str, bytes] = {}
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        as_refs = torch.fx.node.map_arg((node.args, node.kwargs),
                                        lambda n: cast(Any, _NodeRef(n.name)))
        try:
            found[node.name] = pickle.dumps(as_refs, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # keep the serializer's arguments for this node
            continue
    return found


def _as_nodes(value, nodes):
    if isinstance(value, _NodeRef):
        return nodes[value.name]
    if isinstance(value, (list, tuple)):
        return type(value)(_as_nodes(v, nodes) for v in value)
    if isinstance(value, dict):
        return {k: _as_nodes(v, nodes) for k, v in value.items()}
    return value


def _restore(program, wire: "WireJob") -> None:
    nodes = {n.name: n for n in program.graph.nodes}
    for name, data in wire.arguments.items():
        node = nodes.get(name)
        if node is None:
            continue
        args, kwargs = _as_nodes(pickle.loads(data), nodes)
        node.args, node.kwargs = tuple(args), dict(kwargs)
    for name, entries in wire.meta.items():
        node = nodes.get(name)
        if node is None:
            continue
        for key, data in entries.items():
            try:
                node.meta[key] = pickle.loads(data)
            except Exception:  # a class missing on this worker: keep what the serializer gave
                continue
    output = program.graph.output_node()
    if output.args and wire.output_type in ("list", "immutable_list") and isinstance(
            output.args[0], tuple):
        output.args = (list(output.args[0]),) + tuple(output.args[1:])
    program.graph_module.recompile()


def to_wire(job: PreprocessJob) -> WireJob:
    """Serialize a job's program (ETRecord's serializer)."""
    from executorch.exir.serde.serialize import serialize

    output = job.program.graph.output_node()
    output_type = type(output.args[0]).__name__ if output.args else "tuple"
    return WireJob(job.index, job.backend_id, job.backend.__module__, job.backend.__qualname__,
                   serialize(job.program), list(job.compile_specs), job.tag, job.method,
                   job.backend_copy_hook, _pickled_meta(job.program),
                   _pickled_arguments(job.program), output_type)


def _import_backend(module: str, qualname: str) -> Type[BackendDetails]:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def from_wire(wire: WireJob) -> PreprocessJob:
    """The job back, its program deserialized and its backend imported."""
    from executorch.exir.serde.serialize import deserialize

    program = deserialize(wire.program)
    _restore(program, wire)
    return PreprocessJob(wire.index, wire.backend_id,
                         _import_backend(wire.backend_module, wire.backend_qualname),
                         program, wire.compile_specs, wire.tag, wire.method,
                         wire.backend_copy_hook)


def run_wire_job(wire: WireJob) -> Tuple[int, PreprocessResult, float]:
    """Runs on the executor's worker: deserialize, preprocess, return the result."""
    job = from_wire(wire)
    result, seconds = call_preprocess(job)
    return wire.index, result, seconds
