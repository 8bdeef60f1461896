"""Unpickling of plain data only: builtins and the few records a cache entry holds.

Behind the MAC this is a second wall: what a preprocess entry holds (processed
bytes, the debug-handle map, named data, delegate info) and a lowering entry's
``info`` are plain data, so their unpickler admits nothing that can run code.
Any other global a pickle names is an :class:`UnsafePickle`; the writer checks its
own pickle the same way, so an entry holding anything else is simply not stored.
"""

from __future__ import annotations

import io
import pickle
from typing import Any, FrozenSet, Tuple

PLAIN_BUILTINS: FrozenSet[str] = frozenset({
    "bytearray", "set", "frozenset", "complex", "slice", "range"})

# the records ExecuTorch's PreprocessResult carries in its named data
PLAIN_RECORDS: FrozenSet[Tuple[str, str]] = frozenset({
    ("executorch.exir._serialize._named_data_store", "NamedDataStoreOutput"),
    ("executorch.exir._serialize.data_serializer", "DataEntry"),
    ("executorch.exir.tensor_layout", "TensorLayout"),
    ("executorch.exir.scalar_type", "ScalarType"),
})


class UnsafePickle(pickle.UnpicklingError):
    """A pickle that names a global outside the plain set."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in PLAIN_BUILTINS:
            return super().find_class(module, name)
        if (module, name) in PLAIN_RECORDS:
            return super().find_class(module, name)
        raise UnsafePickle(f"{module}.{name} is not plain data")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickle("persistent ids are not plain data")


def loads(data: bytes) -> Any:
    """``pickle.loads`` for plain data; :class:`UnsafePickle` names what is not."""
    return _PlainUnpickler(io.BytesIO(data)).load()


def dumps(value: Any) -> bytes:
    """``value`` pickled, if :func:`loads` takes it back; else :class:`UnsafePickle`."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    loads(data)
    return data
