"""torchao's quantization operators' fake outputs remembered in torch's fake dispatch,
so also inside the edge stage's retraces (under a shape environment with symbolic
sizes). :mod:`.memo` is the patch and its premise, :mod:`.shape_env` the shape
environment's state compared, :mod:`.outputs` how outputs are remade."""

from __future__ import annotations

from ..fake_outputs.quant_ops import call_key
from .memo import LAST, PATCH, Memo, RetraceQuantOpsVerificationError, remembering
from .shape_env import shape_env_changes, shape_env_state, state_difference

__all__ = ["LAST", "PATCH", "Memo", "RetraceQuantOpsVerificationError", "call_key",
           "remembering", "shape_env_changes", "shape_env_state", "state_difference"]
