"""An operator called again with inputs torch's fake-tensor cache cannot tell apart from
an earlier call's, in the same lowering step: the earlier call's outputs, not a new run.

ExecuTorch runs its passes one after the other (``_generate_edge_program`` a dozen
``ExportPass``es, ``to_executorch`` more), and each re-runs every node on fake tensors
(``_ExportPassBase._fx``): a node a pass leaves as it was calls the same operator on
inputs with the same metadata as in the pass before. torch's fake-tensor cache answers
most such calls, but still builds new output tensors each time, and its dispatch costs
more than the answer: at 6 layers of ``export_llm``'s program two thirds of such a pass.

**Premise.** torch's fake-tensor cache (``FakeTensorMode._cache_key`` and
``_validate_cache_key``) holds that two calls with the same key give outputs with the same
metadata; its key is the operator, each fake tensor's metadata (sizes and strides as
symbolic expressions, storage offset, dtype, device, ``requires_grad``...), each symbolic
size's expression, the plain values, the default dtype and device, inference mode, the
shape environment's settings and epoch. With grad mode added (autograd, above the fake
mode, sets an output's ``requires_grad``), the earlier call's output tensors are what a new
run would build, and giving the objects themselves instead of new ones changes nothing a
later node can see when they alias no input or each other, hold no data-dependent
(unbacked) symbol, nothing wrote to them since (a write retires them), and no later
operator left state on them: torch's fake tensors keep, on the object, the symbol a
data-dependent operator made for it (``item()``, ``nonzero``, ``unique``), and give it again
for the same object where a new one gets a new symbol, as each of ExecuTorch's passes
does (:func:`.compare.carried_state`).

A call answered advances this thread's autograd sequence number as its run did (one real
view of an empty tensor per autograd node the run made): torch.fx writes that number into
each new node's ``seq_nr``, so later nodes are numbered as in ExecuTorch. torch's
deprecated pass base (under ``ReplaceViewOpsWithViewCopyOpsPass``) is served alike;
:mod:`.emit` takes its steps.

**Not taken** (the operator runs as ExecuTorch runs it):

* what torch's cache does not take: data-dependent or dynamic-shape operators, in-place
  views, non-builtin operators, a real or constant tensor, a symbolic bool or float,
  another fake mode; a target that is not an ``OpOverload`` (or an Edge operator over
  one: it counts as the ATen operator it calls). torchao's quantization operators, which
  torch's cache does not take, are keyed as :mod:`.quant_ops` keys them (its premise);
* an operator whose schema writes to an argument; its arguments are retired;
* outputs that alias an input or each other, hold an unbacked symbol, or are not fake
  tensors, ints, symbolic ints or None;
* outputs a later operator left a memo on (an ``item()`` of them in an earlier pass);
* a pass's graph takes each remembered output once: a further call with the same key runs,
  and its outputs are remembered beside the others. An output taken by a graph still being
  built (a higher-order operator's subgraph and its parent) is not taken by another.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

from .compare import FakeOutputsVerificationError, carried_state_in, outputs_difference
from .emit import emit, proxy_value_class

__all__ = ["Repeats", "call"]


class _Slot:
    """One remembered call's outputs, the graph (its tracer) that took them last, and how
    many autograd nodes the call made (autograd's sequence number, which torch.fx writes
    into a new node's ``seq_nr``, advances by that much)."""

    __slots__ = ("outputs", "leaves", "taker", "autograd_nodes")

    def __init__(self, outputs: Any, leaves: List[Any], taker: Any, autograd_nodes: int) -> None:
        self.outputs = outputs
        self.leaves = leaves
        self.taker = weakref.ref(taker)
        self.autograd_nodes = autograd_nodes


@functools.lru_cache(maxsize=None)
def _autograd_seed() -> Any:
    import torch

    return torch.empty(0, requires_grad=True)


def _advance_autograd(nodes: int) -> None:
    """Advance this thread's autograd sequence number as ``nodes`` autograd nodes would
    (one real view each, outside any mode)."""
    if nodes <= 0:
        return
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    seed = _autograd_seed()
    with _disable_current_modes(), torch.enable_grad():
        for _ in range(nodes):
            seed.view_as(seed)


class Repeats:
    """One lowering step's remembered calls: per key, the outputs of each call in the
    order made, and the objects a writing operator retired."""

    def __init__(self) -> None:
        self.slots: Dict[Any, List[_Slot]] = {}
        self.retired: Dict[int, Any] = {}


def _operator(target: Any) -> Tuple[Any, bool]:
    """The ATen operator ``target`` runs (None: not taken) and whether it writes to an
    argument."""
    import torch
    from executorch.exir.dialects.edge._ops import EdgeOpOverload

    if type(target) is EdgeOpOverload:
        target = target._op
    if type(target) is not torch._ops.OpOverload:
        return None, False
    return target, any(argument.alias_info is not None and argument.alias_info.is_write
                       for argument in target._schema.arguments)


def _key(mode: Any, op: Any, args: Any, kwargs: Any) -> Optional[Tuple[Any, ...]]:
    """torch's fake-tensor cache key of the call, with grad mode; None where torch's
    cache would not take the call."""
    import torch
    from torch._subclasses.fake_tensor import _BypassDispatchCache, _CacheKeyState

    if mode is None or not mode.cache_enabled:
        return None
    try:
        mode._validate_cache_key(op, args, kwargs)
        key = mode._cache_key(_CacheKeyState(mode.shape_env), op, args, kwargs)
    except _BypassDispatchCache:
        return None
    return key, torch.is_grad_enabled(), id(mode)


def _rememberable(outputs: Any, inputs: Any) -> Optional[List[Any]]:
    """The outputs' leaves when a later call may be given them (fake tensors of their own
    storage, sharing it with no input and no other output; ints; None), else None."""
    import torch
    import torch.utils._pytree as pytree
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    leaves = pytree.tree_leaves(outputs)
    storages = set()
    for leaf in leaves:
        kind = type(leaf)
        if kind is FakeTensor:
            if leaf.constant is not None or leaf._base is not None:
                return None
            storage = leaf.untyped_storage()._cdata
            if storage in storages:
                return None
            storages.add(storage)
        elif not (leaf is None or kind is int or kind is torch.SymInt):
            return None
        if kind is not type(None) and free_unbacked_symbols(leaf):
            return None
    if storages and any(isinstance(leaf, FakeTensor) and leaf.untyped_storage()._cdata
                        in storages for leaf in pytree.tree_leaves(inputs)):
        return None
    return leaves


# the guard of _free_slot (tests replace it alone to see verify mode find what it stops)
_carries_state = carried_state_in


def _free_slot(repeats: Repeats, key: Any) -> Optional[_Slot]:
    """The first slot of ``key`` no graph still being built has taken (its tracer gone),
    no write retired and no later operator left a memo on."""
    retired = repeats.retired
    for slot in repeats.slots.get(key, ()):
        if slot.taker() is None and (
                not retired or not any(id(leaf) in retired for leaf in slot.leaves)) \
                and not _carries_state(slot.leaves):
            return slot
    return None


def call(pass_: Any, scope: Any, target: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
         meta: Any, run: Callable[[], Any],
         other_key: Callable[[Any, Any, Any], Optional[Tuple[Any, ...]]]) -> Any:
    """The node for ``target(*args, **kwargs)`` in ``pass_``'s new graph: with an earlier
    call's outputs when the call repeats one (see the module), else ``run()``'s.
    ``other_key(target, args, kwargs)`` keys a call torch's cache does not take (None: it
    runs)."""
    import torch
    import torch.utils._pytree as pytree

    op, writes = _operator(target)
    if op is None:
        return run()
    args_data, kwargs_data = pytree.tree_map_only(
        proxy_value_class(pass_), lambda x: x.data, (args, kwargs))
    repeats: Repeats = scope.repeats
    if writes:
        result = run()
        for leaf in pytree.tree_leaves((args_data, kwargs_data)):
            repeats.retired[id(leaf)] = leaf
        return result
    key = _key(pass_.fake_tensor_mode, op, args_data, kwargs_data)
    if key is None:
        key = other_key(target, args_data, kwargs_data)
        if key is None:
            return run()
    tracer = pass_.tracer
    slot = _free_slot(repeats, key)
    if slot is not None:
        slot.taker = weakref.ref(tracer)
        scope.repeats_reused += 1
        if scope.mode == "verify":
            return _verified(pass_, slot.outputs, run)
        _advance_autograd(slot.autograd_nodes)
        return emit(pass_, "call_function", target, args, kwargs, meta, slot.outputs)
    sequence = torch.autograd._get_sequence_nr()
    result = run()
    scope.repeats_run += 1
    leaves = _rememberable(result.data, (args_data, kwargs_data))
    if leaves is not None:
        repeats.slots.setdefault(key, []).append(_Slot(
            result.data, leaves, tracer, torch.autograd._get_sequence_nr() - sequence))
    return result


def _verified(pass_: Any, data: Any, run: Callable[[], Any]) -> Any:
    """Verify mode: the call run, its outputs compared with ``data`` and the shape
    environment checked unchanged by it, and the outputs checked to carry nothing a new
    run's would not (:func:`.compare.carried_state`)."""
    import torch.utils._pytree as pytree

    from ..shape_env_state import shape_env_changes

    env = pass_.fake_tensor_mode.shape_env if pass_.fake_tensor_mode is not None else None
    if env is None:
        result = run()
        changed: set = set()
    else:
        with shape_env_changes(env) as changed:
            result = run()
    found = outputs_difference(data, result.data)
    if found is None and (carried := carried_state_in(pytree.tree_leaves(data))) is not None:
        found = f"the outputs given again carry {carried}"
    if found is None and changed:
        found = f"running it again changed the shape environment's {sorted(changed)}"
    if found is not None:
        raise FakeOutputsVerificationError(result.proxy.node.name, found)
    return result
