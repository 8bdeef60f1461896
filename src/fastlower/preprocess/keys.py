"""The cache key of one partition's preprocess: everything that can change the backend's output.

**In the key** (hashed with xxh3-128; tensor bytes hashed separately, once per tensor object):

* the backend id, and the backend class's module and qualified name;
* a digest of the source files of the package that defines the backend class:
  every file (any extension, ``__pycache__`` excluded) under the directory of
  the class's module, recursively (for XNNPACK ``executorch/backends/xnnpack/``,
  including its flatbuffer schemas). A class defined in a top-level module
  (no package) digests that one file. Computed once per directory per process;
* the torch, executorch and fastlower versions, those of flatbuffers (the ``.pte``
  serializer), sympy, torchao and numpy, and the cache's entry format; the Python
  source of torch or executorch when its version does not pin it (an editable install,
  a checkout on ``PYTHONPATH``: :func:`.code_digests.unpinned_sources`);
* the process settings the lowering reads (:func:`process_settings`: default dtype and
  device, dynamo's ``do_not_emit_runtime_asserts``);
* the compile specs (key and value bytes, in order) and which copy the
  reference makes before ``preprocess`` (plain, or the backend's
  ``copy_exported_program_for_preprocess``);
* the partition program in a canonical form: per node in graph order its op,
  name, target (qualified name), args and kwargs (nodes by name, constants by
  value, tensors by content) and every ``meta`` entry except ``from_node`` and
  ``seq_nr`` (below): ``val`` / ``tensor_meta`` as shape, dtype, stride, device and
  ``requires_grad``; ``debug_handle``, ``stack_trace``, ``nn_module_stack``,
  ``delegation_tag``, ``torch_fn``, partitioner configs ... as values; then
  nested graphs (``cond``/``map`` bodies) and nested lowered modules (backend
  id, compile specs, processed bytes, their graph); the graph signature, the
  range constraints, the module call graph, and the name, dtype, shape, stride
  and bytes of every ``state_dict`` entry and constant;
* the source of every operator of the partition outside torch's namespaces
  (:func:`.code_digests.operator_sources`: the backend may run its fake kernel).

**Not in the key**:

* ``meta["from_node"]`` (pass provenance: it records ``id()`` of graphs, which
  differs in every process, so keeping it would make every lookup a miss) and
  ``meta["seq_nr"]`` (autograd's process-wide sequence counter at export time:
  it differs between two exports of the same model);
* object addresses (``0x...``) inside the ``repr`` of meta values of types
  the canonical form does not know (such values are keyed by type and ``repr``);
* the ``id()`` of a Python module that ``torch.export`` (non-strict) uses as the
  key of each ``nn_module_stack`` entry (``'140665498839760': ('layers.0', ...)``):
  it differs in every process. Each such key is replaced by its ordinal of first
  appearance in the program, so which nodes share a module instance stays in the
  key while the address does not; the entry's path and module type stay as they are;
* anything outside the partition program: environment variables, files the
  backend reads, libraries other than torch/executorch/fastlower and the
  backend's own package (a backend in ``mypkg/`` that depends on ``otherpkg``
  is not re-keyed when ``otherpkg`` changes: clear the cache, or set
  ``FASTLOWER_CACHE_VERIFY=1``);
* the caller's program outside the partition, and the other partitions.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import importlib.metadata
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, cast

import torch
import xxhash
from torch.fx.node import _get_qualified_name
from torch.export import ExportedProgram

from .code_digests import (
    clear_directory_digests, directory_digest, operator_sources, unpinned_sources,
)
from .jobs import PreprocessJob

ENTRY_FORMAT = 2  # 2: an entry says how its result was made (cache.MADE)
# The generation of fastlower's shortcuts (derived preprocess results, refit, skipped
# retraces, reused fake outputs). It is in every key and entry stamp, and is raised
# whenever a shortcut is found unsound, so that nothing an earlier generation derived is
# ever served. 2: value cases, ambiguous steps and provenance, mutated user inputs.
SHORTCUTS = 2
TensorDigests = Dict[int, Tuple[torch.Tensor, str]]
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+|0x[0-9a-fA-F]{6,}")
_SKIPPED_META = frozenset({"from_node", "seq_nr"})
# torch.export (non-strict) keys nn_module_stack entries by id() of the module object
_OBJECT_ID = re.compile(r"\d{6,}")


# the libraries the lowering's code calls into: the .pte serializer, symbolic arithmetic,
# torchao's quantized tensors and operators, numpy
_LIBRARIES = ("flatbuffers", "sympy", "torchao", "numpy")


@functools.lru_cache(maxsize=None)
def versions() -> str:
    """torch, executorch and fastlower versions, those of the libraries they call
    (:data:`_LIBRARIES`, "unknown" when absent) and the entry format, as one string."""
    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"
    libraries = ";".join(f"{dist}={version(dist)}" for dist in _LIBRARIES)
    return (f"torch={torch.__version__};executorch={version('executorch')};"
            f"fastlower={version('fastlower')};{libraries};format={ENTRY_FORMAT};"
            f"shortcuts={SHORTCUTS};unpinned={unpinned_sources()}")


def process_settings() -> str:
    """The process-wide settings a lowering reads that no argument carries: the default
    dtype and device (ExecuTorch's passes make tensors from Python numbers, a retrace
    re-derives dtypes), and whether export emits runtime asserts (they take debug
    handles). Read at each key, as the lowering reads them."""
    from torch._dynamo import config as dynamo_config

    return (f"default_dtype={torch.get_default_dtype()};"
            f"default_device={torch.get_default_device()};"
            f"no_runtime_asserts={dynamo_config.do_not_emit_runtime_asserts}")


def _source_root(module_name: str) -> List[Path]:
    module = sys.modules.get(module_name) or importlib.import_module(module_name)
    file = getattr(module, "__file__", None)
    if not file:
        return []
    path = Path(file).resolve()
    if "." not in module_name and not hasattr(module, "__path__"):
        return [path]  # a top-level module: that file alone
    return [path.parent]


def source_digest(backend: type) -> str:
    """Digest of the source files of the package defining ``backend`` (cached per process)."""
    roots = _source_root(backend.__module__)
    if not roots:
        return f"no-source:{backend.__module__}"
    return directory_digest(roots[0])


def clear_source_digests() -> None:
    """Forget the per-process source digests (after editing a backend's source in place)."""
    clear_directory_digests()


class Canonical:
    """Writes a program in canonical form into a hasher; tensor digests memoized by object."""

    def __init__(self, tensor_digests: Optional[TensorDigests] = None):
        self.hasher = xxhash.xxh3_128()
        # by id(); each entry holds its tensor so the id stays unique while memoized
        self.tensor_digests: TensorDigests = tensor_digests if tensor_digests is not None else {}
        # nn_module_stack keys that are object ids -> their ordinal in this program
        self.module_ids: Dict[str, int] = {}

    def write(self, text: str) -> None:
        self.hasher.update(text.encode("utf-8", "surrogatepass"))
        self.hasher.update(b"\x1f")

    # --- values ------------------------------------------------------------------
    def tensor_digest(self, tensor: torch.Tensor) -> str:
        known = self.tensor_digests.get(id(tensor))
        if known is not None:
            return known[1]
        digest = content_digest(tensor)
        self.tensor_digests[id(tensor)] = (tensor, digest)
        return digest

    def tensor(self, t: torch.Tensor, with_data: bool) -> str:
        layout = (f"{type(t).__name__}({tuple(t.shape)},{t.dtype},{t.layout},{t.device},"
                  f"rg={t.requires_grad}")
        if t.layout == torch.strided:
            layout += f",{t.stride()}"
        if with_data and not _is_fake(t):
            layout += f",data={self.tensor_digest(t)}"
        return layout + ")"

    def value(self, v: Any) -> str:
        if v is None or isinstance(v, (bool, int, float, str, bytes)):
            return repr(v)
        if isinstance(v, torch.fx.Node):
            return f"%{self.node_label(v)}"
        if isinstance(v, torch.Tensor):
            return self.tensor(v, with_data=True)
        if isinstance(v, (list, tuple)):
            return f"{type(v).__name__}[{','.join(self.value(x) for x in v)}]"
        if isinstance(v, dict):
            return "{" + ",".join(f"{self.value(k)}:{self.value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format,
                          torch.SymInt, torch.SymFloat, torch.SymBool)):
            return str(v)
        if isinstance(v, enum.Enum):
            return f"{type(v).__qualname__}.{v.name}"
        if isinstance(v, (set, frozenset)):
            return f"set[{','.join(sorted(self.value(x) for x in v))}]"
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            inner = ",".join(f"{f.name}={self.value(getattr(v, f.name))}"
                             for f in dataclasses.fields(v))
            return f"{type(v).__qualname__}({inner})"
        if callable(v):
            try:
                return f"fn:{_get_qualified_name(v)}"
            except Exception:
                pass
        return f"{type(v).__qualname__}:{_ADDRESS.sub('', repr(v))}"

    # --- programs ----------------------------------------------------------------
    def graph(self, gm: torch.fx.GraphModule) -> None:
        for node in gm.graph.nodes:
            self.node(gm, node)

    def node(self, gm: torch.fx.GraphModule, node: torch.fx.Node) -> None:
        """One node: op, name, target, arguments, then :meth:`node_extra`, its ``meta``
        and, for a ``get_attr``, the attribute."""
        target = node.target if isinstance(node.target, str) else self.value(node.target)
        self.write(f"{node.op}|{self.node_label(node)}|{target}|{self.value(node.args)}|"
                   f"{self.value(node.kwargs)}")
        self.node_extra(node)
        for key in sorted(node.meta):
            if key == "nn_module_stack":
                self.write(f"meta:{key}={self.module_stack(node.meta[key])}")
            elif key not in self.skipped_meta(node):
                self.write(f"meta:{key}={self.meta_value(node.meta[key])}")
        if node.op == "get_attr":
            self.attribute(gm, cast(str, node.target))

    def node_label(self, node: torch.fx.Node) -> str:
        """How the text names ``node`` (its name; a subclass may write another label)."""
        return node.name

    def skipped_meta(self, node: torch.fx.Node) -> frozenset:
        """The ``meta`` keys of ``node`` left out of the text."""
        return _SKIPPED_META

    def node_extra(self, node: torch.fx.Node) -> None:
        """Lines a subclass writes after a node's first line (none in this key)."""

    def meta_value(self, v: Any) -> str:
        # fake tensors: shape, dtype, stride, device only; real tensors by content
        if isinstance(v, torch.Tensor):
            return self.tensor(v, with_data=not _is_fake(v))
        if isinstance(v, (list, tuple)):
            return f"{type(v).__name__}[{','.join(self.meta_value(x) for x in v)}]"
        if isinstance(v, dict):
            return "{" + ",".join(f"{self.value(k)}:{self.meta_value(x)}"
                                  for k, x in v.items()) + "}"
        return self.value(v)

    def module_stack(self, stack: Any) -> str:
        """``nn_module_stack`` with object-id keys replaced by their ordinal (see above)."""
        if not isinstance(stack, dict):
            return self.meta_value(stack)
        entries = []
        for key, value in stack.items():
            if isinstance(key, str) and _OBJECT_ID.fullmatch(key):
                key = f"module#{self.module_ids.setdefault(key, len(self.module_ids))}"
            entries.append(f"{self.value(key)}:{self.meta_value(value)}")
        return "{" + ",".join(entries) + "}"

    def attribute(self, gm: torch.fx.GraphModule, target: str) -> None:
        obj: Any = gm
        for part in target.split("."):
            obj = getattr(obj, part, None)
        from executorch.exir.lowered_backend_module import LoweredBackendModule

        if isinstance(obj, LoweredBackendModule):
            self.write(f"lowered:{obj.backend_id}|{self.value(list(obj.compile_specs))}|"
                       f"{xxhash.xxh3_128_hexdigest(obj.processed_bytes)}")
            self.program(obj.original_module)
        elif isinstance(obj, torch.fx.GraphModule):
            self.write(f"subgraph:{target}")
            self.graph(obj)
            self.write(f"end:{target}")
        elif isinstance(obj, torch.Tensor):
            self.write(f"attr:{target}={self.tensor(obj, with_data=True)}")
        else:
            self.write(f"attr:{target}={self.value(obj)}")

    def program(self, program: ExportedProgram) -> None:
        self.graph(program.graph_module)
        self.write(f"signature:{self.signature_text(program)}")
        self.write(f"ranges:{_ADDRESS.sub('', str(program.range_constraints))}")
        self.write(f"calls:{self.value(program.module_call_graph)}")
        self.program_constants(program)

    def signature_text(self, program: ExportedProgram) -> str:
        return str(program.graph_signature)

    def program_constants(self, program: ExportedProgram) -> None:
        for name, tensor in program.state_dict.items():
            self.write(f"state:{name}={self.tensor(tensor, with_data=True)}")
        for name, value in program.constants.items():
            self.write(f"constant:{name}={self.value(value)}")


def content_digest(tensor: torch.Tensor) -> str:
    """xxh3-128 of a tensor's values: a strided tensor's bytes in row-major order, a
    sparse or quantized one's serialized form."""
    hasher = xxhash.xxh3_128()
    plain = tensor.detach()
    if plain.layout == torch.strided and not plain.is_quantized:
        data = plain.contiguous().cpu().reshape(-1)
        if data.numel():
            hasher.update(data.view(torch.uint8).numpy().data)
    else:  # sparse, quantized: their serialized form
        import io
        buffer = io.BytesIO()
        torch.save(plain, buffer)
        hasher.update(buffer.getvalue())
    return hasher.hexdigest()


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor) or t.device.type == "meta"


def cache_key(job: PreprocessJob, tensor_digests: Optional[TensorDigests] = None) -> str:
    """The job's key: hex digest over everything listed in this module's docstring."""
    canonical = Canonical(tensor_digests)
    write_backend(canonical, job)
    canonical.program(job.program)
    canonical.write(f"operators:{operator_sources([job.program])}")
    return canonical.hasher.hexdigest()


def write_backend(canonical: Canonical, job: PreprocessJob) -> None:
    """The key's lines about the backend: id and class, source, versions, copy, specs."""
    backend = job.backend
    canonical.write(f"backend:{job.backend_id}|{backend.__module__}.{backend.__qualname__}")
    canonical.write(f"source:{source_digest(backend)}")
    canonical.write(f"versions:{versions()}")
    canonical.write(f"settings:{process_settings()}")
    canonical.write(f"copy:{'backend-hook' if job.backend_copy_hook else 'plain'}")
    canonical.write("specs:" + ",".join(f"{s.key}={bytes(s.value).hex()}"
                                        for s in job.compile_specs))
