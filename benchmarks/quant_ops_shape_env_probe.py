"""What torchao's quantization operators do to the shape environment inside
``export_llm``'s ``to_edge_transform_and_lower``.

Run ``export_llm`` through it (under ``fastlower run`` for fastlower's lowering)::

    PYTHONPATH=. fastlower run --no-cache -m benchmarks.quant_ops_shape_env_probe ARGS...

Every fake dispatch of a ``torchao`` operator (outermost) is wrapped: the ShapeEnv's state
(``fastlower.in_process.retrace_quant_ops.shape_env_state``) before and after, whether
the call ran inside ``run_decompositions``, whether its inputs have symbolic sizes,
whether a proxy (tracing) mode was active inside it, and how many operators it
dispatched inside. One ``QUANTSHAPEENV {json}`` line on stderr per
``to_edge_transform_and_lower`` call: counts by (operator, in a retrace, symbolic
inputs, ShapeEnv fields changed), and how many calls repeat an earlier call's key.
"""

from __future__ import annotations

import collections
import json
import sys
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
_STATE = {"active": False, "inner": 0, "retrace": 0}


def _symbolic(args: Any, kwargs: Any) -> bool:
    """Whether an input tensor's size or a size argument is symbolic."""
    import torch
    import torch.utils._pytree as pytree
    from torch.fx.experimental.symbolic_shapes import free_symbols

    return bool(free_symbols([leaf for leaf in pytree.tree_leaves((args, kwargs))
                              if isinstance(leaf, (torch.Tensor, torch.SymInt))]))


def _dispatch(self: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    if not _STATE["active"]:
        _STATE["inner"] += 1
        return _DISPATCH(self, func, types, args, kwargs)
    if "torchao" not in str(func) or self.shape_env is None:
        return _DISPATCH(self, func, types, args, kwargs)
    from torch._C import _get_dispatch_mode
    from torch._C import _TorchDispatchModeKey
    proxy = _get_dispatch_mode(_TorchDispatchModeKey.PROXY) is not None
    key = call_key(func, args, kwargs)
    repeat = key in SEEN
    SEEN.add(key)
    symbolic = bool(_symbolic(args, kwargs))
    _STATE["active"], _STATE["inner"] = False, 0
    try:
        with shape_env_changes(self.shape_env) as changed:
            out = _DISPATCH(self, func, types, args, kwargs)
    finally:
        _STATE["active"] = True
    COUNTS[json.dumps([str(func), bool(_STATE["retrace"]), symbolic, proxy, repeat,
                       sorted(changed), _STATE["inner"]])] += 1
    return out


def _decompose(self: Any, *args: Any, **kwargs: Any) -> Any:
    _STATE["retrace"] += 1
    try:
        return _DECOMPOSE(self, *args, **kwargs)
    finally:
        _STATE["retrace"] -= 1


def _census(*args: Any, **kwargs: Any) -> Any:
    COUNTS.clear()
    SEEN.clear()
    _STATE["active"] = True
    try:
        return _ORIGINAL(*args, **kwargs)
    finally:
        _STATE["active"] = False
        print("QUANTSHAPEENV " + json.dumps(
            [[json.loads(k), n] for k, n in sorted(COUNTS.items())]), file=sys.stderr,
            flush=True)


def main(argv: list) -> None:
    FakeTensorMode._dispatch_impl = _dispatch
    ExportedProgram.run_decompositions = _decompose  # type: ignore[method-assign]
    run_export_llm(_census, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
