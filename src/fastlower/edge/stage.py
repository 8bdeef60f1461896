"""fastlower's ``_gen_edge_manager_for_partitioners``: the edge stage of
``to_edge_transform_and_lower``, as ``FASTLOWER_EDGE_RETRACES`` asks.

* ``skip`` (the default): :func:`.decompose.gen_edge_manager_for_partitioners`, the
  retraces that provably change nothing skipped;
* ``all``: ExecuTorch's own function, every retrace run;
* ``verify``: both (fastlower's on copies of the programs and config, with the same
  partitioner objects), and
  :class:`EdgeStageVerificationError` naming the first difference (programs in the
  lowering cache's canonical form, the debug-handle ancestry, the ops kept from
  decomposition); the reference's result is returned.

fastlower's ``to_edge_transform_and_lower`` routes ExecuTorch's function of that name
here (``fastlower.dispatch``: the calling thread only, for the call's duration).
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional

from .. import dispatch, settings
from .decompose import gen_edge_manager_for_partitioners as skipping
from .verify import EdgeStageVerificationError, first_difference

__all__ = ["EdgeStageVerificationError", "gen_edge_manager_for_partitioners"]


def gen_edge_manager_for_partitioners(
    partitioner: Dict[str, List[Any]],
    aten_programs: Dict[str, Any],
    config: Any,
    constant_methods: Optional[Dict[str, Any]],
    generate_etrecord: Optional[bool] = False,
) -> Any:
    """ExecuTorch's ``_gen_edge_manager_for_partitioners`` (same arguments and result)."""
    mode = settings.edge_retraces()
    reference = dispatch.reference_of("_gen_edge_manager_for_partitioners")
    if mode == "all":
        return reference(partitioner, aten_programs, config, constant_methods,
                         generate_etrecord)
    if mode == "skip":
        return skipping(partitioner, aten_programs, config, constant_methods,
                        generate_etrecord)
    # verify: the fastlower run gets copies of the programs and config, so the reference
    # sees the caller's objects; partitioners are shared (not all can be copied)
    programs, config_copy = copy.deepcopy((aten_programs, config))
    fast = skipping(partitioner, programs, config_copy, copy.deepcopy(constant_methods),
                    generate_etrecord)
    expected = reference(partitioner, aten_programs, config, constant_methods,
                         generate_etrecord)
    difference = first_difference(expected, fast)
    if difference is not None:
        raise EdgeStageVerificationError(difference)
    return expected
