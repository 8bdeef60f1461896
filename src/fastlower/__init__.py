"""fastlower: a natively accelerated drop-in for ExecuTorch's ``to_backend``."""

from .api import to_backend
from .errors import (
    BackendNotFoundError, CyclicPartitionError, FastlowerError, GraphModifiedError,
    MethodWithoutProgramError, MissingPartitionTagsError, PartitionContractError,
    PartitionerEditError, SharedConstantError, TaggedOutputError,
    TaggedUserInputError, UnknownTagError,
)
from .report import LoweringReport, last_report
from .spec import MethodProgramsPartitionerSpec
from .state import disable_validation, strict_partitioners, strict_tags, validation_disabled

__all__ = [
    "to_backend", "validation_disabled", "disable_validation", "strict_tags", "strict_partitioners", "MethodProgramsPartitionerSpec",
    "LoweringReport", "last_report", "FastlowerError", "PartitionContractError",
    "BackendNotFoundError", "CyclicPartitionError", "GraphModifiedError",
    "MissingPartitionTagsError", "SharedConstantError", "TaggedOutputError",
    "TaggedUserInputError", "UnknownTagError", "MethodWithoutProgramError", "PartitionerEditError",
]
