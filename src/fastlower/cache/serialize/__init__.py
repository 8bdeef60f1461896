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
* **Large ``bytes``** (``writer.BLOB_MIN_BYTES`` or more: delegate payloads, a
  ``.pte``) by reference too, each object once, written after the storages and read
  back into one ``bytes`` object each: the pickle never holds a copy of them, so
  neither writing nor reading an entry holds them twice (nor does one object met
  in several places: the ``.pte``'s pieces that are the emitter's constant buffers).
* ``torch.fx.Node`` anywhere else (in a ``meta`` value) has no stable form: the
  lowering is not cached (:class:`~fastlower.cache.errors.Uncacheable`).

``LoweredBackendModule``, graph signatures, compile specs, named data and the
rest pickle as they are.

The package, by concern: :mod:`.writer` (the pickler and its persistent ids, the
storage table), :mod:`.reader` (the unpickler rebuilding each persistent id),
:mod:`.graphs` (an FX graph module as a :class:`~.graphs.GraphRecord` and back) and
:mod:`.named` (operators, Edge verifiers and ExecuTorch's ``_ViewSpec``: kept as the
name or settings that make them again). This module is the API: :func:`dumps`,
:func:`loads`, :class:`Serialized`.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Union

import torch

from ..errors import Uncacheable
from ..skim import Skim, Skimmed
from ..symbolic import SymbolicReader
from .reader import Reader
from .writer import Writer

__all__ = ["Serialized", "dumps", "loads"]


@dataclass
class Serialized:
    """A pickled object graph and the storages it refers to (written after it)."""

    header: Dict[str, Any]  # the reader's state: ShapeEnv / FakeTensorMode settings
    pickled: bytes
    storages: List[memoryview]
    blobs: List[bytes]


def dumps(obj: Any) -> Serialized:
    """``obj`` (anything holding programs, modules, tensors) as :class:`Serialized`.

    :class:`~fastlower.cache.errors.Uncacheable` when something in it has no faithful form.
    """
    buffer = io.BytesIO()
    writer = Writer(buffer)
    try:
        writer.dump(obj)
    except Uncacheable:
        raise
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:
        where = f" (at node {writer.current_node!r})" if writer.current_node else ""
        raise Uncacheable(f"the lowered programs do not serialize{where}: {exc}") from exc
    return Serialized(writer.symbolic.state(), buffer.getvalue(), writer.storages.buffers(),
                      writer.blobs.blobs)


def loads(header: Dict[str, Any], pickled: bytes,
          storages: Sequence[Union[torch.Tensor, bytearray, memoryview, Skimmed]],
          blobs: Sequence[bytes] = (), skim: Optional[Skim] = None) -> Any:
    """The object :func:`dumps` was given, rebuilt;
    :class:`~fastlower.cache.errors.DamagedEntry` if not. The tensors are views of
    ``storages`` (``uint8`` tensors, or buffers: no copy either way); those of a
    :class:`~fastlower.cache.skim.Skimmed` storage are meta placeholders, listed in ``skim``."""
    symbolic = SymbolicReader(header)
    untyped: List[torch.UntypedStorage] = []
    skimmed: Dict[int, Skimmed] = {}
    for data in storages:
        if isinstance(data, Skimmed):
            skimmed[len(untyped)] = data
            untyped.append(torch.UntypedStorage(data.size, device="meta"))
        elif isinstance(data, torch.Tensor):
            untyped.append(data.untyped_storage())
        elif len(data):
            untyped.append(torch.frombuffer(data, dtype=torch.uint8).untyped_storage())
        else:
            untyped.append(torch.UntypedStorage(0))
    reader = Reader(io.BytesIO(pickled), untyped, symbolic, blobs)
    if skimmed:
        reader.skim(skimmed, skim or Skim(frozenset()))
    return reader.load()
