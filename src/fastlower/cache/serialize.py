"""Whole lowered programs as bytes and back: the FX graphs as they are, not re-traced.

``pickle`` does the walking; a persistent-id hook takes over for the objects that
do not pickle, or must not be pickled as they are:

* **FX graph modules** become a record of their nodes in order (op, name, target,
  arguments with nodes by name, type, the whole ``meta`` dict), each node's users
  in their order, the graph's name table (so names made later by
  ``to_executorch``'s passes are the same), its code generator, and the module's
  children, parameters, buffers and attributes in their order, its ``meta`` and
  whether it generates its code lazily. Rebuilt node by node with
  ``Graph.create_node``, never re-traced.
* **Exported programs** are their attribute dict (signature, state dict, range
  constraints, module call graph, example inputs, constants, verifiers, graph
  module); rebuilt without running the verifier (the program was valid when
  stored). ExecuTorch's Edge verifiers are classes made per call
  (``EXIREdgeDialectVerifier(...)``): kept as the settings they were made with.
* **Operators** (ATen, Edge, backend, higher-order) by their qualified name.
* **Fake tensors and symbolic sizes** through :mod:`.symbolic`.
* **Real tensors** (CPU, strided) by reference to their storage: each storage
  is written once, after the pickle (tensors sharing storage share it again).
* ``torch.fx.Node`` anywhere else (in a ``meta`` value) has no stable form: the
  lowering is not cached (:class:`~.errors.Uncacheable`).

``LoweredBackendModule``, graph signatures, compile specs, named data and the
rest pickle as they are.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch._export.verifier import Verifier
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.export import ExportedProgram
from torch.fx import GraphModule
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from .errors import DamagedEntry, Uncacheable
from .symbolic import SymbolicReader, SymbolicWriter

PROTOCOL = 5
_SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)
_MODULE_INTERNALS = frozenset({
    "training", "_parameters", "_buffers", "_non_persistent_buffers_set", "_backward_pre_hooks",
    "_backward_hooks", "_is_full_backward_hook", "_forward_hooks", "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called", "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs",
    "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks", "_modules", "_graph", "_code", "_lineno_map",
    "_prologue_start", "_tracer_cls", "_tracer_extras", "meta", "_replace_hooks",
    "_create_node_hooks", "_erase_node_hooks", "_deepcopy_hooks", "shape_env",
    "_is_lazy_graph_module", "_recompile_count"})


@dataclass(frozen=True)
class NodeRef:
    """A node inside a node's arguments, by name."""

    name: str


@dataclass
class GraphRecord:
    """An FX graph module, node by node (see the module docstring)."""

    lazy: bool
    nodes: List[Tuple[Any, ...]]  # (op, name, target, args, kwargs, type, meta)
    users: Dict[str, List[str]]
    used_names: List[str]
    base_count: Dict[str, int]
    graph_used_names: Dict[str, int]
    codegen: Any
    tracer: Tuple[Any, Any]
    children: List[Tuple[str, Any]]
    parameters: List[Tuple[str, Any]]
    buffers: List[Tuple[str, Any]]
    non_persistent: List[str]
    attributes: List[Tuple[str, Any]]
    meta: Dict[str, Any]
    training: bool
    shape_env: Any
    # torch.fx names each module's class (``fused_tag1`` for a partition's leftover
    # submodule): kept, as named_children shows it
    class_name: str = "GraphModule"


def _op_name(op: Any) -> Optional[Tuple[str, str]]:
    from executorch.exir.dialects.backend._ops import BackendOpOverload
    from executorch.exir.dialects.edge._ops import EdgeOpOverload, EdgeOpOverloadPacket

    if isinstance(op, BackendOpOverload):  # (a subclass of EdgeOpOverload)
        return "backend", op.__name__
    if isinstance(op, EdgeOpOverload):
        return "edge", op.__name__
    if isinstance(op, EdgeOpOverloadPacket):
        return "edge_packet", op.__name__
    if isinstance(op, torch._ops.OpOverload):
        if op.namespace == _NO_DECOMP:
            return "no_decomp", str(_no_decomp_original(op))
        return "aten", str(op)
    if isinstance(op, torch._ops.OpOverloadPacket):
        return "packet", op._qualified_op_name.replace("::", ".")
    if isinstance(op, torch._ops.HigherOrderOperator):
        return "hop", op.name()
    return None


def _find_op(kind: str, name: str) -> Any:
    from executorch.exir.dialects._ops import ops as exir_ops

    root = {"edge": exir_ops.edge, "edge_packet": exir_ops.edge, "backend": exir_ops.backend,
            "aten": torch.ops, "packet": torch.ops}.get(kind)
    if kind == "hop":
        return getattr(torch.ops.higher_order, name)
    if kind == "no_decomp":
        return _no_decomp_twin(_find_op("aten", name))
    if root is None:
        raise DamagedEntry(f"unknown operator kind {kind!r}")
    obj = root
    try:
        for part in name.split("."):
            obj = getattr(obj, part)
    except (AttributeError, RuntimeError) as exc:
        raise DamagedEntry(f"operator {name} ({kind}) is not defined in this process: "
                           f"{exc}") from exc
    return obj


_NO_DECOMP = "EDGE_DO_NOT_DECOMP"


def _no_decomp_original(op: Any) -> Any:
    """The ATen (or torchao ...) op whose ``EDGE_DO_NOT_DECOMP`` twin ``op`` is."""
    from executorch.exir.program import _program

    original = _program.transform_op_to_aten_op.get(str(op))
    if original is None:
        raise Uncacheable(f"operator {op} of the edge stage's no-decomposition namespace has "
                          "no known original")
    return original


def _no_decomp_twin(original: Any) -> Any:
    """The edge stage defines ``EDGE_DO_NOT_DECOMP::<op>`` twins of the ops it keeps (their
    schema and kernel); node ``meta`` may name one. A process that reads the entry never
    ran the edge stage: define the twin the same way."""
    from executorch.exir.program import _program

    _program._register_no_decomp_op(original)
    return _program.aten_op_to_transform_op[original]


def _verifier_settings(cls: type) -> Tuple[bool, bool, List[Any], List[Any]]:
    instance = cls()
    return (bool(instance.enable), bool(instance.use_dim_order),
            list(instance._core_aten_ops_exception_list), list(instance._preserve_ops))


def _edge_verifier(enable: bool, use_dim_order: bool, exceptions: List[Any],
                   preserve: List[Any]) -> type:
    from executorch.exir import EdgeCompileConfig
    from executorch.exir.verification.verifier import EXIREdgeDialectVerifier

    config = EdgeCompileConfig(_check_ir_validity=enable, _skip_dim_order=not use_dim_order)
    return EXIREdgeDialectVerifier(config, class_only=True,
                                   core_aten_ops_exception_list=list(exceptions),
                                   preserve_ops=list(preserve))


class StorageTable:
    """Storages met while pickling, each once, in order of first use."""

    def __init__(self) -> None:
        self.index: Dict[Tuple[int, int], int] = {}
        self.storages: List[torch.UntypedStorage] = []

    def add(self, storage: torch.UntypedStorage) -> int:
        key = (storage.data_ptr(), storage.nbytes())
        if storage.nbytes() == 0:
            key = (-len(self.storages) - 1, 0)  # empty storages have no address to share
        found = self.index.get(key)
        if found is None:
            found = self.index[key] = len(self.storages)
            self.storages.append(storage)
        return found

    def buffers(self) -> List[memoryview]:
        """Each storage's bytes, without a copy."""
        views = []
        for storage in self.storages:
            if storage.nbytes() == 0:
                views.append(memoryview(b""))
                continue
            as_bytes = torch.empty(0, dtype=torch.uint8).set_(storage)
            views.append(memoryview(as_bytes.numpy()).cast("B"))
        return views


class _Writer(pickle.Pickler):
    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=PROTOCOL)
        self.symbolic = SymbolicWriter()
        self.storages = StorageTable()
        self.memo_ids: Dict[int, Tuple[int, Any]] = {}  # id -> (number, object kept alive)
        self.current_node: str = ""

    def _remember(self, obj: Any) -> Tuple[bool, int]:
        known = self.memo_ids.get(id(obj))
        if known is not None:
            return True, known[0]
        number = len(self.memo_ids)
        self.memo_ids[id(obj)] = (number, obj)
        return False, number

    def persistent_id(self, obj: Any) -> Any:  # noqa: C901 - one dispatch table
        # called for every object pickled (~10^5-10^6 per lowering): most are of a type
        # none of the cases below can match, known after the first of its kind
        plain = _PLAIN.get(type(obj))
        if plain is None:
            plain = _PLAIN[type(obj)] = _is_plain(type(obj))
        if plain:
            return None
        if isinstance(obj, torch.Tensor):
            return self._tensor(obj)
        if isinstance(obj, _SYM_TYPES):
            return ("sym", self.symbolic.sym(obj))
        if isinstance(obj, torch.UntypedStorage):
            if obj.device.type != "cpu":
                raise Uncacheable(f"a storage on {obj.device}")
            return ("storage", self.storages.add(obj))
        if isinstance(obj, torch.TypedStorage):
            if obj.device.type != "cpu":
                raise Uncacheable(f"a storage on {obj.device}")
            return ("typed_storage", self.storages.add(obj.untyped()), obj.dtype)
        if isinstance(obj, GraphModule):
            seen, number = self._remember(obj)
            return ("ref", number) if seen else ("gm", number, self._graph_record(obj))
        if isinstance(obj, ExportedProgram):
            seen, number = self._remember(obj)
            return ("ref", number) if seen else ("ep", number, dict(obj.__dict__))
        if type(obj).__name__ == "_ViewSpec" and type(obj).__module__ == _VIEW_SPEC_MODULE:
            seen, number = self._remember(obj)
            if seen:
                return ("ref", number)
            state = dict(object.__getattribute__(obj, "__dict__"))
            base = state.pop("_base")
            guards = [(g.name, g.expected_val) for g in state.pop("_guards", [])]
            unknown = [name for name, _ in guards if name not in _VIEW_GUARDS]
            if unknown:
                raise Uncacheable(f"a _ViewSpec with guards {unknown} this version does not know")
            return ("view_spec", number, base, state, guards)
        if isinstance(obj, torch.fx.Node):
            raise Uncacheable(f"node {self.current_node!r} holds a torch.fx.Node in its meta "
                              f"({obj.name!r}), which has no stable form")
        if isinstance(obj, ShapeEnv):
            return ("env",)
        if isinstance(obj, FakeTensorMode):
            return ("mode",)
        if isinstance(obj, type):
            if issubclass(obj, Verifier) and "<locals>" in obj.__qualname__:
                if obj.__qualname__.startswith("EXIREdgeDialectVerifier."):
                    return ("edge_verifier", _verifier_settings(obj))
                raise Uncacheable(f"a verifier class made at run time ({obj.__qualname__})")
            return None
        named = _op_name(obj)
        if named is not None:
            return ("op",) + named
        return None

    def _tensor(self, t: torch.Tensor) -> Any:
        seen, number = self._remember(t)
        if seen:
            return ("ref", number)
        if isinstance(t, FakeTensor):
            return ("fake", number, self.symbolic.fake(t))
        if type(t) not in (torch.Tensor, torch.nn.Parameter):
            # tensor subclasses (torchao): their own pickling; inner tensors come back here
            return ("subclass", number, _SubclassBox(t))
        if t.layout != torch.strided or t.is_quantized:
            raise Uncacheable(f"a tensor with layout {t.layout}, dtype {t.dtype}")
        extra = dict(t.__dict__) if t.__dict__ else None
        if t.device.type == "meta":
            return ("meta", number, tuple(t.shape), tuple(t.stride()), t.storage_offset(),
                    t.dtype, t.requires_grad, type(t) is torch.nn.Parameter, extra)
        if t.device.type != "cpu":
            raise Uncacheable(f"a tensor on {t.device}")
        if any(isinstance(s, _SYM_TYPES) for s in t.shape):
            raise Uncacheable("a real tensor with symbolic sizes")
        storage = self.storages.add(t.untyped_storage())
        return ("t", number, storage, t.storage_offset(), tuple(t.shape), tuple(t.stride()),
                t.dtype, t.requires_grad, type(t) is torch.nn.Parameter, extra)

    def _graph_record(self, gm: GraphModule) -> GraphRecord:
        graph = gm.graph
        nodes, users = [], {}
        for node in graph.nodes:
            self.current_node = node.name
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs),
                                                 lambda n: NodeRef(n.name))
            nodes.append((node.op, node.name, node.target, args, kwargs, node.type,
                          dict(node.meta)))
            users[node.name] = [u.name for u in node.users]
        namespace = graph._graph_namespace
        extra = [(k, v) for k, v in gm.__dict__.items() if k not in _MODULE_INTERNALS]
        registered = set(gm._modules) | set(gm._parameters) | set(gm._buffers)
        attributes = []
        for node in graph.nodes:
            if node.op == "get_attr" and "." not in node.target and \
                    node.target not in registered and hasattr(gm, node.target):
                attributes.append((node.target, getattr(gm, node.target)))
        return GraphRecord(
            lazy=isinstance(gm, _LazyGraphModule), nodes=nodes, users=users,
            used_names=sorted(namespace._used_names), base_count=dict(namespace._base_count),
            graph_used_names=dict(getattr(graph, "_used_names", {})),
            codegen=graph._codegen, tracer=(graph._tracer_cls, graph._tracer_extras),
            children=list(gm._modules.items()), parameters=list(gm._parameters.items()),
            buffers=list(gm._buffers.items()),
            non_persistent=sorted(gm._non_persistent_buffers_set),
            attributes=attributes + extra, meta=dict(gm.meta), training=gm.training,
            shape_env=getattr(gm, "shape_env", None), class_name=type(gm).__name__)


_PLAIN: Dict[type, bool] = {str: True, int: True, float: True, bool: True, bytes: True,
                            type(None): True, tuple: True, list: True, dict: True}


def _special_types() -> Tuple[type, ...]:
    from executorch.exir.dialects.edge._ops import EdgeOpOverload, EdgeOpOverloadPacket

    return (torch.Tensor, *_SYM_TYPES, torch.UntypedStorage, torch.TypedStorage, GraphModule,
            ExportedProgram, torch.fx.Node, ShapeEnv, FakeTensorMode, type,
            EdgeOpOverload, EdgeOpOverloadPacket, torch._ops.OpOverload,
            torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)


def _is_plain(cls: type) -> bool:
    """No instance of ``cls`` is one of the objects :meth:`_Writer.persistent_id` takes over."""
    if cls.__name__ == "_ViewSpec" and cls.__module__ == _VIEW_SPEC_MODULE:
        return False
    return not issubclass(cls, _special_types())


class _SubclassBox:
    """A tensor subclass pickled by its own ``__reduce_ex__`` inside the stream."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def __reduce__(self):
        return (_unbox, (self.tensor.__reduce_ex__(PROTOCOL),))


def _unbox(reduced: Any) -> torch.Tensor:
    func, args = reduced[0], reduced[1]
    obj = func(*args)
    if len(reduced) > 2 and reduced[2] is not None:
        state = reduced[2]
        if hasattr(obj, "__setstate__"):
            obj.__setstate__(state)
        else:
            obj.__dict__.update(state)
    return obj


class _Reader(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, storages: List[torch.UntypedStorage],
                 symbolic: SymbolicReader) -> None:
        super().__init__(file)
        self.storages = storages
        self.symbolic = symbolic
        self.objects: Dict[int, Any] = {}

    def persistent_load(self, pid: Any) -> Any:  # noqa: C901 - one dispatch table
        kind = pid[0]
        if kind == "ref":
            return self.objects[pid[1]]
        if kind == "t":
            _, number, storage, offset, size, stride, dtype, grad, param, extra = pid
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
        if kind == "storage":
            return self.storages[pid[1]]
        if kind == "typed_storage":
            return torch.TypedStorage(wrap_storage=self.storages[pid[1]], dtype=pid[2],
                                      _internal=True)
        if kind == "op":
            return _find_op(pid[1], pid[2])
        if kind == "gm":
            return self._keep(pid[1], _rebuild_graph_module(pid[2], self.symbolic))
        if kind == "ep":
            program = ExportedProgram.__new__(ExportedProgram)
            program.__dict__.update(pid[2])
            return self._keep(pid[1], program)
        if kind == "view_spec":
            return self._keep(pid[1], _view_spec(pid[2], pid[3], pid[4]))
        if kind == "env":
            return self.symbolic.env
        if kind == "mode":
            return self.symbolic.mode
        if kind == "edge_verifier":
            return _edge_verifier(*pid[1])
        raise DamagedEntry(f"unknown persistent id {kind!r}")

    def _keep(self, number: int, obj: Any) -> Any:
        self.objects[number] = obj
        return obj


_VIEW_SPEC_MODULE = "executorch.exir.passes.replace_view_copy_with_view_pass"
# ExecuTorch's _ViewSpec guards (lambdas made in its __init__), by name: what each reads
_VIEW_GUARDS = {
    "is_sparse": lambda view: view.is_sparse,
    "layout": lambda view: view.layout,
    "shape_dynamism_init": lambda view: view.shape_dynamism,
    "shape_dynamism_eq_base": lambda view: view.shape_dynamism == view._base.shape_dynamism,
    "dtype": lambda view: view.dtype,
    "rank": lambda view: len(view.shape),
}


def _view_spec(base: Any, state: Dict[str, Any], guards: List[Tuple[str, Any]]) -> Any:
    """ExecuTorch's ``_ViewSpec`` (a view's tensor spec sharing its base's memory fields),
    its fields as they were and its guards (lambdas in the original) made again."""
    from executorch.exir.passes.replace_view_copy_with_view_pass import _Guard, _ViewSpec

    spec = _ViewSpec.__new__(_ViewSpec)
    object.__setattr__(spec, "_base", base)
    for name, value in state.items():
        object.__setattr__(spec, name, value)
    object.__setattr__(spec, "_guards", [_Guard(name, _VIEW_GUARDS[name], expected)
                                         for name, expected in guards])
    return spec


def _finish_tensor(t: torch.Tensor, grad: bool, param: bool, extra: Optional[dict]):
    if param:
        t = torch.nn.Parameter(t, requires_grad=grad)
    elif grad:
        t.requires_grad_(True)
    if extra:
        t.__dict__.update(extra)
    return t


def _rebuild_graph_module(record: GraphRecord, symbolic: SymbolicReader) -> GraphModule:
    graph = torch.fx.Graph(tracer_cls=record.tracer[0], tracer_extras=record.tracer[1])
    made: Dict[str, torch.fx.Node] = {}

    def resolve(ref: NodeRef) -> torch.fx.Node:
        try:
            return made[ref.name]
        except KeyError:
            raise DamagedEntry(f"node argument {ref.name!r} is not an earlier node") from None

    for op, name, target, args, kwargs, type_expr, meta in record.nodes:
        args, kwargs = _map_refs((args, kwargs), resolve)
        node = graph.create_node(op, target, tuple(args), dict(kwargs), name=name,
                                 type_expr=type_expr)
        if node.name != name:
            raise DamagedEntry(f"node {name!r} came back as {node.name!r}")
        node.meta = meta
        made[name] = node
    for name, order in record.users.items():
        users = made[name].users
        if list(u.name for u in users) != order:
            if sorted(u.name for u in users) != sorted(order):
                raise DamagedEntry(f"the users of node {name!r} differ")
            users.clear()
            for user in order:
                users[made[user]] = None
    namespace = graph._graph_namespace
    namespace._used_names = set(record.used_names)
    namespace._base_count = type(namespace._base_count)(record.base_count) \
        if not isinstance(namespace._base_count, dict) else dict(record.base_count)
    if hasattr(graph, "_used_names"):
        graph._used_names = dict(record.graph_used_names)
    graph._codegen = record.codegen

    root = torch.nn.Module()
    for name, child in record.children:
        root._modules[name] = child
    for name, param in record.parameters:
        root._parameters[name] = param
    for name, buffer in record.buffers:
        root._buffers[name] = buffer
    for name, value in record.attributes:
        object.__setattr__(root, name, value)
    cls = _LazyGraphModule if record.lazy else GraphModule
    gm = cls(root, graph, record.class_name)
    gm._modules.clear()
    gm._modules.update(record.children)
    gm._parameters.clear()
    gm._parameters.update(record.parameters)
    gm._buffers.clear()
    gm._buffers.update(record.buffers)
    gm._non_persistent_buffers_set = set(record.non_persistent)
    for name, value in record.attributes:
        object.__setattr__(gm, name, value)
    gm.meta = record.meta
    gm.training = record.training
    if "shape_env" in gm.__dict__ or record.shape_env is not None:
        gm.shape_env = record.shape_env
    return gm


_LEAVES = frozenset({int, float, bool, str, type(None), torch.dtype, torch.device,
                     torch.layout, torch.memory_format})


def _map_refs(value: Any, fn) -> Any:
    kind = type(value)
    if kind in _LEAVES:  # most arguments (a fast path: this runs for every node)
        return value
    if kind is list:
        return [_map_refs(v, fn) for v in value]
    if kind is tuple:
        return tuple([_map_refs(v, fn) for v in value])
    if isinstance(value, NodeRef):
        return fn(value)
    if isinstance(value, tuple):
        if hasattr(value, "_fields"):  # named tuples keep their type
            return type(value)(*(_map_refs(v, fn) for v in value))
        return tuple(_map_refs(v, fn) for v in value)
    if isinstance(value, list):
        return [_map_refs(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _map_refs(v, fn) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(_map_refs(value.start, fn), _map_refs(value.stop, fn),
                     _map_refs(value.step, fn))
    return value


@dataclass
class Serialized:
    """A pickled object graph and the storages it refers to (written after it)."""

    header: Dict[str, Any]  # the reader's state: ShapeEnv / FakeTensorMode settings
    pickled: bytes
    storages: List[memoryview]


def dumps(obj: Any) -> Serialized:
    """``obj`` (anything holding programs, modules, tensors) as :class:`Serialized`.

    :class:`~.errors.Uncacheable` when something in it has no faithful form.
    """
    buffer = io.BytesIO()
    writer = _Writer(buffer)
    try:
        writer.dump(obj)
    except Uncacheable:
        raise
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:
        where = f" (at node {writer.current_node!r})" if writer.current_node else ""
        raise Uncacheable(f"the lowered programs do not serialize{where}: {exc}") from exc
    return Serialized(writer.symbolic.state(), buffer.getvalue(), writer.storages.buffers())


def loads(header: Dict[str, Any], pickled: bytes, storages: List[bytearray]) -> Any:
    """The object :func:`dumps` was given, rebuilt; :class:`~.errors.DamagedEntry` if not."""
    symbolic = SymbolicReader(header)
    untyped = []
    for data in storages:
        if len(data):
            untyped.append(torch.frombuffer(data, dtype=torch.uint8).untyped_storage())
        else:
            untyped.append(torch.UntypedStorage(0))
    return _Reader(io.BytesIO(pickled), untyped, symbolic).load()
