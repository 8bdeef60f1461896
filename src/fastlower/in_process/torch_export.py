"""torch.export's own steps, called by the pipeline around the lowering, run inside
fastlower's in-process block.

``export_llm`` exports its model twice (``torch.export.export`` with ``strict=True``, each
followed by ``run_decompositions({})``): at stories110M's shape 43 s of its process, as long
as fastlower's whole lowering window. Those retraces are the edge stage's kind, and the
same in-process changes apply to them: the heap frozen for the collector, torchao's
quantization operators' fake dispatch, torch's CompositeImplicitAutograd table and its
arithmetic on symbolic sizes remembered (``while_lowering.export_step``). None of them
changes a graph, a name or a value (each has its premise, its verify mode and its switch);
the steps are torch's own code, called with the caller's arguments.

While fastlower is installed (``fastlower run``, ``fastlower.patch``), both are routed here
(``fastlower.in_process.dispatch``); ``FASTLOWER_TORCH_EXPORT=outside`` calls torch's
functions as they are.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

from .. import settings
from .dispatch import reference_of
from .while_lowering import export_step

__all__ = ["export", "run_decompositions"]


def _inside(function: Callable[..., Any], args: Tuple[Any, ...],
            kwargs: Dict[str, Any]) -> Any:
    if settings.choice(settings.TORCH_EXPORT) == "outside":
        return function(*args, **kwargs)
    with export_step():
        return function(*args, **kwargs)


def export(*args: Any, **kwargs: Any) -> Any:
    """``torch.export.export``, torch's, inside the export block."""
    return _inside(reference_of("export"), args, kwargs)


def run_decompositions(self: Any, *args: Any, **kwargs: Any) -> Any:
    """``ExportedProgram.run_decompositions``, torch's, inside the export block."""
    return _inside(reference_of("run_decompositions"), (self, *args), kwargs)
