"""Fake tensors and symbolic sizes of cached programs: what they were, and the same again.

Edge programs keep a ``FakeTensor`` in every node's ``meta["val"]``; with dynamic
shapes (``export_llm``) its sizes are ``SymInt``s over the symbols of a
``ShapeEnv`` (``s27``, ``u0``), whose ranges and hints later passes read
(``to_executorch``'s memory planning takes each size's upper bound from the
symbol's range). Neither pickles. :class:`SymbolicWriter` turns each into plain
data, describing every symbol once, at its first use: its ``sympy`` form
(assumptions included), range, hint and replacement. :class:`SymbolicReader`
builds one ``ShapeEnv`` and one ``FakeTensorMode`` for a whole cached lowering,
enters each symbol as it is described and makes each ``SymInt`` and fake tensor
anew, with the same expressions, sizes, strides, dtype and device.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

import sympy
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.sym_node import SymNode
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.utils._sympy.value_ranges import ValueRanges

from .errors import Uncacheable

_SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


@dataclasses.dataclass
class SymbolRecord:
    """One symbol of a ``ShapeEnv``: everything a later pass may ask about it."""

    symbol: sympy.Symbol
    lower: Any = None
    upper: Any = None
    is_bool: bool = False
    backed_hint: Any = None
    replacement: Any = None


@dataclasses.dataclass
class SymRecord:
    """A ``SymInt``/``SymFloat``/``SymBool``: its expression, hint and constant."""

    kind: str  # "int" | "float" | "bool"
    expr: Any
    hint: Any
    constant: Any
    new_symbols: List[SymbolRecord]


@dataclasses.dataclass
class FakeRecord:
    """A fake tensor: sizes, strides and offset (ints or :class:`SymRecord`s) and the rest."""

    sizes: Tuple[Any, ...]
    strides: Tuple[Any, ...]
    offset: Any
    dtype: torch.dtype
    device: str
    requires_grad: bool
    constant: Optional[torch.Tensor] = None


_KINDS = {torch.SymInt: "int", torch.SymFloat: "float", torch.SymBool: "bool"}
_PYTYPES = {"int": int, "float": float, "bool": bool}
_WRAPPERS = {"int": torch.SymInt, "float": torch.SymFloat, "bool": torch.SymBool}


class SymbolicWriter:
    """Describes fake tensors and symbolic values as records (symbols once each)."""

    def __init__(self) -> None:
        self.described: Dict[sympy.Symbol, None] = {}
        self.settings: Optional[Dict[str, Any]] = None
        self.mode_flags: Optional[Dict[str, Any]] = None

    def _env_settings(self, env: Optional[ShapeEnv]) -> None:
        if env is None or self.settings is not None:
            return
        self.settings = {f.name: getattr(env.settings, f.name)
                         for f in dataclasses.fields(env.settings)}

    def _symbols(self, expr: Any, env: Optional[ShapeEnv]) -> List[SymbolRecord]:
        records = []
        free = getattr(expr, "free_symbols", ())
        for symbol in sorted(free, key=str):
            if symbol in self.described:
                continue
            self.described[symbol] = None
            record = SymbolRecord(symbol)
            if env is not None:
                vr = env.var_to_range.get(symbol)
                if vr is not None:
                    record.lower, record.upper, record.is_bool = vr.lower, vr.upper, vr.is_bool
                record.backed_hint = env.backed_var_to_val.get(symbol)
                record.replacement = env.replacements.get(symbol)
                if record.replacement is not None:
                    records.extend(self._symbols(record.replacement, env))
            records.append(record)
        return records

    def sym(self, value: Any) -> SymRecord:
        node = value.node
        if not isinstance(node, SymNode):
            raise Uncacheable(f"a symbolic value of node type {type(node).__name__}")
        env = node.shape_env
        self._env_settings(env)
        expr = node.expr  # replacements applied (an unbacked u93 renamed to u2)
        return SymRecord(_KINDS[type(value)], expr, getattr(node, "_hint", None),
                         getattr(node, "constant", None), self._symbols(expr, env))

    def size(self, value: Any) -> Any:
        return self.sym(value) if isinstance(value, _SYM_TYPES) else int(value)

    def fake(self, tensor: FakeTensor) -> FakeRecord:
        if tensor.layout != torch.strided or tensor.is_quantized or tensor.is_sparse:
            raise Uncacheable(f"a fake tensor with layout {tensor.layout} / dtype {tensor.dtype}")
        if type(tensor) is not FakeTensor:
            raise Uncacheable(f"a fake tensor of type {type(tensor).__qualname__}")
        mode = tensor.fake_mode
        if self.mode_flags is None:
            self.mode_flags = {"allow_fallback_kernels": mode.allow_fallback_kernels,
                               "allow_non_fake_inputs": mode.allow_non_fake_inputs,
                               "static_shapes": mode.static_shapes,
                               "export": getattr(mode, "export", False)}
        self._env_settings(mode.shape_env)
        constant = getattr(tensor, "constant", None)
        return FakeRecord(tuple(self.size(s) for s in tensor.shape),
                          tuple(self.size(s) for s in tensor.stride()),
                          self.size(tensor.storage_offset()), tensor.dtype,
                          str(tensor.fake_device), bool(tensor.requires_grad),
                          constant if isinstance(constant, torch.Tensor) else None)

    def state(self) -> Dict[str, Any]:
        """What the reader needs before the first record: the ShapeEnv and mode settings."""
        return {"settings": self.settings, "mode": self.mode_flags}


class SymbolicReader:
    """Builds the shared ``ShapeEnv`` / ``FakeTensorMode`` and the values of the records."""

    def __init__(self, state: Dict[str, Any]) -> None:
        settings = dict(state.get("settings") or {})
        self.env = ShapeEnv(**settings)
        flags = dict(state.get("mode") or {"allow_non_fake_inputs": True})
        self.mode = FakeTensorMode(shape_env=self.env, **flags)
        self.metas: Dict[Tuple[Any, ...], torch.Tensor] = {}

    def _enter(self, record: SymbolRecord) -> None:
        env, symbol = self.env, record.symbol
        if record.lower is not None:
            env.var_to_range[symbol] = ValueRanges(record.lower, record.upper)
        if record.backed_hint is not None:
            env.backed_var_to_val[symbol] = record.backed_hint
        if record.replacement is not None:
            env.replacements[symbol] = record.replacement

    def sym(self, record: SymRecord) -> Any:
        for symbol in record.new_symbols:
            self._enter(symbol)
        pytype = _PYTYPES[record.kind]
        node = SymNode(record.expr, self.env, pytype, record.hint, constant=record.constant)
        return _WRAPPERS[record.kind](node)

    def size(self, value: Any) -> Any:
        return self.sym(value) if isinstance(value, SymRecord) else value

    def fake(self, record: FakeRecord) -> FakeTensor:
        sizes = tuple(self.size(s) for s in record.sizes)
        strides = tuple(self.size(s) for s in record.strides)
        offset = self.size(record.offset)
        # A meta tensor wrapped as the mode wraps its kernels' outputs (~15x faster than
        # dispatching empty_strided through the mode), one meta tensor per layout: with
        # symbolic sizes, making it is symbolic arithmetic, and thousands of values of a
        # program share a few layouts. Each fake tensor is still its own tensor.
        layout = (_layout_key(record.sizes), _layout_key(record.strides),
                  _layout_key((record.offset,)), record.dtype)
        meta = self.metas.get(layout)
        if meta is None:
            meta = torch.empty_strided(sizes, strides, dtype=record.dtype, device="meta")
            if not (isinstance(offset, int) and offset == 0):
                meta = meta.as_strided(sizes, strides, offset)
            self.metas[layout] = meta
        tensor = FakeTensor(self.mode, meta, torch.device(record.device))
        if record.requires_grad:
            tensor.requires_grad_(True)
        if record.constant is not None:
            tensor.constant = record.constant
        return tensor


def _layout_key(values: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """Sizes (ints, :class:`SymRecord`s) as a hashable key: a symbolic size by its
    expression, hint and constant (its new symbols were entered when it was read)."""
    return tuple((v.kind, v.expr, v.hint, v.constant) if isinstance(v, SymRecord) else v
                 for v in values)
