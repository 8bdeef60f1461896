"""fastlower's ``_gen_edge_manager_for_partitioners``: the edge stage of
``to_edge_transform_and_lower``, as ``FASTLOWER_EDGE_RETRACES`` asks.

* ``skip`` (the default): :func:`.decompose.gen_edge_manager_for_partitioners`, the
  retraces that provably change nothing skipped, and what they would still have
  written in node meta written the same way;
* ``all``: ExecuTorch's own function, every retrace run;
* ``verify``: every retrace that would be skipped runs anyway and its result is
  compared with the skip's (:func:`.verify.program_difference`: the program in the
  lowering cache's canonical form and its debug handles), raising
  :class:`EdgeStageVerificationError` at the first difference; the retraced program
  goes on, so the result is the reference's. (Running the whole reference stage a
  second time is not an option: on a program with unbacked symbols, export_llm's,
  a second ``run_decompositions`` of the same program fails in ``torch.export``.)

fastlower's ``to_edge_transform_and_lower`` routes ExecuTorch's function of that name
here (``fastlower.in_process.dispatch``: the calling thread only, for the call's duration).
"""

from __future__ import annotations

from typing import Any

from .. import dispatch
from ... import settings
from .decompose import gen_edge_manager_for_partitioners as skipping
from .verify import EdgeStageVerificationError

__all__ = ["EdgeStageVerificationError", "gen_edge_manager_for_partitioners"]


def gen_edge_manager_for_partitioners(*args: Any, **kwargs: Any) -> Any:
    """ExecuTorch's ``_gen_edge_manager_for_partitioners`` (same arguments: partitioners
    and ATen programs by method, the compile config, constant methods, whether to make
    an ETRecord; same result)."""
    mode = settings.choice(settings.EDGE_RETRACES)
    if mode == "all":
        return dispatch.reference_of("_gen_edge_manager_for_partitioners")(*args, **kwargs)
    return skipping(*args, verify=(mode == "verify"), **kwargs)
