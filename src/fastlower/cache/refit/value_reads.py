"""Where the reference reads a weight's value outside ``preprocess``, and whether a refit
may keep the stored checkpoint's result of that read for the new checkpoint.

A refit skips the edge stage and the partitioners: it keeps checkpoint A's decisions.
That holds only where no decision can depend on a value. ExecuTorch hands real tensors
to user code in four places:

* a partitioner's ``ops_to_not_decompose(program)`` and the filter it returns get the
  real program: they decide which operators stay whole;
* ``partition()`` gets a fake program whose parameters and buffers are fake tensors, but
  whose lifted constants are the real ones (``get_fake_program``);
* ``partition()`` gets a deep copy, all values real, when the program has no fake mode;
* a transform pass that takes the whole ``ExportedProgram`` (``ExportedProgramPassBase``,
  run by ``EdgeProgramManager.transform``) reads what it likes.

:func:`refused` names the first of these a refit cannot trust, and the call then lowers
for real. Trusted: XNNPACK's partitioners as ExecuTorch ships them (every method the
lowering calls and every node configuration from ExecuTorch's own modules; their checks
read operators, shapes, dtypes, graph structure and which node an argument is, and
compare lifted constants only for a quantized slice's parameters, which XNNPACK's
``preprocess`` cannot take as constants: "unsupported param type"); any partitioner
that keeps ExecuTorch's default choice (decompose everything) on programs without
lifted constants (tensors or script objects), where ``partition()`` sees no value. A
pass given the graph module alone sees no value (an Edge program's weights are inputs,
not attributes).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Tuple

from torch._guards import detect_fake_mode
from torch.export import ExportedProgram

# (module, qualified name) of ExecuTorch's default decomposition choice: keep nothing
_DEFAULT_CHOICE = ("executorch.exir.backend.partitioner", "Partitioner.ops_to_not_decompose")
# where XNNPACK's partitioners define what the lowering calls, and its node configurations
_XNNPACK_MODULES = ("executorch.exir.backend.canonical_partitioners.config_partitioner",
                    "executorch.backends.xnnpack.partition.xnnpack_partitioner")
_XNNPACK_METHODS = ("ops_to_not_decompose", "partition", "generate_partitions",
                    "generate_per_op_partitions", "get_matched_nodes_from_configs",
                    "_check_if_called_from_to_backend")
_XNNPACK_CONFIGS = "executorch.backends.xnnpack.partition.config."


def refused(partitioner: Any, transform_passes: Any, programs: Dict[str, ExportedProgram]) -> str:
    """Why a refit cannot keep A's decisions for these arguments ("" when it can)."""
    for each in _partitioners(partitioner):
        why = "" if _xnnpack(each) else _untrusted(each, programs)
        if why:
            return why
    for each in _passes(transform_passes):
        if _takes_program(each):
            return (f"the transform pass {type(each).__qualname__} takes the whole program "
                    "(an ExportedProgramPassBase) and may read its weights")
    if partitioner:
        for name, program in programs.items():
            if detect_fake_mode(tuple(n.meta.get("val") for n in program.graph.nodes
                                      if n.op == "placeholder")) is None:
                return (f"method {name!r} has no fake tensors, so its partitioner would be "
                        "given the real weights")
    return ""


def _where(cls: type, method: str) -> Tuple[str, str]:
    found = getattr(cls, method, None)
    return getattr(found, "__module__", "") or "", getattr(found, "__qualname__", "") or ""


def _xnnpack(partitioner: Any) -> bool:
    """An XNNPACK partitioner as ExecuTorch ships it (no method or configuration replaced)."""
    cls = type(partitioner)
    if not cls.__module__.startswith("executorch.backends.xnnpack.partition."):
        return False
    if any(_where(cls, m)[0] not in _XNNPACK_MODULES for m in _XNNPACK_METHODS):
        return False
    configs = getattr(partitioner, "target_partitioner_configs", None)
    return isinstance(configs, dict) and all(
        type(c).__module__.startswith(_XNNPACK_CONFIGS) for c in configs.values())


def _untrusted(partitioner: Any, programs: Dict[str, ExportedProgram]) -> str:
    """Why a partitioner other than XNNPACK's may read a value ("" when it cannot)."""
    name = type(partitioner).__qualname__
    if _where(type(partitioner), "ops_to_not_decompose") != _DEFAULT_CHOICE:
        return (f"the partitioner {name}'s ops_to_not_decompose is given the real weights "
                "and may read them")
    for method, program in programs.items():
        if program.constants:  # tensors, or script objects that may hold weights
            return (f"the partitioner {name} is given method {method!r}'s lifted constants "
                    "as they are and may read them")
    return ""


def _partitioners(partitioner: Any) -> Iterator[Any]:
    if partitioner is None:
        return
    groups = partitioner.values() if isinstance(partitioner, dict) else [partitioner]
    for group in groups:
        yield from (group if isinstance(group, (list, tuple)) else [group])


def _passes(passes: Any) -> Iterator[Any]:
    if passes is None:
        return
    if isinstance(passes, dict):
        for group in passes.values():
            yield from _passes(group)
    elif isinstance(passes, (list, tuple)):
        for each in passes:
            yield from _passes(each)
    elif isinstance(getattr(passes, "passes", None), list):  # a pass manager
        yield from _passes(passes.passes)
    else:
        yield passes


def _takes_program(each: Any) -> bool:
    from executorch.exir.pass_base import ExportedProgramPassBase

    return isinstance(each, ExportedProgramPassBase)
