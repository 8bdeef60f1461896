"""The writing side: a pickler whose persistent ids take over the objects that do not
pickle as they are (see the package docstring), and the table of tensor storages
written once each after the pickle."""

from __future__ import annotations

import io
import pickle
from typing import Any, Dict, List, Tuple

import torch
from torch._export.verifier import Verifier
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.export import ExportedProgram
from torch.fx import GraphModule
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from ..errors import Uncacheable
from ..symbolic import SymbolicWriter
from .graphs import GraphRecord, record_graph_module
from .named import VIEW_GUARDS, VIEW_SPEC_MODULE, op_name, verifier_settings

PROTOCOL = 5
# ``bytes`` of this size or more (delegate payloads, a .pte) go out of the pickle, as
# the tensor storages do: written from the object itself, read back into one object
BLOB_MIN_BYTES = 64 << 10
_SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


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


class BlobTable:
    """Large ``bytes`` objects met while pickling, each once (by identity), in order."""

    def __init__(self) -> None:
        self.index: Dict[int, int] = {}
        self.blobs: List[bytes] = []  # holds them, so their ids stay unique

    def add(self, blob: bytes) -> int:
        found = self.index.get(id(blob))
        if found is None:
            found = self.index[id(blob)] = len(self.blobs)
            self.blobs.append(blob)
        return found


class Writer(pickle.Pickler):
    """``pickle`` with the persistent ids of the package docstring; ``current_node`` is the
    node being recorded, for error messages."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=PROTOCOL)
        self.symbolic = SymbolicWriter()
        self.storages = StorageTable()
        self.blobs = BlobTable()
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
        if type(obj) is bytes:  # large ones out of the pickle (see BLOB_MIN_BYTES)
            return ("blob", self.blobs.add(obj)) if len(obj) >= BLOB_MIN_BYTES else None
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
        if type(obj).__name__ == "_ViewSpec" and type(obj).__module__ == VIEW_SPEC_MODULE:
            seen, number = self._remember(obj)
            if seen:
                return ("ref", number)
            state = dict(object.__getattribute__(obj, "__dict__"))
            base = state.pop("_base")
            guards = [(g.name, g.expected_val) for g in state.pop("_guards", [])]
            unknown = [name for name, _ in guards if name not in VIEW_GUARDS]
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
                    return ("edge_verifier", verifier_settings(obj))
                raise Uncacheable(f"a verifier class made at run time ({obj.__qualname__})")
            return None
        named = op_name(obj)
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
        def visiting(name: str) -> None:
            self.current_node = name

        return record_graph_module(gm, visiting)


_PLAIN: Dict[type, bool] = {str: True, int: True, float: True, bool: True, bytes: True,
                            type(None): True, tuple: True, list: True, dict: True}


def _special_types() -> Tuple[type, ...]:
    from executorch.exir.dialects.edge._ops import EdgeOpOverload, EdgeOpOverloadPacket

    return (torch.Tensor, *_SYM_TYPES, torch.UntypedStorage, torch.TypedStorage, GraphModule,
            ExportedProgram, torch.fx.Node, ShapeEnv, FakeTensorMode, type,
            EdgeOpOverload, EdgeOpOverloadPacket, torch._ops.OpOverload,
            torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)


def _is_plain(cls: type) -> bool:
    """No instance of ``cls`` is one of the objects :meth:`Writer.persistent_id` takes over."""
    if cls.__name__ == "_ViewSpec" and cls.__module__ == VIEW_SPEC_MODULE:
        return False
    return not issubclass(cls, _special_types())


class _SubclassBox:
    """A tensor subclass pickled by its own ``__reduce_ex__`` inside the stream."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def __reduce__(self) -> Tuple[Any, ...]:
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
