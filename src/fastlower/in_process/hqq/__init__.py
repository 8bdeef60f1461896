"""torchao's HQQ weight quantization (``export_llm``'s ``8da4w``, before the export)
computed by the native core with torchao's bits (:mod:`.native`), under a premise checked
once per process against torchao (:mod:`.premise`)."""

from .native import HqqVerificationError, compute, counts, ineligible, premise_holds
from .premise import same_bits

__all__ = ["HqqVerificationError", "compute", "counts", "ineligible", "premise_holds",
           "same_bits"]
