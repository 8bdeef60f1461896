"""What fastlower changes in its own process for each of its lowering steps
(``to_backend``, ``to_edge_transform_and_lower``, ``to_executorch``): one block, entered
by each step, nesting freely.

* :mod:`.heap_freeze`: the objects alive at the step's start frozen for the collector;
* :mod:`.node_history`: a new node's ``from_node`` history shared, not deep-copied;
* :mod:`.fake_outputs`: the fake outputs of delegate calls and quantization operators
  known without running them;
* :mod:`.retrace_quant_ops`: torchao's quantization operators' fake dispatch
  remembered, also in the edge stage's retraces (``FASTLOWER_RETRACE_QUANT_OPS``);
* :mod:`.preprocess.xnnpack_patterns`: XNNPACK's upsample and SDPA patterns not built
  for a graph without their operator;
* :mod:`.cia_ops`: torch's CompositeImplicitAutograd operators materialized into
  ``torch.ops`` once, not once per namespace in each retrace (``FASTLOWER_CIA_OPS``);
* :mod:`.sym_arith`: torch's arithmetic on symbolic sizes remembered per shape
  environment (``FASTLOWER_SYM_ARITH``);
* :mod:`.graph_code`: a graph module's generated Python compiled once per source text
  (``FASTLOWER_GRAPH_CODE``).

:func:`export_step` is the block of ``torch.export.export`` and
``ExportedProgram.run_decompositions`` called by the pipeline itself
(:mod:`.torch_export`): only the heap freeze and the four memos, which change how fast
torch computes, not what; no graph is touched.

Each is listed, with what it patches and how to turn it off, in docs/embedding.md.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

from .cia_ops import materialized_once
from .fake_outputs import known_outputs
from .graph_code import compiled_once
from .heap_freeze import frozen_heap
from .node_history import shared_history
from .retrace_quant_ops import remembering
from .sym_arith import remembered
from .xnnpack_patterns import skipped_when_absent

__all__ = ["export_step", "lowering_step"]

# inside one of the blocks in this thread or task: an export step there adds nothing (a
# retrace of the edge stage keeps the lowering's memos)
_INSIDE: ContextVar[bool] = ContextVar("fastlower_in_process_block", default=False)


@contextmanager
def _faster() -> Iterator[None]:
    """What both blocks hold: this task marked inside, the heap frozen, the four memos."""
    from .. import settings

    token = _INSIDE.set(True)
    try:
        with frozen_heap(), remembering(settings.choice(settings.RETRACE_QUANT_OPS)), \
                materialized_once(), remembered(), compiled_once():
            yield
    finally:
        _INSIDE.reset(token)


@contextmanager
def lowering_step() -> Iterator[None]:
    """The block of one lowering step (see the module)."""
    with _faster(), shared_history(), known_outputs(), skipped_when_absent():
        yield


@contextmanager
def export_step() -> Iterator[None]:
    """The block of one of torch.export's steps (see the module); inside a lowering step
    or another export step, nothing more."""
    if _INSIDE.get():
        yield
        return
    with _faster():
        yield
