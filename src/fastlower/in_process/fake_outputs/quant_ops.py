"""A quantization operator's fake outputs remembered by its inputs' metadata, not
recomputed by each of ExecuTorch's passes.

Every ``ExportPass`` re-runs each node on fake tensors to rebuild its ``meta["val"]``.
torchao's quantization primitives (``choose_qparams_affine``, ``quantize_affine``,
``dequantize_affine``, ...) have no fake kernel: each run is their Python decomposition
on fake tensors, with symbolic-size arithmetic, 8.4 s of ``_generate_edge_program``'s
passes in ``export_llm``'s pipeline at stories110M size (py-spy), where a decoder makes
the same calls with the same input metadata in every layer and every pass.

Inside a ``known_outputs`` block, ``_ExportPassBase._fx`` runs such an operator once per
key: the operator, and per argument its fake metadata (shapes and strides as symbolic
expressions, storage offset, dtype, device, ``requires_grad``, fake mode) or its plain
value (ints, floats by ``repr``, bools, strings, dtypes, enums, ``None``). A later call
with the same key gets fresh fake tensors with the first run's metadata
(``torch.empty_strided`` in the same fake mode; where an output was a view of a tensor
of its own, a view of a new such tensor; where autograd recorded an output or its base,
one recorded too, so that it is not a leaf either). The key also holds whether grad mode
is on, which decides ``requires_grad``. It runs the operator when an argument or output
is anything else, when an output shares storage with an input or another output, when
an output's size holds a data-dependent (unbacked) symbol, or when a trial remake of the
first run's outputs differs from them in anything a later node can see (:func:`_same`).
"""

from __future__ import annotations

import enum
import functools
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..scoped_patch import ScopedMethodPatch
from .compare import FakeOutputsVerificationError, int_key, outputs_difference
from . import repeated
from .emit import emit, proxy_value_class
from .scope import current

__all__ = ["PATCH", "TORCH_PATCH", "remembered"]

_PLAIN = (int, float, bool, str, type(None))


def remembered(target: Any) -> bool:
    """Whether calls of ``target`` are remembered (torchao's quantization operators,
    as ATen or Edge operators)."""
    return "torchao." in str(target)


def _leaf_key(value: Any) -> Optional[Any]:
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(value, FakeTensor):
        return ("tensor", tuple(int_key(s) for s in value.shape),
                tuple(int_key(s) for s in value.stride()), int_key(value.storage_offset()),
                value.dtype, value.device, value.layout, value.requires_grad,
                id(value.fake_mode))
    if isinstance(value, torch.SymInt):
        return int_key(value)
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return (type(value).__name__, str(value))
    if isinstance(value, enum.Enum):
        return (type(value).__qualname__, value.name)
    if isinstance(value, _PLAIN):
        return (type(value).__name__, repr(value))
    return None  # a real tensor or anything else: not remembered


def call_key(target: Any, args: Any, kwargs: Any) -> Optional[Tuple[Any, ...]]:
    """The call's key, or None when an argument cannot be part of one."""
    import torch.utils._pytree as pytree

    leaves, spec = pytree.tree_flatten((args, kwargs))
    keys: List[Any] = []
    for leaf in leaves:
        key = _leaf_key(leaf)
        if key is None:
            return None
        keys.append(key)
    return (id(target), str(spec), tuple(keys))


class _Template:
    """The first run's outputs: per tensor, what a fresh one needs."""

    def __init__(self, mode: Any, tensors: List[Any], spec: Any) -> None:
        self.mode = mode
        self.tensors = tensors
        self.spec = spec


def _tensor_spec(leaf: Any) -> Tuple[Any, ...]:
    return (tuple(leaf.shape), tuple(leaf.stride()), leaf.storage_offset(), leaf.dtype,
            leaf.device, leaf.requires_grad, leaf.is_leaf)


def _template(outputs: Any, inputs: Any) -> Optional[_Template]:
    """What the outputs are made of, or None when a fresh copy could differ."""
    import torch.utils._pytree as pytree
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    from torch.multiprocessing.reductions import StorageWeakRef

    leaves, spec = pytree.tree_flatten(outputs)
    if not leaves or not all(isinstance(leaf, FakeTensor) for leaf in leaves):
        return None
    taken = {StorageWeakRef(leaf.untyped_storage())
             for leaf in pytree.tree_leaves(inputs) if isinstance(leaf, FakeTensor)}
    tensors: List[Tuple[Tuple[Any, ...], Optional[Tuple[Any, ...]]]] = []
    for leaf in leaves:
        storage = StorageWeakRef(leaf.untyped_storage())
        if free_unbacked_symbols(leaf) or storage in taken:
            return None  # a new unbacked symbol per run, or an alias of an input or output
        taken.add(storage)
        base = leaf._base
        if base is None and leaf.storage_offset() == 0:
            tensors.append((_tensor_spec(leaf), None))
        elif base is not None and base._base is None and base.storage_offset() == 0:
            tensors.append((_tensor_spec(leaf), _tensor_spec(base)))  # a view of its own
        else:
            return None
    modes = {id(leaf.fake_mode) for leaf in leaves}
    if len(modes) != 1:
        return None
    made = _Template(leaves[0].fake_mode, tensors, spec)
    return made if _same(_fresh(made), outputs) else None


def _same(made: Any, outputs: Any) -> bool:
    """Whether remade outputs are the first run's in all a later node can see: the
    metadata :mod:`.compare` compares, whether each output and its base were recorded
    by autograd, and each base's own metadata."""
    import torch.utils._pytree as pytree

    if outputs_difference(made, outputs) is not None:
        return False
    for a, b in zip(pytree.tree_leaves(made), pytree.tree_leaves(outputs)):
        if a.is_leaf != b.is_leaf:
            return False
        if a._base is not None and _tensor_spec(a._base) != _tensor_spec(b._base):
            return False
    return True


def _new(spec: Tuple[Any, ...]) -> Any:
    """A tensor of its own with ``spec``'s metadata (in the current fake mode): one
    autograd recorded (a clone) where the spec's was not a leaf."""
    import torch

    shape, stride, _, dtype, device, requires_grad, is_leaf = spec
    tensor = torch.empty_strided(shape, stride, dtype=dtype, device=device)
    if requires_grad:
        tensor.requires_grad_(True)
        if not is_leaf:
            tensor = tensor.clone()
    return tensor


def _fresh(template: _Template) -> Any:
    """New fake tensors like the template's (a view of a new base where it was one)."""
    import torch.utils._pytree as pytree

    made = []
    with template.mode:
        for spec, base in template.tensors:
            if base is None:
                made.append(_new(spec))
            else:
                shape, stride, offset = spec[:3]
                made.append(_new(base).as_strided(shape, stride, offset))
    return pytree.tree_unflatten(made, template.spec)


def _grad_mode() -> Tuple[bool, bool]:
    import torch

    return torch.is_grad_enabled(), torch.is_inference_mode_enabled()


def _remembering_fx(original: Callable[..., Any]) -> Callable[..., Any]:
    """A pass base's ``_fx`` (ExecuTorch's or torch's) inside a block: a call repeated on
    the same fake tensors (:mod:`.repeated`), else a quantization operator remembered,
    else the base's own."""
    def _fx(self: Any, kind: str, target: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
            meta: Any) -> Any:
        scope = current()
        if scope is None or kind != "call_function":
            return original(self, kind, target, args, kwargs, meta)
        return repeated.call(self, scope, target, args, kwargs, meta, lambda: _quant_op(
            self, scope, original, target, args, kwargs, meta), functools.partial(
                _repeat_key, scope))

    return functools.wraps(original)(_fx)


def _repeat_key(scope: Any, target: Any, args: Any, kwargs: Any) -> Optional[Tuple[Any, ...]]:
    """A quantization operator's key for :mod:`.repeated` (torch's cache does not take
    torchao's operators; this module's premise covers them), with grad mode; else None."""
    if not scope.by_object(scope.op_targets, target, remembered):
        return None
    key = call_key(target, args, kwargs)
    return None if key is None else ("torchao", key, _grad_mode())


def _quant_op(self: Any, scope: Any, original: Callable[..., Any], target: Any,
              args: Tuple[Any, ...], kwargs: Dict[str, Any], meta: Any) -> Any:
    """A quantization operator's call with outputs like its first run's, or ExecuTorch's."""
    kind = "call_function"
    if not scope.by_object(scope.op_targets, target, remembered):
        return original(self, kind, target, args, kwargs, meta)
    import torch.utils._pytree as pytree

    args_data, kwargs_data = pytree.tree_map_only(
        proxy_value_class(self), lambda x: x.data, (args, kwargs))
    key = call_key(target, args_data, kwargs_data)
    if key is not None:
        key = (key, _grad_mode())
    template = scope.op_outputs.get(key) if key is not None else None
    if not template:  # not seen, or its outputs could not be remade
        scope.ops_run += 1
        result = original(self, kind, target, args, kwargs, meta)
        if key is not None and key not in scope.op_outputs:
            scope.op_outputs[key] = _template(result.data, (args_data, kwargs_data)) or False
        return result
    scope.ops_reused += 1
    data = _fresh(template)
    if scope.mode == "verify":
        result = original(self, kind, target, args, kwargs, meta)
        found = outputs_difference(data, result.data)
        if found is not None:
            raise FakeOutputsVerificationError(result.proxy.node.name, found)
        return result
    return emit(self, kind, target, args, kwargs, meta, data)


def _owner() -> Any:
    from executorch.exir.pass_base import _ExportPassBase

    return _ExportPassBase


def _torch_owner() -> Any:
    from torch._export.pass_base import _ExportPassBaseDeprecatedDoNotUse

    return _ExportPassBaseDeprecatedDoNotUse


PATCH = ScopedMethodPatch(_owner, "_fx", _remembering_fx)
# torch's pass base, under ExecuTorch's ReplaceViewOpsWithViewCopyOpsPass (the edge
# stage's first pass): the same, with torch's ProxyValue and unbacked bindings (.emit)
TORCH_PATCH = ScopedMethodPatch(_torch_owner, "_fx", _remembering_fx)
