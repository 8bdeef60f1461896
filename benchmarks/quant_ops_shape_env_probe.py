"""What torchao's quantization operators do to the shape environment inside
``export_llm``'s ``to_edge_transform_and_lower``.

Run ``export_llm`` through it (under ``fastlower run`` for fastlower's lowering)::

    PYTHONPATH=. fastlower run --no-cache -m benchmarks.quant_ops_shape_env_probe ARGS...

Every fake dispatch of a ``torchao`` or ``EDGE_DO_NOT_DECOMP`` operator (outermost) is
wrapped: the ShapeEnv's state (``fastlower.in_process.retrace_quant_ops.shape_env_state``)
before and after, which ``run_decompositions`` call it ran in (numbered from 1 within the
``to_edge_transform_and_lower`` call; 0: outside one), whether its inputs have symbolic
sizes, whether a proxy (tracing) mode was active inside it, whether it repeats an
earlier call's key, the ShapeEnv fields it changed, how many operators it dispatched
inside, why torch's fake-tensor cache does not answer it (``_validate_cache_key``'s
reason), the kernels the operator has (``CompositeImplicitAutograd``,
``CompositeExplicitAutograd``, ``Meta``, a registered fake kernel) and, for an
``EDGE_DO_NOT_DECOMP`` operator, the operator it stands for. One ``QUANTSHAPEENV {json}``
line on stderr per ``to_edge_transform_and_lower`` call: counts and seconds by all of
these.
"""

from __future__ import annotations

import collections
import json
import sys
import time
from typing import Any

import executorch.exir.program._program as program
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.export import ExportedProgram

from fastlower.in_process.retrace_quant_ops import call_key, shape_env_changes

from .lowering_call_probe import run_export_llm

_ORIGINAL = program.to_edge_transform_and_lower
_DISPATCH = FakeTensorMode._dispatch_impl
_DECOMPOSE = ExportedProgram.run_decompositions
COUNTS: collections.Counter = collections.Counter()
SEEN: set = set()
SECONDS: collections.Counter = collections.Counter()
_STATE = {"active": False, "inner": 0, "retrace": 0, "retraces": 0}
_PROBED = ("torchao", "EDGE_DO_NOT_DECOMP")


def _symbolic(args: Any, kwargs: Any) -> bool:
    """Whether an input tensor's size or a size argument is symbolic."""
    import torch
    import torch.utils._pytree as pytree
    from torch.fx.experimental.symbolic_shapes import free_symbols

    return bool(free_symbols([leaf for leaf in pytree.tree_leaves((args, kwargs))
                              if isinstance(leaf, (torch.Tensor, torch.SymInt))]))


def _bypass(mode: Any, func: Any, args: Any, kwargs: Any) -> str:
    """Why torch's fake-tensor cache does not answer the call ("" when it could)."""
    from torch._subclasses.fake_tensor import _BypassDispatchCache

    try:
        mode._validate_cache_key(func, args, kwargs)
    except _BypassDispatchCache as e:
        return str(e.reason)
    return ""


def _kernels(func: Any) -> list:
    """The kernels ``func`` has, and the operator an ``EDGE_DO_NOT_DECOMP`` one stands for."""
    import torch

    found = [key for key in ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "Meta")
             if torch._C._dispatch_has_kernel_for_dispatch_key(
                 func.name(), getattr(torch._C.DispatchKey, key))]
    if torch._library.simple_registry.singleton.find(func.name()).fake_impl.kernel:
        found.append("fake")
    return found + [str(program.transform_op_to_aten_op.get(str(func), ""))]


def _dispatch(self: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    if not _STATE["active"]:
        _STATE["inner"] += 1
        return _DISPATCH(self, func, types, args, kwargs)
    if not str(func).startswith(_PROBED) or self.shape_env is None:
        return _DISPATCH(self, func, types, args, kwargs)
    from torch._C import _get_dispatch_mode
    from torch._C import _TorchDispatchModeKey
    proxy = _get_dispatch_mode(_TorchDispatchModeKey.PROXY) is not None
    key = call_key(func, args, kwargs)
    repeat = key in SEEN
    SEEN.add(key)
    symbolic = bool(_symbolic(args, kwargs))
    _STATE["active"], _STATE["inner"] = False, 0
    start = time.perf_counter()
    try:
        with shape_env_changes(self.shape_env) as changed:
            out = _DISPATCH(self, func, types, args, kwargs)
    finally:
        _STATE["active"] = True
    row = json.dumps([str(func), _STATE["retrace"], symbolic, proxy, repeat, sorted(changed),
                      _STATE["inner"], _bypass(self, func, args, kwargs), _kernels(func)])
    COUNTS[row] += 1
    SECONDS[row] += time.perf_counter() - start
    return out


def _decompose(self: Any, *args: Any, **kwargs: Any) -> Any:
    outer = _STATE["retrace"]
    _STATE["retraces"] += 1
    _STATE["retrace"] = _STATE["retraces"]
    try:
        return _DECOMPOSE(self, *args, **kwargs)
    finally:
        _STATE["retrace"] = outer


def _census(*args: Any, **kwargs: Any) -> Any:
    COUNTS.clear()
    SECONDS.clear()
    SEEN.clear()
    _STATE["retraces"] = 0
    _STATE["active"] = True
    try:
        return _ORIGINAL(*args, **kwargs)
    finally:
        _STATE["active"] = False
        print("QUANTSHAPEENV " + json.dumps(
            [[json.loads(k), n, round(SECONDS[k], 3)] for k, n in sorted(COUNTS.items())]),
            file=sys.stderr,
            flush=True)


def main(argv: list) -> None:
    FakeTensorMode._dispatch_impl = _dispatch
    ExportedProgram.run_decompositions = _decompose  # type: ignore[method-assign]
    run_export_llm(_census, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
