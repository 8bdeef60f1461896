"""One lowering of an adversarial program, as ExecuTorch or as fastlower in its default
mode, reduced to what is compared: the ``.pte`` bytes, or the error raised.

fastlower runs under ``fastlower.patch`` with the preprocess and lowering caches in the
folder given (so structural classes, cached templates and refit from earlier lowerings of
the same structure are all in play), one worker, every shortcut in its default mode.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional

import torch


@dataclass
class Outcome:
    pte: Optional[bytes] = None
    error: str = ""  # "ClassName: first line of the message"
    lowering_cache: str = ""  # fastlower: hit / miss / refit
    classes: Optional[dict] = None  # fastlower: the report's preprocess_classes
    refit: str = ""  # fastlower: why a refit was refused, if one was tried
    retraces: Optional[dict] = None  # fastlower: the report's edge_retraces

    def same_as(self, other: "Outcome") -> bool:
        return self.pte == other.pte and self.error == other.error

    def describe(self) -> str:
        if self.pte is None:
            return f"raises {self.error}"
        return f".pte {hashlib.sha256(self.pte).hexdigest()[:16]} ({len(self.pte)} bytes)"


def _error(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def reference(program: Any, partitioners: List[Any]) -> Outcome:
    from executorch.exir import to_edge_transform_and_lower

    try:
        manager = to_edge_transform_and_lower(program, partitioner=partitioners)
        return Outcome(pte=bytes(manager.to_executorch().buffer))
    except Exception as exc:  # the reference's rejection is an outcome to match
        return Outcome(error=_error(exc))


def fastlower(program: Any, partitioners: List[Any], cache_dir: Path) -> Outcome:
    # looked up inside the block, as a user's script does: fastlower.patch rebinds the
    # module's attribute, not a name a function bound before it
    import executorch.exir as exir

    import fastlower as fl
    import fastlower.preprocess
    from fastlower import patch

    try:
        with patch.installed(), fastlower.preprocess.options(workers=1, cache_dir=str(cache_dir)):
            manager = exir.to_edge_transform_and_lower(program, partitioner=partitioners)
            report = fl.last_report()
            pte = bytes(manager.to_executorch().buffer)
        return Outcome(pte=pte, lowering_cache=str(report.lowering_cache),
                       classes=report.preprocess_classes,
                       refit=str((report.refit or {}).get("refused", "")),
                       retraces=report.edge_retraces)
    except Exception as exc:
        return Outcome(error=_error(exc))


def run_outputs(pte: bytes, inputs: tuple) -> List[torch.Tensor]:
    """The ``.pte``'s outputs in ExecuTorch's runtime."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(pte)
    method = program.load_method("forward")
    outputs = method.execute([t.clone() for t in inputs])
    result = [o.clone() if isinstance(o, torch.Tensor) else o for o in outputs]
    del outputs, method, program
    return result


def largest_difference(a: bytes, b: bytes, inputs: tuple) -> float:
    """The largest absolute difference between two ``.pte``'s outputs on ``inputs``."""
    worst = 0.0
    for x, y in zip(run_outputs(a, inputs), run_outputs(b, inputs)):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            worst = max(worst, float((x - y).abs().nan_to_num(float("inf")).max()))
    return worst
