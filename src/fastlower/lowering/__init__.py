"""Orchestration: partition, check, encode, plan, build, preprocess, apply.

``to_backend`` has two paths, as in the reference, each a small class over the
steps they share (:mod:`.steps`):

- :mod:`.single` (:func:`lower_program`): one program; the reference lowers each
  partition (fuse, build, preprocess, insert) before it fuses the next.
- :mod:`.multi` (:func:`lower_methods`): several methods; every partition of a
  method is fused and built before the next method is partitioned, then each
  backend preprocesses all its partitions together.

Where a broken rule or a failing backend stops the lowering is decided by
:class:`.order.ErrorOrder` alone; :mod:`.signature` builds the lowered program's
signature.
"""

from .multi import MultiMethodLowering, lower_methods
from .order import ErrorOrder
from .single import SingleProgramLowering, lower_program
from .steps import LoweringPath, MethodLowering, check_unmodified, make_fake_program

__all__ = [
    "ErrorOrder", "LoweringPath", "MethodLowering", "MultiMethodLowering", "SingleProgramLowering",
    "check_unmodified", "lower_methods", "lower_program", "make_fake_program",
]
