"""ExecuTorch's ``EdgeProgramManager.transform``, called by the pipeline between the
lowering's steps, run inside fastlower's lowering block.

``export_llm`` calls ``edge_manager.transform([ConvertToLinearPass()])`` between
``to_edge_transform_and_lower`` and ``to_executorch``: an ``ExportPass`` over the lowered
program, the kind of pass ``to_executorch`` runs. Outside a lowering step each new node's
``NodeSource`` deep-copies a ``from_node`` history by then as deep as every pass before it,
and each delegate call is run again on fake tensors: at stories110M's shape, 12 s of
py-spy samples, half of them in ``copy.deepcopy``. Inside the block
(``while_lowering.lowering_step``) the histories are shared and the delegates' fake
outputs known, each change with its premise, verify mode and switch; the passes are the
caller's, called by ExecuTorch's own ``transform``.

While fastlower is installed (``fastlower run``, ``fastlower.patch``), the method is
routed here (``fastlower.in_process.dispatch``); ``FASTLOWER_EDGE_TRANSFORM=outside``
calls ExecuTorch's method as it is.
"""

from __future__ import annotations

from typing import Any

from .. import settings
from .dispatch import reference_of
from .while_lowering import lowering_step

__all__ = ["transform"]


def transform(self: Any, *args: Any, **kwargs: Any) -> Any:
    """``EdgeProgramManager.transform``, ExecuTorch's, inside the lowering block."""
    method = reference_of("transform")
    if settings.choice(settings.EDGE_TRANSFORM) == "outside":
        return method(self, *args, **kwargs)
    with lowering_step():
        return method(self, *args, **kwargs)
