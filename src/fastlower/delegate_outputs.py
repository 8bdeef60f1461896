"""A delegate's outputs read off its own program, not re-run on fake tensors, while
fastlower lowers.

ExecuTorch's ``ExportPass`` re-runs every node of a program on fake tensors to rebuild
its ``meta["val"]``; for a ``executorch_call_delegate`` node that means running the
delegate's whole original program (``lowered_module.original_module.module()``) again:
62% of ``to_executorch`` in ``export_llm``'s pipeline (``benchmarks/README.md``), as
``SpecPropPass`` and the other passes each do it for every delegate.

That run gives what the original program's own graph already records, when its inputs
are those the graph was traced with. So inside a :func:`known_outputs` block,
``ExportPass.call_delegate`` first compares the call's fake inputs with the original
program's user-input placeholders (``meta["val"]``: shapes and strides as symbolic
expressions, storage offset, dtype, device, layout, ``requires_grad``, the same fake
mode). When they agree it emits the node with the program's recorded user outputs, in
its output structure (``call_spec.out_spec``) and as the operator's autograd kernel
returns them (none requiring grad, or, when an input requires grad, detached aliases
that do), instead of running it. It runs ExecuTorch's code when they do not agree, or
when the run could differ from the record: a program whose graph holds a data-dependent
(unbacked) symbol (a run would make a new one), outputs other than user outputs or not
computed by the program, or a value that is not a fake tensor or a symbolic/plain int
(a real tensor input, for one).

``FASTLOWER_DELEGATE_OUTPUTS``: ``reuse`` (the default), ``run`` (ExecuTorch's way
throughout), ``verify`` (both, compared; :class:`DelegateOutputsVerificationError` at the
first difference). The patch on ``ExportPass.call_delegate`` is bound by the first
block and kept until :func:`uninstall`; outside a block (a context variable: this
thread or asyncio task) it runs ExecuTorch's method.
"""

from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from . import settings
from .scoped_patch import ScopedMethodPatch

__all__ = ["DelegateOutputsVerificationError", "LAST", "PATCH", "installed", "known_outputs",
           "uninstall"]


class DelegateOutputsVerificationError(AssertionError):
    """``FASTLOWER_DELEGATE_OUTPUTS=verify``: a delegate's recorded outputs differ from
    the ones its fake run gives."""

    def __init__(self, node: str, difference: str) -> None:
        super().__init__(
            f"delegate call {node!r}: its recorded outputs differ from its run's: "
            f"{difference}; set FASTLOWER_DELEGATE_OUTPUTS=run and please report it")
        self.node = node
        self.difference = difference


class _Scope:
    """One block's mode and what it learned of each lowered module (by id: a block
    ends before its programs can go)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.records: Dict[int, Tuple[Any, Optional["_Record"]]] = {}
        self.reused = 0
        self.run = 0


_SCOPE: ContextVar[Optional[_Scope]] = ContextVar("fastlower_delegate_outputs", default=None)


class LastCounts(threading.local):
    """This thread's last closed block: delegate calls whose outputs were reused, and
    calls run (for reports and tests)."""

    def __init__(self) -> None:
        self.reused = 0
        self.run = 0


LAST = LastCounts()


# --- what a delegate's original program records ------------------------------------------

class _Record:
    """The fake values of an original program's user inputs and user outputs, and its
    output structure."""

    def __init__(self, inputs: List[Any], outputs: List[Any], out_spec: Any) -> None:
        self.inputs = inputs
        self.outputs = outputs
        self.out_spec = out_spec


def _is_value(value: Any) -> bool:
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(value, (FakeTensor, torch.SymInt)) or type(value) is int


def _has_unbacked(graph: Any) -> bool:
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    return any(free_unbacked_symbols(node.meta.get("val")) for node in graph.nodes)


def _record(lowered_module: Any) -> Optional[_Record]:
    """What ``lowered_module``'s original program records, or None when a fake run of it
    could give anything else (see the module)."""
    from torch.export.graph_signature import InputKind, OutputKind

    program = getattr(lowered_module, "original_module", None)
    out_spec = getattr(getattr(program, "call_spec", None), "out_spec", None)
    if program is None or out_spec is None:
        return None
    signature = program.graph_signature
    if any(spec.kind != OutputKind.USER_OUTPUT for spec in signature.output_specs):
        return None
    graph = program.graph
    if _has_unbacked(graph):
        return None
    by_name = {node.name: node for node in graph.nodes if node.op == "placeholder"}
    names = [spec.arg.name for spec in signature.input_specs
             if spec.kind == InputKind.USER_INPUT]
    if any(name not in by_name for name in names):
        return None
    inputs = [by_name[name].meta.get("val") for name in names]
    output = graph.output_node()
    returned = output.args[0] if output.args else ()
    if not isinstance(returned, (tuple, list)) or not all(
            getattr(item, "op", None) == "call_function" for item in returned):
        return None  # an input or constant returned as it is: the run returns that object
    outputs = [item.meta.get("val") for item in returned]
    if not all(_is_value(value) for value in inputs + outputs):
        return None
    return _Record(inputs, outputs, out_spec)


# --- comparing fake values ---------------------------------------------------------------

def _int_key(value: Any) -> Any:
    import torch

    if isinstance(value, torch.SymInt):
        return ("sym", value.node.expr)
    return ("int", value)


def _difference(recorded: Any, given: Any) -> Optional[str]:
    """How two values' metadata differ (None: not at all)."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(recorded, FakeTensor) != isinstance(given, FakeTensor):
        return f"{type(recorded).__name__} against {type(given).__name__}"
    if not isinstance(recorded, FakeTensor):
        return None if _int_key(recorded) == _int_key(given) else f"{recorded} against {given}"
    if recorded.fake_mode is not given.fake_mode:
        return "another fake mode"
    fields = (("shape", lambda t: [_int_key(s) for s in t.shape]),
              ("stride", lambda t: [_int_key(s) for s in t.stride()]),
              ("storage offset", lambda t: _int_key(t.storage_offset())),
              ("dtype", lambda t: t.dtype), ("device", lambda t: t.device),
              ("layout", lambda t: t.layout), ("requires_grad", lambda t: t.requires_grad))
    for name, read in fields:
        if read(recorded) != read(given):
            return f"{name} {read(recorded)} against {read(given)}"
    return None


def _outputs_difference(known: Any, ran: Any) -> Optional[str]:
    import torch.utils._pytree as pytree

    known_leaves, known_spec = pytree.tree_flatten(known)
    ran_leaves, ran_spec = pytree.tree_flatten(ran)
    if known_spec != ran_spec:
        return f"structure {known_spec} against {ran_spec}"
    for index, (a, b) in enumerate(zip(known_leaves, ran_leaves)):
        difference = _difference(a, b)
        if difference is not None:
            return f"output {index}: {difference}"
    return None


# --- the patched method --------------------------------------------------------------------

def _known(scope: _Scope, lowered_module: Any, args: Tuple[Any, ...]) -> Optional[Any]:
    """The call's outputs as the original program records them, or None: run it."""
    import torch
    import torch.utils._pytree as pytree
    from executorch.exir.pass_base import ProxyValue

    cached = scope.records.get(id(lowered_module))
    if cached is None or cached[0] is not lowered_module:
        cached = (lowered_module, _record(lowered_module))
        scope.records[id(lowered_module)] = cached
    record = cached[1]
    if record is None or len(args) != len(record.inputs):
        return None
    given = [arg.data if isinstance(arg, ProxyValue) else arg for arg in args]
    for value, recorded in zip(given, record.inputs):
        if not _is_value(value) or _difference(recorded, value) is not None:
            return None
    outputs = pytree.tree_unflatten(list(record.outputs), record.out_spec)
    graded = any(isinstance(value, torch.Tensor) and value.requires_grad for value in given)
    return _as_autograd_gives(outputs, graded)


def _as_autograd_gives(outputs: Any, graded: bool) -> Any:
    """The recorded outputs as the operator's autograd kernel returns them
    (``torch/_higher_order_ops/executorch_call_delegate.py``, ``call_delegate_autograd``):
    the program runs with autograd excluded, so none requires grad; when an input
    does (``graded``), each is a detached alias, floating and complex ones requiring
    grad."""
    import torch
    import torch.utils._pytree as pytree

    def as_run(var: Any) -> Any:
        if graded:
            var = var.detach()
            if torch.is_floating_point(var) or torch.is_complex(var):
                var.requires_grad = True
        elif var.requires_grad:  # recorded by a trace with autograd on
            var = var.detach()
        return var

    with torch._C._ExcludeDispatchKeyGuard(
            torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradCPU)):
        return pytree.tree_map_only(torch.Tensor, as_run, outputs)


def _emit(self: Any, lowered_module: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
          meta: Any, data: Any) -> Any:
    """What ``ExportPass._fx`` does for the call, with ``data`` as the run's result."""
    import torch.utils._pytree as pytree
    from executorch.exir.delegate import executorch_call_delegate
    from executorch.exir.pass_base import ProxyValue

    args_proxy, kwargs_proxy = pytree.tree_map_only(
        ProxyValue, lambda x: x.proxy, ((lowered_module,) + tuple(args), kwargs))
    proxy = self.tracer.create_proxy("call_function", executorch_call_delegate, args_proxy,
                                     kwargs_proxy, name=None)
    proxy.node.meta.update(meta.data)
    self.tracer.set_metadata(proxy.node, data)
    return ProxyValue(data, proxy)


def _reusing_call_delegate(original: Callable[..., Any]) -> Callable[..., Any]:
    def call_delegate(self: Any, lowered_module: Any, args: Tuple[Any, ...],
                      kwargs: Dict[str, Any], meta: Any) -> Any:
        scope = _SCOPE.get()
        known = None
        if scope is not None and not kwargs and type(self)._fx is _export_pass_fx():
            known = _known(scope, lowered_module, args)
        if known is None:
            if scope is not None:
                scope.run += 1
            return original(self, lowered_module, args, kwargs, meta)
        if scope is not None and scope.mode == "verify":
            result = original(self, lowered_module, args, kwargs, meta)
            difference = _outputs_difference(known, result.data)
            if difference is not None:
                raise DelegateOutputsVerificationError(result.proxy.node.name, difference)
            scope.reused += 1
            return result
        scope.reused += 1  # type: ignore[union-attr]
        return _emit(self, lowered_module, args, kwargs, meta, known)

    return functools.wraps(original)(call_delegate)


@functools.lru_cache(maxsize=None)
def _export_pass_fx() -> Any:
    from executorch.exir.pass_base import _ExportPassBase

    return _ExportPassBase._fx


def _owner() -> Any:
    from executorch.exir.pass_base import ExportPass

    return ExportPass


PATCH = ScopedMethodPatch(_owner, "call_delegate", _reusing_call_delegate)
installed = PATCH.installed
uninstall = PATCH.uninstall


@contextmanager
def known_outputs() -> Iterator[Optional[_Scope]]:
    """Inside the block, in this thread or task, a delegate call's outputs are read off
    its original program when they provably equal a fake run's (see the module).
    Yields the block's counts (``reused``, ``run``), or None with
    ``FASTLOWER_DELEGATE_OUTPUTS=run``. Blocks nest (each counts its own calls)."""
    mode = settings.delegate_outputs()
    if mode == "run":
        yield None
        return
    PATCH.install()
    scope = _Scope(mode)
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)
        LAST.reused, LAST.run = scope.reused, scope.run
