"""torchao's quantization operators' fake outputs remembered in torch's fake dispatch,
so also inside ``run_decompositions``' retraces (symbolic sizes, a shape environment);
also ExecuTorch's ``EDGE_DO_NOT_DECOMP`` stand-ins for them, whose kernel they are
(:mod:`.targets`).

Torch's fake-tensor cache never answers these operators (outside its namespaces, or
CompositeImplicitAutograd): each call runs torchao's Python decomposition on fake
tensors. Here ``FakeTensorMode._dispatch_impl`` remembers a call by
:func:`..fake_outputs.quant_ops.call_key` (the operator; per argument its fake
metadata, sizes and strides as symbolic expressions, or its plain value; the fake
mode) and by the shape environment's whole state (:mod:`.shape_env`). A later call is
answered without the decomposition only when

* the key is the same, and the shape environment's state is the one the remembered call
  ran in, or that one grown only by unbacked symbols the inputs do not mention (a
  decoder's later layers, after the KV cache's ``item()`` calls; see
  :func:`.shape_env.grown_by_other_unbacked`), so the real call, a deterministic
  function of the key and of the state it reads, would do the same. The state so
  answered in replaces the remembered one: growth from it is growth from the first
  (its old entries unchanged, its new ones unbacked, unused symbols created since
  either), and the next comparison reads one layer's growth, not all of them; and
* the remembered call changed nothing in the shape environment (no guard, no deferred
  runtime assert, no new or narrowed symbol, no replacement), and
* its outputs are fresh fake tensors (no alias of an input or of each other, no view,
  offset 0, no data-dependent size) whose sizes :mod:`.outputs` can remake exactly,
  down to which ``SymNode`` objects are the inputs' own (the tracer maps objects).

Anything else runs the decomposition. ``FASTLOWER_RETRACE_QUANT_OPS``: ``on`` (the
default), ``off``, or ``verify`` (each remembered answer is also computed by the real
call, and :class:`RetraceQuantOpsVerificationError` is raised at the first difference
in outputs or in the shape environment; the real call's outputs go on).
"""

from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Dict, Iterator, Optional

from ..fake_outputs.quant_ops import call_key
from ..scoped_patch import ScopedMethodPatch
from .outputs import Template, remake, template
from ..shape_env_state import grown_by_other_unbacked, shape_env_state, state_difference
from .targets import runs_torchao_quant_op

__all__ = ["LAST", "PATCH", "RetraceQuantOpsVerificationError", "Memo", "remembering"]


class RetraceQuantOpsVerificationError(AssertionError):
    """``FASTLOWER_RETRACE_QUANT_OPS=verify``: a remembered answer differs from the
    real call's (its outputs, or what it does to the shape environment)."""

    def __init__(self, op: str, difference: str) -> None:
        super().__init__(f"{op}: the remembered fake outputs differ from the real call's: "
                         f"{difference}; set FASTLOWER_RETRACE_QUANT_OPS=off and please "
                         "report it")
        self.op = op
        self.difference = difference


class Memo:
    """One block's remembered calls and counts."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.calls: Dict[Any, Any] = {}  # key -> (state, Template) or None
        self.targets: Dict[int, Any] = {}
        self.reused = self.run = 0
        self.reused_by: Dict[Any, int] = {}  # operator -> answers without the real call


class LastCounts(threading.local):
    """This thread's last closed block's counts (reports, tests)."""

    def __init__(self) -> None:
        self.reused = self.run = 0
        self.reused_by: Dict[str, int] = {}  # by the operator's name


LAST = LastCounts()
_MEMO: ContextVar[Optional[Memo]] = ContextVar("fastlower_retrace_quant_ops", default=None)


def _state(mode: Any) -> Dict[str, Any]:
    env = mode.shape_env
    return {} if env is None else shape_env_state(env)


def _outputs_difference(real: Any, known: Any, leaves: list) -> Optional[str]:
    a, b = template(real, leaves), template(known, leaves)
    if a is None or b is None:
        return "an output that cannot be remade"
    if a.spec != b.spec or a.tensors != b.tensors:
        return f"{a.tensors} against {b.tensors}"
    return None


def _verified(self: Any, original: Callable[..., Any], call: tuple, leaves: list,
              known: Any, state: Dict[str, Any]) -> Any:
    func = call[0]
    after_known = _state(self)
    changed = state_difference(state, after_known)
    if changed:
        raise RetraceQuantOpsVerificationError(
            str(func), f"remaking the outputs changed the shape environment: {sorted(changed)}")
    real = original(self, *call)
    changed = state_difference(state, _state(self))
    if changed:
        raise RetraceQuantOpsVerificationError(
            str(func), f"the real call changed the shape environment: {sorted(changed)}")
    found = _outputs_difference(real, known, leaves)
    if found is not None:
        raise RetraceQuantOpsVerificationError(str(func), found)
    return real


def _remembering(original: Callable[..., Any]) -> Callable[..., Any]:
    def _dispatch_impl(self: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        memo = _MEMO.get()
        if memo is None or not _is_remembered(memo, func):
            return original(self, func, types, args, kwargs)
        import torch.utils._pytree as pytree

        key = call_key(func, args, kwargs)
        if key is None:
            memo.run += 1
            return original(self, func, types, args, kwargs)
        key = (key, id(self))
        leaves = pytree.tree_leaves((args, kwargs))
        state = _state(self)
        seen = memo.calls.get(key)
        if seen is not None and seen[0] != state:
            if not grown_by_other_unbacked(seen[0], state, _symbols(leaves)):
                seen = None
            else:  # the next call compares with this state: what grew since (see above)
                memo.calls[key] = (state, seen[1])
        if seen is not None:
            memo.reused += 1
            memo.reused_by[func] = memo.reused_by.get(func, 0) + 1
            known = remake(seen[1], self, leaves)
            if memo.mode != "verify":
                return known
            return _verified(self, original, (func, types, args, kwargs), leaves, known, state)
        memo.run += 1
        out = original(self, func, types, args, kwargs)
        if key not in memo.calls or memo.calls[key] is not None:
            found: Optional[Template] = template(out, leaves)
            unchanged = found is not None and not state_difference(state, _state(self))
            memo.calls[key] = (state, found) if unchanged else None
        return out

    return functools.wraps(original)(_dispatch_impl)


def _symbols(leaves: list) -> set:
    """The symbols the inputs' sizes, strides, offsets and symbolic ints mention."""
    import torch

    found: set = set()
    for leaf in leaves:
        values = ([*leaf.shape, *leaf.stride(), leaf.storage_offset()]
                  if isinstance(leaf, torch.Tensor) else [leaf])
        for value in values:
            if isinstance(value, torch.SymInt):
                found |= value.node.expr.free_symbols
    return found


def _is_remembered(memo: Memo, func: Any) -> bool:
    seen = memo.targets.get(id(func))
    if seen is None or seen[0] is not func:
        seen = (func, runs_torchao_quant_op(func))
        memo.targets[id(func)] = seen
    return bool(seen[1])


def _owner() -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode


PATCH = ScopedMethodPatch(_owner, "_dispatch_impl", _remembering)


@contextmanager
def remembering(mode: str) -> Iterator[Optional[Memo]]:
    """Inside the block (this thread or task), torchao's quantization operators' fake
    dispatch remembered as the module says; ``mode``: ``off``, ``on`` or ``verify``."""
    if mode == "off":
        yield None
        return
    memo = Memo(mode)
    try:
        with PATCH.active(_MEMO, memo):
            yield memo
    finally:
        LAST.reused, LAST.run = memo.reused, memo.run
        LAST.reused_by = {str(func): n for func, n in memo.reused_by.items()}
