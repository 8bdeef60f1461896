"""torchao's quantization operators' fake outputs remembered in torch's fake dispatch,
so also inside the edge stage's retraces (under a shape environment with symbolic
sizes). :mod:`.memo` is the patch and its premise, :mod:`.targets` the operators taken
(torchao's and ExecuTorch's ``EDGE_DO_NOT_DECOMP`` stand-ins for them), :mod:`.shape_env`
the shape environment's state compared, :mod:`.outputs` how outputs are remade."""

from __future__ import annotations

from ..fake_outputs.quant_ops import call_key
from .memo import LAST, PATCH, Memo, RetraceQuantOpsVerificationError, remembering
from ..shape_env_state import shape_env_changes, shape_env_state, state_difference
from .targets import runs_torchao_quant_op

__all__ = ["LAST", "PATCH", "Memo", "RetraceQuantOpsVerificationError", "call_key",
           "remembering", "runs_torchao_quant_op", "shape_env_changes", "shape_env_state",
           "state_difference"]
